package exchange

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// rabbitBindings and rabbitMatches are RabbitMQ's own topic exchange test
// (rabbit_tests.erl test_topic_matching, later unit_topic_exchange): binding key -> queue.
var rabbitBindings = []struct{ key, queue string }{
	{"a.b.c", "t1"}, {"a.*.c", "t2"}, {"a.#.b", "t3"}, {"a.b.b.c", "t4"}, {"#", "t5"},
	{"#.#", "t6"}, {"#.b", "t7"}, {"*.*", "t8"}, {"a.*", "t9"}, {"*.b.c", "t10"},
	{"a.#", "t11"}, {"a.#.#", "t12"}, {"b.b.c", "t13"}, {"a.b.b", "t14"}, {"a.b", "t15"},
	{"b.c", "t16"}, {"", "t17"}, {"*.*.*", "t18"}, {"vodka.martini", "t19"}, {"a.b.c", "t20"},
	{"*.#", "t21"}, {"#.*.#", "t22"}, {"*.#.#", "t23"}, {"#.#.#", "t24"}, {"*", "t25"},
	{"#.b.#", "t26"},
}

var rabbitMatches = []struct {
	key  string
	want []string
}{
	{"a.b.c", []string{"t1", "t2", "t5", "t6", "t10", "t11", "t12", "t18", "t20", "t21", "t22", "t23", "t24", "t26"}},
	{"a.b", []string{"t3", "t5", "t6", "t7", "t8", "t9", "t11", "t12", "t15", "t21", "t22", "t23", "t24", "t26"}},
	{"a.b.b", []string{"t3", "t5", "t6", "t7", "t11", "t12", "t14", "t18", "t21", "t22", "t23", "t24", "t26"}},
	{"", []string{"t5", "t6", "t17", "t24"}}, // "" has no words: "*" (t25) does not match
	{"b.c.c", []string{"t5", "t6", "t18", "t21", "t22", "t23", "t24", "t26"}},
	{"a.a.a.a.a", []string{"t5", "t6", "t11", "t12", "t21", "t22", "t23", "t24"}},
	{"vodka.gin", []string{"t5", "t6", "t8", "t21", "t22", "t23", "t24"}},
	{"vodka.martini", []string{"t5", "t6", "t8", "t19", "t21", "t22", "t23", "t24"}},
	{"b.b.c", []string{"t5", "t6", "t10", "t13", "t18", "t21", "t22", "t23", "t24", "t26"}},
	{"nothing.here.at.all", []string{"t5", "t6", "t21", "t22", "t23", "t24"}},
	{"oneword", []string{"t5", "t6", "t21", "t22", "t23", "t24", "t25"}},
}

