package exchange

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/warrenmq/warren/amqp"
)

func q(name string) Destination  { return Destination{Kind: DestQueue, Name: name} }
func ex(name string) Destination { return Destination{Kind: DestExchange, Name: name} }

// names returns the names of ds, exchanges prefixed with "x:", sorted.
func names(ds []Destination) []string {
	out := make([]string, 0, len(ds))
	for _, d := range ds {
		if d.Kind == DestExchange {
			out = append(out, "x:"+d.Name)
		} else {
			out = append(out, d.Name)
		}
	}
	slices.Sort(out)
	return out
}

// checkUnique reports an error if ds holds a destination twice. It may be called from
// goroutines other than the test's.
func checkUnique(t *testing.T, ds []Destination) {
	t.Helper()
	seen := make(map[Destination]bool)
	for _, d := range ds {
		if seen[d] {
			t.Errorf("destination %v routed twice in %v", d, ds)
			return
		}
		seen[d] = true
	}
}

var allKinds = []Kind{Direct, Fanout, Topic, Headers}

func TestNewRouterUnknownKind(t *testing.T) {
	if r := NewRouter(Kind(42)); r != nil {
		t.Fatalf("NewRouter(42) = %v; want nil", r)
	}
}

func TestBindIdempotent(t *testing.T) {
	for _, k := range allKinds {
		t.Run(k.String(), func(t *testing.T) {
			r := NewRouter(k)
			b := Binding{Destination: q("q1"), Key: "a.b", Args: amqp.Table{"x-match": "any", "h": "v"}}
			if !r.Bind(b) {
				t.Fatal("first Bind = false")
			}
			// Same binding, args an equal but distinct table.
			if r.Bind(Binding{Destination: q("q1"), Key: "a.b", Args: amqp.Table{"h": "v", "x-match": "any"}}) {
				t.Fatal("second Bind of an equal binding = true")
			}
			if r.Len() != 1 {
				t.Fatalf("Len = %d; want 1", r.Len())
			}
			// Distinct bindings: other key, other args, other destination kind.
			for _, nb := range []Binding{
				{Destination: q("q1"), Key: "a.c", Args: b.Args},
				{Destination: q("q1"), Key: "a.b", Args: amqp.Table{"x-match": "any", "h": "w"}},
				{Destination: q("q1"), Key: "a.b", Args: amqp.Table{"x-match": "any", "h": []byte("v")}},
				{Destination: ex("q1"), Key: "a.b", Args: b.Args},
			} {
				if !r.Bind(nb) {
					t.Fatalf("Bind(%+v) = false; want a new binding", nb)
				}
			}
			if r.Len() != 5 {
				t.Fatalf("Len = %d; want 5", r.Len())
			}
			if !r.Has(Binding{Destination: q("q1"), Key: "a.b", Args: amqp.Table{"h": "v", "x-match": "any"}}) {
				t.Fatal("Has = false")
			}
			if !r.Unbind(Binding{Destination: q("q1"), Key: "a.b", Args: amqp.Table{"h": "v", "x-match": "any"}}) {
				t.Fatal("Unbind = false")
			}
			if r.Has(b) {
				t.Fatal("Has after Unbind = true")
			}
			if r.Unbind(b) {
				t.Fatal("second Unbind = true")
			}
			if r.Unbind(Binding{Destination: q("nope"), Key: "a.b"}) {
				t.Fatal("Unbind of an unknown binding = true")
			}
			if r.Len() != 4 {
				t.Fatalf("Len = %d; want 4", r.Len())
			}
		})
	}
}

func TestArgsEqual(t *testing.T) {
	tests := []struct {
		a, b amqp.Table
		want bool
	}{
		{nil, nil, true},
		{nil, amqp.Table{}, true},
		{amqp.Table{"a": int32(1)}, amqp.Table{"a": int32(1)}, true},
		{amqp.Table{"a": int32(1)}, amqp.Table{"a": int64(1)}, false}, // typed, as RabbitMQ
		{amqp.Table{"a": "x"}, amqp.Table{"a": []byte("x")}, false},
		{amqp.Table{"a": []byte("x")}, amqp.Table{"a": []byte("x")}, true},
		{amqp.Table{"a": nil}, amqp.Table{"a": nil}, true},
		{amqp.Table{"a": nil}, amqp.Table{}, false},
		{amqp.Table{"t": amqp.Table{"x": []any{"a", int64(2)}}}, amqp.Table{"t": amqp.Table{"x": []any{"a", int64(2)}}}, true},
		{amqp.Table{"t": amqp.Table{"x": []any{"a", int64(2)}}}, amqp.Table{"t": amqp.Table{"x": []any{"a", int64(3)}}}, false},
		{amqp.Table{"t": amqp.Table{}}, amqp.Table{"t": map[string]any{}}, true},
		{amqp.Table{"d": amqp.Decimal{Scale: 2, Value: 5}}, amqp.Table{"d": amqp.Decimal{Scale: 2, Value: 5}}, true},
	}
	for i, tt := range tests {
		if got := argsEqual(tt.a, tt.b); got != tt.want {
			t.Errorf("%d: argsEqual(%v, %v) = %v; want %v", i, tt.a, tt.b, got, tt.want)
		}
		if got := argsEqual(tt.b, tt.a); got != tt.want {
			t.Errorf("%d: argsEqual(%v, %v) = %v; want %v", i, tt.b, tt.a, got, tt.want)
		}
	}
}

