package exchange

import (
	"fmt"
	"slices"
	"testing"

	"github.com/warrenmq/warren/amqp"
)

// fillFanout binds n queues q-<i>.
func fillFanout(r Router, n int) {
	for i := range n {
		r.Bind(Binding{Destination: q(fmt.Sprintf("q-%d", i))})
	}
}

func TestFanoutRoute(t *testing.T) {
	r := NewRouter(Fanout)
	if got := r.Route("k", nil, nil); len(got) != 0 {
		t.Fatalf("empty fanout routed to %v", got)
	}
	r.Bind(Binding{Destination: q("a"), Key: "ignored"})
	r.Bind(Binding{Destination: q("a"), Key: "other"}) // second binding, same queue
	r.Bind(Binding{Destination: q("b")})
	r.Bind(Binding{Destination: ex("e"), Key: "#"})
	for _, key := range []string{"", "k", "a.b.c", "#"} {
		got := r.Route(key, amqp.Table{"h": 1}, nil)
		checkUnique(t, got)
		if n := names(got); !slices.Equal(n, []string{"a", "b", "x:e"}) {
			t.Errorf("Route(%q) = %v; want [a b x:e]", key, n)
		}
	}
	r.Unbind(Binding{Destination: q("a"), Key: "ignored"})
	if n := names(r.Route("", nil, nil)); !slices.Equal(n, []string{"a", "b", "x:e"}) {
		t.Errorf("a still has a binding; Route = %v", n)
	}
	r.Unbind(Binding{Destination: q("a"), Key: "other"})
	if n := names(r.Route("", nil, nil)); !slices.Equal(n, []string{"b", "x:e"}) {
		t.Errorf("Route = %v; want [b x:e]", n)
	}
}

func TestFanoutMany(t *testing.T) {
	r := NewRouter(Fanout)
	fillFanout(r, 100)
	for i := 0; i < 100; i += 2 {
		r.Unbind(Binding{Destination: q(fmt.Sprintf("q-%d", i))})
	}
	got := r.Route("", nil, nil)
	checkUnique(t, got)
	if len(got) != 50 {
		t.Fatalf("routed to %d queues; want 50", len(got))
	}
	for _, d := range got {
		var i int
		fmt.Sscanf(d.Name, "q-%d", &i)
		if i%2 == 0 {
			t.Fatalf("routed to unbound %v", d)
		}
	}
}

func BenchmarkRouteFanout100(b *testing.B) {
	r := NewRouter(Fanout)
	fillFanout(r, 100)
	out := make([]Destination, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		out = r.Route("", nil, out[:0])
	}
	if len(out) != 100 {
		b.Fatalf("routed to %d", len(out))
	}
}