// After removing t1, t5, t11, t19 and t21.
var rabbitMatchesAfterRemoval = []struct {
	key  string
	want []string
}{
	{"a.b.c", []string{"t2", "t6", "t10", "t12", "t18", "t20", "t22", "t23", "t24", "t26"}},
	{"a.b", []string{"t3", "t6", "t7", "t8", "t9", "t12", "t15", "t22", "t23", "t24", "t26"}},
	{"a.b.b", []string{"t3", "t6", "t7", "t12", "t14", "t18", "t22", "t23", "t24", "t26"}},
	{"", []string{"t6", "t17", "t24"}},
	{"b.c.c", []string{"t6", "t18", "t22", "t23", "t24", "t26"}},
	{"a.a.a.a.a", []string{"t6", "t12", "t22", "t23", "t24"}},
	{"vodka.gin", []string{"t6", "t8", "t22", "t23", "t24"}},
	{"vodka.martini", []string{"t6", "t8", "t22", "t23", "t24"}},
	{"b.b.c", []string{"t6", "t10", "t13", "t18", "t22", "t23", "t24", "t26"}},
	{"nothing.here.at.all", []string{"t6", "t22", "t23", "t24"}},
	{"oneword", []string{"t6", "t22", "t23", "t24", "t25"}},
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

func TestTopicRabbitMQSuite(t *testing.T) {
	r := NewRouter(Topic)
	for _, b := range rabbitBindings {
		r.Bind(Binding{Destination: q(b.queue), Key: b.key})
	}
	check := func(cases []struct {
		key  string
		want []string
	}) {
		t.Helper()
		for _, c := range cases {
			got := r.Route(c.key, nil, nil)
			checkUnique(t, got)
			if n := names(got); !slices.Equal(n, sorted(c.want)) {
				t.Errorf("Route(%q) = %v; want %v", c.key, n, sorted(c.want))
			}
		}
	}
	check(rabbitMatches)
	for _, i := range []int{0, 4, 10, 18, 20} {
		b := rabbitBindings[i]
		if !r.Unbind(Binding{Destination: q(b.queue), Key: b.key}) {
			t.Fatalf("Unbind %v = false", b)
		}
	}
	check(rabbitMatchesAfterRemoval)
	for _, b := range r.Bindings() {
		r.Unbind(b)
	}
	for _, key := range []string{"a.b.c", "b.b.c", ""} {
		if got := r.Route(key, nil, nil); len(got) != 0 {
			t.Errorf("after unbinding all, Route(%q) = %v", key, got)
		}
	}
	tr := r.(*router).idx.(*topicIndex)
	if !tr.root.unused() {
		t.Errorf("trie not pruned: %+v", tr.root)
	}
}

// TestTopicMatches is a table of single pattern/key cases, checked against both the router
// and the reference matcher.
func TestTopicMatches(t *testing.T) {
	tests := []struct {
		pattern, key string
		want         bool
	}{
		{"#", "", true},
		{"#", "a", true},
		{"#", "a.b", true},
		{"#", ".", true},
		{"*", "a", true},
		{"*", "", false}, // RabbitMQ: "" is zero words
		{"*", "a.b", false},
		{"*", ".", false}, // two empty words
		{"*.*", ".", true},
		{"*.*", "a", false},
		{"*.*", "a.b", true},
		{"*.*", "a.", true},
		{"a.*", "a.", true}, // second word empty
		{"a.*", "a", false},
		{"a.*", "a.b.c", false},
		{"a.#", "a", true},
		{"a.#", "a.b.c", true},
		{"a.#", "ab", false},
		{"a.#", "b.a", false},
		{"#.b", "b", true},
		{"#.b", "a.b", true},
		{"#.b", "a.b.c", false},
		{"#.b", "ab", false},
		{"a.#.b", "a.b", true},
		{"a.#.b", "a.x.y.b", true},
		{"a.#.b", "a.b.b", true},
		{"a.#.b", "a", false},
		{"a.#.b", "a.b.c", false},
		{"#.#", "", true},
		{"#.#", "a.b.c", true},
		{"a.#.#.b", "a.b", true},
		{"a.#.#.b", "a.x.b", true},
		{"a.#.#.b", "a.x.y.z.b", true},
		{"a.#.#.b", "a.x.y.z", false},
		{"*.#", "", false},
		{"*.#", "a", true},
		{"*.#", "a.b.c", true},
		{"#.*", "", false},
		{"#.*", "a", true},
		{"#.*", "a.b.c", true},
		{"#.*.#", "", false},
		{"#.*.#", "x", true},
		{"#.*.*.#", "x", false},
		{"#.*.*.#", "x.y", true},
		{"a..b", "a..b", true},
		{"a.*.b", "a..b", true},
		{"a.#.b", "a..b", true},
		{"a..b", "a.b", false},
		{"", "", true},
		{"", "a", false},
		{"", ".", false},
		{".", ".", true},
		{".", "", false},
		{"a.", "a.", true},
		{"a.", "a", false},
		{"*.", ".", true},
		{"#.", "", false},
		{"#.", ".", true},
		{"#.", "a.b.", true},
		{"a.b", "a.b", true},
		{"a.b", "a.b.c", false},
		{"a.b", "a", false},
		{"a*", "a*", true}, // wildcards only as whole words
		{"a*", "ab", false},
		{"a#", "a.b", false},
		{"a.b.c", "a.*.c", false}, // wildcards in the routing key are literal words
		{"a.*.c", "a.*.c", true},
		{"a.#", "a.#", true},
		{"#.a.#.a.#", "a.a", true},
		{"#.a.#.a.#", "b.a.b.b.a.b", true},
		{"#.a.#.a.#", "b.a.b.b.b", false},
	}
	for _, tt := range tests {
		r := NewRouter(Topic)
		r.Bind(Binding{Destination: q("q"), Key: tt.pattern})
		got := len(r.Route(tt.key, nil, nil)) == 1
		if got != tt.want {
			t.Errorf("pattern %q, key %q: routed = %v; want %v", tt.pattern, tt.key, got, tt.want)
		}
		if ref := refMatch(refWords(tt.pattern), refWords(tt.key)); ref != tt.want {
			t.Errorf("reference matcher: pattern %q, key %q = %v; want %v", tt.pattern, tt.key, ref, tt.want)
		}
	}
}

func TestTopicPattern(t *testing.T) {
	tests := []struct{ key, want string }{
		{"", ""},
		{"a", "a"},
		{"#.#", "#"},
		{"#.#.#", "#"},
		{"#.*", "*.#"},
		{"*.#", "*.#"},
		{"#.*.#", "*.#"},
		{"*.#.*.#.a.#.#", "*.*.#.a.#"},
		{"a.#.#.b", "a.#.b"},
		{"*.*", "*.*"},
		{"a..#", "a..#"},
		{".", "."},
	}
	for _, tt := range tests {
		if got := strings.Join(topicPattern(tt.key), "."); got != tt.want {
			t.Errorf("topicPattern(%q) = %q; want %q", tt.key, got, tt.want)
		}
	}
}

// refWords and refMatch are a direct transcription of the topic rules, with no trie and no
// rewriting of patterns.
func refWords(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ".")
}