func TestBindCopiesArgs(t *testing.T) {
	r := NewRouter(Headers)
	args := amqp.Table{"k": "v"}
	r.Bind(Binding{Destination: q("q"), Args: args})
	args["k"] = "changed"
	if got := names(r.Route("", amqp.Table{"k": "v"}, nil)); !slices.Equal(got, []string{"q"}) {
		t.Fatalf("after caller changed its table, Route = %v; want [q]", got)
	}
}

func TestBindingsOrderAndSnapshot(t *testing.T) {
	for _, k := range allKinds {
		t.Run(k.String(), func(t *testing.T) {
			r := NewRouter(k)
			var want []Binding
			for i := range 50 {
				b := Binding{Destination: q(fmt.Sprintf("q%d", i%7)), Key: fmt.Sprintf("k.%d", i)}
				if i%3 == 0 {
					b.Args = amqp.Table{"n": int64(i)}
				}
				r.Bind(b)
				want = append(want, b)
			}
			r.Unbind(want[10])
			want = slices.Delete(want, 10, 11)
			r.Bind(want[0]) // no-op, keeps its place
			got := r.Bindings()
			if len(got) != len(want) || r.Len() != len(want) {
				t.Fatalf("len(Bindings) = %d, Len = %d; want %d", len(got), r.Len(), len(want))
			}
			for i := range got {
				if got[i].Destination != want[i].Destination || got[i].Key != want[i].Key || !argsEqual(got[i].Args, want[i].Args) {
					t.Fatalf("Bindings[%d] = %+v; want %+v", i, got[i], want[i])
				}
			}
			got[0].Key = "mutated"
			if r.Bindings()[0].Key == "mutated" {
				t.Fatal("Bindings returned shared slice")
			}
		})
	}
}

func TestRemoveDestination(t *testing.T) {
	for _, k := range allKinds {
		t.Run(k.String(), func(t *testing.T) {
			r := NewRouter(k)
			for i := range 10 {
				key := fmt.Sprintf("k%d", i%3)
				r.Bind(Binding{Destination: q("gone"), Key: key, Args: amqp.Table{"i": int64(i)}})
				r.Bind(Binding{Destination: q("stays"), Key: key, Args: amqp.Table{"i": int64(i)}})
			}
			r.Bind(Binding{Destination: ex("gone"), Key: "k0"}) // same name, other kind
			if n := r.RemoveDestination(q("gone")); n != 10 {
				t.Fatalf("RemoveDestination = %d; want 10", n)
			}
			if n := r.RemoveDestination(q("gone")); n != 0 {
				t.Fatalf("second RemoveDestination = %d; want 0", n)
			}
			if r.Len() != 11 {
				t.Fatalf("Len = %d; want 11", r.Len())
			}
			for _, b := range r.Bindings() {
				if b.Destination == q("gone") {
					t.Fatalf("binding %+v survived", b)
				}
			}
			// Nothing routes to the removed queue any more, whatever the key.
			for _, key := range []string{"k0", "k1", "k2"} {
				out := r.Route(key, amqp.Table{"i": int64(0)}, nil)
				if slices.Contains(out, q("gone")) {
					t.Fatalf("Route(%q) = %v still has the removed queue", key, out)
				}
			}
			if n := r.RemoveDestination(q("stays")); n != 10 {
				t.Fatalf("RemoveDestination(stays) = %d; want 10", n)
			}
			if n := r.RemoveDestination(ex("gone")); n != 1 || r.Len() != 0 {
				t.Fatalf("RemoveDestination(x:gone) = %d, Len = %d; want 1, 0", n, r.Len())
			}
			if out := r.Route("k0", nil, nil); len(out) != 0 {
				t.Fatalf("empty router routed to %v", out)
			}
		})
	}
}

