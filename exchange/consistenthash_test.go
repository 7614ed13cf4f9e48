package exchange

import (
	"math"
	"strconv"
	"testing"
)

func TestConsistentHashShares(t *testing.T) {
	r := NewRouter(ConsistentHash)
	weights := map[string]int{"q1": 1, "q2": 2, "q3": 5}
	total := 0
	for q, w := range weights {
		r.Bind(Binding{Destination: Destination{DestQueue, q}, Key: strconv.Itoa(w)})
		total += w
	}
	const n = 100_000
	got := map[string]int{}
	first := map[string]string{}
	for i := range n {
		k := "key-" + strconv.Itoa(i)
		ds := r.Route(k, nil, nil)
		if len(ds) != 1 {
			t.Fatalf("Route(%q) = %v, want one destination", k, ds)
		}
		got[ds[0].Name]++
		if i < 1000 {
			first[k] = ds[0].Name
		}
	}
	for q, w := range weights {
		want := float64(w) / float64(total)
		share := float64(got[q]) / n
		if math.Abs(share-want) > 0.02 {
			t.Errorf("%s: share %.4f, want %.4f ± 0.02 (weight %d of %d)", q, share, want, w, total)
		}
	}
	// The same key goes to the same queue while the bindings stay.
	for k, q := range first {
		if ds := r.Route(k, nil, nil); ds[0].Name != q {
			t.Fatalf("Route(%q) moved from %s to %s", k, q, ds[0].Name)
		}
	}
	// Adding a binding moves keys only to the new queue.
	r.Bind(Binding{Destination: Destination{DestQueue, "q4"}, Key: "2"})
	moved := 0
	for k, q := range first {
		d := r.Route(k, nil, nil)[0].Name
		if d != q {
			moved++
			if d != "q4" {
				t.Fatalf("Route(%q) moved from %s to %s, not to the new queue", k, q, d)
			}
		}
	}
	if moved == 0 {
		t.Fatal("no key moved to the new queue")
	}
	// Bind order does not matter.
	r2 := NewRouter(ConsistentHash)
	for _, q := range []string{"q4", "q3", "q2", "q1"} {
		w := map[string]string{"q1": "1", "q2": "2", "q3": "5", "q4": "2"}[q]
		r2.Bind(Binding{Destination: Destination{DestQueue, q}, Key: w})
	}
	for k := range first {
		if a, b := r.Route(k, nil, nil)[0], r2.Route(k, nil, nil)[0]; a != b {
			t.Fatalf("Route(%q): %v and %v with the same bindings made in another order", k, a, b)
		}
	}
}

func TestConsistentHashEmptyAndWeights(t *testing.T) {
	r := NewRouter(ConsistentHash)
	if ds := r.Route("k", nil, nil); len(ds) != 0 {
		t.Fatalf("empty ring routed to %v", ds)
	}
	for _, tt := range []struct {
		key string
		ok  bool
	}{{"1", true}, {"65536", true}, {"0", false}, {"-3", false}, {"x", false}, {"", false}, {"65537", false}} {
		if err := ValidateHashWeight(tt.key); (err == nil) != tt.ok {
			t.Errorf("ValidateHashWeight(%q) = %v, want ok=%v", tt.key, err, tt.ok)
		}
	}
}

func TestModulusHash(t *testing.T) {
	r := NewRouter(ModulusHash)
	for i := range 4 {
		r.Bind(Binding{Destination: Destination{DestQueue, "q" + strconv.Itoa(i)}, Key: "ignored" + strconv.Itoa(i)})
	}
	const n = 40_000
	got := map[string]int{}
	for i := range n {
		k := strconv.Itoa(i)
		ds := r.Route(k, nil, nil)
		if len(ds) != 1 {
			t.Fatalf("Route(%q) = %v", k, ds)
		}
		if again := r.Route(k, nil, nil); again[0] != ds[0] {
			t.Fatalf("Route(%q) not stable", k)
		}
		got[ds[0].Name]++
	}
	for q, c := range got {
		if share := float64(c) / n; math.Abs(share-0.25) > 0.02 {
			t.Errorf("%s: share %.4f, want 0.25 ± 0.02", q, share)
		}
	}
	if len(got) != 4 {
		t.Fatalf("routed to %d queues, want 4", len(got))
	}
}

func TestParseType(t *testing.T) {
	for _, s := range []string{"direct", "fanout", "topic", "headers", "x-consistent-hash", "x-modulus-hash"} {
		k, ok := ParseType(s)
		if !ok || k.String() != s {
			t.Errorf("ParseType(%q) = %v, %v", s, k, ok)
		}
	}
	if _, ok := ParseType("x-delayed-message"); ok {
		t.Error("ParseType(x-delayed-message) = ok")
	}
}

func BenchmarkConsistentHashRoute(b *testing.B) {
	r := NewRouter(ConsistentHash)
	for i := range 8 {
		r.Bind(Binding{Destination: Destination{DestQueue, "q" + strconv.Itoa(i)}, Key: "100"})
	}
	out := make([]Destination, 0, 4)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		out = r.Route("order-12345", nil, out[:0])
	}
}