func refMatch(p, k []string) bool {
	if len(p) == 0 {
		return len(k) == 0
	}
	switch p[0] {
	case "#":
		for i := 0; i <= len(k); i++ {
			if refMatch(p[1:], k[i:]) {
				return true
			}
		}
		return false
	case "*":
		return len(k) > 0 && refMatch(p[1:], k[1:])
	}
	return len(k) > 0 && k[0] == p[0] && refMatch(p[1:], k[1:])
}

// TestTopicRandom compares the trie with the reference matcher on random patterns and keys
// over a small alphabet (including empty words), with several patterns per queue so that
// de-duplication is exercised, and with bindings removed again.
func TestTopicRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	patWords := []string{"a", "b", "", "*", "#", "*", "#"}
	keyWords := []string{"a", "b", "", "*", "#"}
	join := func(words []string, n int) string {
		w := make([]string, n)
		for i := range w {
			w[i] = words[rng.IntN(len(words))]
		}
		return strings.Join(w, ".")
	}
	for round := range 40 {
		r := NewRouter(Topic)
		type bound struct{ pattern, queue string }
		var order []bound
		bs := map[bound]bool{} // what is bound: Bind is idempotent, so a set
		for i := range 60 {
			b := bound{join(patWords, rng.IntN(6)), fmt.Sprintf("q%d", i%23)}
			order = append(order, b)
			bs[b] = true
			r.Bind(Binding{Destination: q(b.queue), Key: b.pattern})
		}
		if round%2 == 1 { // drop about a third again
			for i := 0; i < len(order); i += 3 {
				r.Unbind(Binding{Destination: q(order[i].queue), Key: order[i].pattern})
				delete(bs, order[i])
			}
		}
		if r.Len() != len(bs) {
			t.Fatalf("Len = %d; want %d", r.Len(), len(bs))
		}
		out := make([]Destination, 0, 4)
		for range 300 {
			key := join(keyWords, rng.IntN(7))
			want := map[string]bool{}
			for b := range bs {
				if refMatch(refWords(b.pattern), refWords(key)) {
					want[b.queue] = true
				}
			}
			out = r.Route(key, nil, out[:0])
			checkUnique(t, out)
			got := names(out)
			wantNames := make([]string, 0, len(want))
			for n := range want {
				wantNames = append(wantNames, n)
			}
			slices.Sort(wantNames)
			if !slices.Equal(got, wantNames) {
				t.Fatalf("round %d key %q: routed %v; want %v (bindings %v)", round, key, got, wantNames, bs)
			}
		}
	}
}