// TestRouteKeepsPrefix checks that Route appends after what out already holds and does not
// de-duplicate against it.
func TestRouteKeepsPrefix(t *testing.T) {
	for _, k := range allKinds {
		t.Run(k.String(), func(t *testing.T) {
			r := NewRouter(k)
			r.Bind(Binding{Destination: q("a"), Key: "k"})
			r.Bind(Binding{Destination: q("b"), Key: "k"})
			r.Bind(Binding{Destination: q("b"), Key: "#"})
			out := r.Route("k", nil, []Destination{q("a"), q("z")})
			if len(out) != 4 || out[0] != q("a") || out[1] != q("z") {
				t.Fatalf("Route = %v; want [a z] followed by a and b", out)
			}
			checkUnique(t, out[2:])
		})
	}
}

// TestRouteNoAllocs checks the contract that Route does not allocate when out has capacity.
func TestRouteNoAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation")
	}
	headers := amqp.Table{"format": "pdf", "type": "report", "n": int32(7), "x-trace": "1"}
	tests := []struct {
		kind Kind
		key  string
		min  int // at least this many destinations routed
	}{
		{Direct, "key.3", 2},
		{Fanout, "", 100},
		{Topic, "stock.tech.42", 5},
		{Topic, "a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a", 3},
		{Topic, "", 1},
		{Headers, "", 3},
	}
	for _, tt := range tests {
		t.Run(tt.kind.String()+"/"+tt.key, func(t *testing.T) {
			r := NewRouter(tt.kind)
			switch tt.kind {
			case Direct:
				fillDirect(r, 1000)
				r.Bind(Binding{Destination: q("extra"), Key: "key.3"})
			case Fanout:
				fillFanout(r, 100)
			case Topic:
				fillTopic(r, 10000)
				for _, k := range []string{"#", "#.a.#.a.#", "a.#", "*.a.#"} {
					r.Bind(Binding{Destination: q("p" + k), Key: k})
				}
			case Headers:
				fillHeaders(r, 100)
			}
			out := make([]Destination, 0, 256)
			var got []Destination
			allocs := testing.AllocsPerRun(200, func() {
				got = r.Route(tt.key, headers, out[:0])
			})
			if allocs != 0 {
				t.Errorf("Route allocated %.1f times per call", allocs)
			}
			if len(got) < tt.min {
				t.Errorf("Route returned %d destinations; want >= %d", len(got), tt.min)
			}
			checkUnique(t, got)
		})
	}
}

// TestRouteConcurrent runs Route from many goroutines at once, as the broker does under its
// read lock; -race reports any write to shared state.
func TestRouteConcurrent(t *testing.T) {
	routers := map[Kind]Router{}
	for _, k := range allKinds {
		routers[k] = NewRouter(k)
	}
	fillDirect(routers[Direct], 100)
	fillFanout(routers[Fanout], 100)
	fillTopic(routers[Topic], 1000)
	for _, k := range []string{"#", "#.a.#", "stock.#", "*.*.*"} {
		routers[Topic].Bind(Binding{Destination: q("p" + k), Key: k})
	}
	fillHeaders(routers[Headers], 100)
	headers := amqp.Table{"format": "pdf", "type": "report"}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			out := make([]Destination, 0, 8)
			for i := range 500 {
				for _, r := range routers {
					key := fmt.Sprintf("stock.s%d.%d", (g+i)%10, i%100)
					out = r.Route(key, headers, out[:0])
					checkUnique(t, out)
				}
			}
		})
	}
	wg.Wait()
}

// TestVersion: the version changes with every change of the bindings and
// only then, so that a cache keyed by it is never stale.
func TestVersion(t *testing.T) {
	for _, k := range []Kind{Direct, Fanout, Topic, Headers} {
		r := NewRouter(k)
		v := r.Version()
		step := func(what string, changed bool) {
			t.Helper()
			if nv := r.Version(); (nv != v) != changed {
				t.Fatalf("%v: %s: version %d -> %d, changed want %v", k, what, v, nv, changed)
			} else {
				v = nv
			}
		}
		r.Bind(Binding{Destination: q("a"), Key: "k"})
		step("bind", true)
		r.Bind(Binding{Destination: q("a"), Key: "k"})
		step("bind again", false)
		r.Route("k", nil, nil)
		step("route", false)
		r.Unbind(Binding{Destination: q("b"), Key: "k"})
		step("unbind of nothing", false)
		r.Bind(Binding{Destination: ex("x"), Key: "k"})
		step("bind exchange", true)
		r.RemoveDestination(q("nothing"))
		step("remove nothing", false)
		r.RemoveDestination(q("a"))
		step("remove a", true)
		r.Unbind(Binding{Destination: ex("x"), Key: "k"})
		step("unbind", true)
	}
}
