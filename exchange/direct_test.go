package exchange

import (
	"fmt"
	"slices"
	"testing"
)

// fillDirect binds n queues q-<i> with keys key.<i>.
func fillDirect(r Router, n int) {
	for i := range n {
		r.Bind(Binding{Destination: q(fmt.Sprintf("q-%d", i)), Key: fmt.Sprintf("key.%d", i)})
	}
}

func TestDirectRoute(t *testing.T) {
	r := NewRouter(Direct)
	for _, b := range []Binding{
		{Destination: q("a"), Key: "k"},
		{Destination: q("b"), Key: "k"},
		{Destination: q("a"), Key: "k2"},
		{Destination: q("empty"), Key: ""},
		{Destination: ex("e"), Key: "k"},
		{Destination: q("star"), Key: "*"},
		{Destination: q("hash"), Key: "#"},
		{Destination: q("dots"), Key: "a.b"},
	} {
		r.Bind(b)
	}
	// Same queue, same key, different args: one binding more, still routed once.
	r.Bind(Binding{Destination: q("a"), Key: "k", Args: map[string]any{"x": int64(1)}})
	tests := []struct {
		key  string
		want []string
	}{
		{"k", []string{"a", "b", "x:e"}},
		{"k2", []string{"a"}},
		{"", []string{"empty"}},
		{"K", nil},
		{"k ", nil},
		{"x", nil},              // no wildcards in direct exchanges
		{"*", []string{"star"}}, // ... but the literal key matches
		{"#", []string{"hash"}},
		{"a.b", []string{"dots"}},
		{"a", nil},
	}
	for _, tt := range tests {
		got := r.Route(tt.key, nil, nil)
		checkUnique(t, got)
		if n := names(got); !slices.Equal(n, tt.want) && !(len(n) == 0 && len(tt.want) == 0) {
			t.Errorf("Route(%q) = %v; want %v", tt.key, n, tt.want)
		}
	}
	r.Unbind(Binding{Destination: q("a"), Key: "k"})
	if n := names(r.Route("k", nil, nil)); !slices.Equal(n, []string{"a", "b", "x:e"}) {
		t.Errorf("after unbinding one of two bindings of a: Route(k) = %v", n)
	}
	r.Unbind(Binding{Destination: q("a"), Key: "k", Args: map[string]any{"x": int64(1)}})
	if n := names(r.Route("k", nil, nil)); !slices.Equal(n, []string{"b", "x:e"}) {
		t.Errorf("after unbinding both: Route(k) = %v", n)
	}
}

func BenchmarkRouteDirect(b *testing.B) {
	r := NewRouter(Direct)
	fillDirect(r, 10000)
	out := make([]Destination, 0, 16)
	b.ReportAllocs()
	for b.Loop() {
		out = r.Route("key.4242", nil, out[:0])
	}
	if len(out) != 1 {
		b.Fatalf("routed to %v", out)
	}
}