// TestTopicManyMatches routes to more destinations than dedupFrom compares pairwise.
func TestTopicManyMatches(t *testing.T) {
	r := NewRouter(Topic)
	for i := range 100 {
		r.Bind(Binding{Destination: q(fmt.Sprintf("q%d", i)), Key: "#"})
		r.Bind(Binding{Destination: q(fmt.Sprintf("q%d", i)), Key: "a.*"})
		if i%2 == 0 {
			r.Bind(Binding{Destination: q(fmt.Sprintf("q%d", i)), Key: "*.b"})
		}
		r.Bind(Binding{Destination: q(fmt.Sprintf("only-a-%d", i)), Key: "a.#"})
	}
	got := r.Route("a.b", nil, []Destination{q("prefix")})
	if got[0] != q("prefix") {
		t.Fatalf("prefix lost: %v", got[:1])
	}
	checkUnique(t, got[1:])
	if len(got) != 201 {
		t.Fatalf("routed to %d; want 200 (+ prefix)", len(got)-1)
	}
	if got := r.Route("x", nil, nil); len(got) != 100 {
		t.Fatalf("Route(x) routed to %d; want 100", len(got))
	}
}

// TestTopicPathological checks that patterns with several '#' separated by words do not make
// matching exponential in the key length (255 bytes, 128 words).
func TestTopicPathological(t *testing.T) {
	r := NewRouter(Topic)
	pats := []string{"#.a.#.a.#.a.#.a.#.a.#", "#.a.#.a.#.a.#.a.#.b", "*.#.*.#.*.#.*.#.*.#", "#.#.#.#.#.#.#.#"}
	for i, p := range pats {
		r.Bind(Binding{Destination: q(fmt.Sprint(i)), Key: p})
	}
	key := strings.Repeat("a.", 127) + "a"
	start := time.Now()
	out := r.Route(key, nil, nil)
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Route took %v", d)
	}
	if n := names(out); !slices.Equal(n, []string{"0", "2", "3"}) {
		t.Errorf("Route = %v; want [0 2 3]", n)
	}
}

func TestTopicPrune(t *testing.T) {
	r := NewRouter(Topic)
	keys := []string{"a.b.c", "a.b", "a.*.#", "#", "*", "a..", ""}
	for _, k := range keys {
		r.Bind(Binding{Destination: q("x"), Key: k})
		r.Bind(Binding{Destination: q("y"), Key: k})
	}
	r.Bind(Binding{Destination: q("x"), Key: "#.#"}) // same trie node as "#"
	for _, k := range keys {
		r.Unbind(Binding{Destination: q("x"), Key: k})
	}
	if n := names(r.Route("a.b.c", nil, nil)); !slices.Equal(n, []string{"x", "y"}) {
		t.Fatalf("Route = %v; want [x y] (x still bound by #.#)", n)
	}
	r.RemoveDestination(q("x"))
	r.RemoveDestination(q("y"))
	tr := r.(*router).idx.(*topicIndex)
	if !tr.root.unused() {
		t.Fatalf("trie not pruned: lits=%v star=%v hash=%v", tr.root.lits, tr.root.star, tr.root.hash)
	}
}

var sectors = []string{"tech", "energy", "health", "finance", "retail", "auto", "media", "telecom", "mining", "utility"}

// fillTopic binds n queues q.<sector>.<i> with keys stock.<sector>.<i>, plus wildcard
// bindings: stock.<sector>.* for each sector, stock.#, #.42 and *.tech.#.
func fillTopic(r Router, n int) {
	for i := range n {
		s, num := sectors[i%len(sectors)], i/len(sectors)
		r.Bind(Binding{Destination: q(fmt.Sprintf("q.%s.%d", s, num)), Key: fmt.Sprintf("stock.%s.%d", s, num)})
	}
	for _, s := range sectors {
		r.Bind(Binding{Destination: q("sector." + s), Key: "stock." + s + ".*"})
	}
	r.Bind(Binding{Destination: q("all-stock"), Key: "stock.#"})
	r.Bind(Binding{Destination: q("n42"), Key: "#.42"})
	r.Bind(Binding{Destination: q("tech-any"), Key: "*.tech.#"})
}

func TestTopicFill(t *testing.T) {
	r := NewRouter(Topic)
	fillTopic(r, 10000)
	got := names(r.Route("stock.tech.42", nil, nil))
	want := []string{"all-stock", "n42", "q.tech.42", "sector.tech", "tech-any"}
	if !slices.Equal(got, want) {
		t.Fatalf("Route = %v; want %v", got, want)
	}
}

func BenchmarkRouteTopic10k(b *testing.B) {
	r := NewRouter(Topic)
	fillTopic(r, 10000)
	out := make([]Destination, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		out = r.Route("stock.tech.42", nil, out[:0])
	}
	if len(out) != 5 {
		b.Fatalf("routed to %v", out)
	}
}

// TestTopicManyHashNodes reaches more '#' nodes in one Route than topicMatcher tracks
// without a map.
func TestTopicManyHashNodes(t *testing.T) {
	r := NewRouter(Topic)
	var want []string
	for i := range 40 {
		// "#", "*.#", "*.*.#", ...: all distinct hash nodes, all matching a 50-word key.
		key := strings.Repeat("*.", i) + "#"
		r.Bind(Binding{Destination: q(fmt.Sprintf("s%02d", i)), Key: key})
		r.Bind(Binding{Destination: q(fmt.Sprintf("a%02d", i)), Key: strings.Repeat("a.", i) + "#.a"})
		want = append(want, fmt.Sprintf("s%02d", i), fmt.Sprintf("a%02d", i))
	}
	slices.Sort(want)
	key := strings.Repeat("a.", 49) + "a"
	if got := names(r.Route(key, nil, nil)); !slices.Equal(got, want) {
		t.Fatalf("Route = %v; want %v", got, want)
	}
	for _, b := range rabbitBindings {
		r.Bind(Binding{Destination: q(b.queue), Key: b.key})
	}
	got := names(r.Route("a.b", nil, nil))
	if n := len(got); n != 14+3 { // RabbitMQ's 14, s00 ("#"), s01 ("*.#"), s02 ("*.*.#")
		t.Fatalf("Route(a.b) = %v", got)
	}
}

// TestTopicCover exercises cover directly, including a pass that starts before an earlier one.
func TestTopicCover(t *testing.T) {
	m := topicMatcher{key: "a.b.c"}
	h1, h2 := &topicNode{}, &topicNode{}
	if stop, done := m.cover(h1, 4); done || stop != -1 {
		t.Fatalf("first cover = %d, %v", stop, done)
	}
	if _, done := m.cover(h1, 4); !done {
		t.Fatal("cover of the same start not done")
	}
	if _, done := m.cover(h1, 6); !done {
		t.Fatal("cover of a later start not done")
	}
	if stop, done := m.cover(h1, 2); done || stop != 4 {
		t.Fatalf("earlier cover = %d, %v; want 4, false", stop, done)
	}
	for range len(m.covered) {
		m.cover(&topicNode{}, 0)
	}
	if stop, done := m.cover(h2, 2); done || stop != -1 || m.more == nil {
		t.Fatalf("overflow cover = %d, %v", stop, done)
	}
	if stop, done := m.cover(h2, 0); done || stop != 2 {
		t.Fatalf("earlier overflow cover = %d, %v; want 2, false", stop, done)
	}
	if _, done := m.cover(h2, 4); !done {
		t.Fatal("later overflow cover not done")
	}
}
