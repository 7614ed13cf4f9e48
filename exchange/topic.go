package exchange

import (
	"cmp"
	"slices"
	"strings"

	"github.com/warrenmq/warren/amqp"
)

// topicNode is a node of the binding-key trie. The edge into a node is one word of a binding
// key: a literal word (possibly empty), "*" or "#". A binding whose key ends at a node puts its
// destination in dests.
type topicNode struct {
	parent *topicNode
	word   string // label of the edge from parent
	lits   map[string]*topicNode
	star   *topicNode
	hash   *topicNode
	dests  destSet
}

// topicIndex is a topic exchange's trie, walked word by word as RabbitMQ's
// rabbit_db_topic_exchange:trie_match does, so routing cost depends on the routing key and
// the wildcard branches it meets, not on the number of bindings.
type topicIndex struct {
	root topicNode
}

func (x *topicIndex) add(e *bindingEntry) {
	n := &x.root
	for _, w := range topicPattern(e.b.Key) {
		n = n.child(w, true)
	}
	n.dests.add(e.b.Destination)
}

func (x *topicIndex) remove(e *bindingEntry) {
	n := &x.root
	for _, w := range topicPattern(e.b.Key) {
		if n = n.child(w, false); n == nil {
			return
		}
	}
	n.dests.remove(e.b.Destination)
	for n != &x.root && n.unused() {
		p := n.parent
		p.detach(n)
		n = p
	}
}

// topicPattern splits a binding key into the words of its trie path. The empty key has no
// words (RabbitMQ: split_topic_key(<<>>) -> []). A run of consecutive "*" and "#" words that
// contains a "#" matches any sequence of at least as many words as the run has "*", so it is
// rewritten as those "*" followed by a single "#" ("#.#" -> "#", "#.*" -> "*.#",
// "#.*.#" -> "*.#"). Equivalent keys then share a node and no "#" node has a "#" child.
func topicPattern(key string) []string {
	if key == "" {
		return nil
	}
	words := strings.Split(key, ".")
	out := words[:0] // in place: a rewritten run is never longer than the run
	for i := 0; i < len(words); {
		if !isWildcard(words[i]) {
			out = append(out, words[i])
			i++
			continue
		}
		stars, hash := 0, false
		for ; i < len(words) && isWildcard(words[i]); i++ {
			if words[i] == "*" {
				stars++
			} else {
				hash = true
			}
		}
		for range stars {
			out = append(out, "*")
		}
		if hash {
			out = append(out, "#")
		}
	}
	return out
}

func isWildcard(w string) bool { return w == "*" || w == "#" }

// child returns n's child along word w, creating it if create is set; nil if absent.
func (n *topicNode) child(w string, create bool) *topicNode {
	var slot **topicNode
	switch w {
	case "*":
		slot = &n.star
	case "#":
		slot = &n.hash
	default:
		if c := n.lits[w]; c != nil || !create {
			return c
		}
		if n.lits == nil {
			n.lits = make(map[string]*topicNode)
		}
		c := &topicNode{parent: n, word: w}
		n.lits[w] = c
		return c
	}
	if *slot == nil && create {
		*slot = &topicNode{parent: n, word: w}
	}
	return *slot
}

func (n *topicNode) detach(c *topicNode) {
	switch c.word {
	case "*":
		n.star = nil
	case "#":
		n.hash = nil
	default:
		if delete(n.lits, c.word); len(n.lits) == 0 {
			n.lits = nil
		}
	}
}

func (n *topicNode) unused() bool {
	return n.dests.empty() && len(n.lits) == 0 && n.star == nil && n.hash == nil
}

func (x *topicIndex) route(key string, _ amqp.Table, out []Destination) []Destination {
	m := topicMatcher{key: key, out: out}
	start := len(out)
	p := 0
	if key == "" {
		p = len(key) + 1 // RabbitMQ: the empty routing key has no words, not one empty word
	}
	m.match(&x.root, p)
	if m.hits > 1 {
		// Several trie nodes matched; the same destination may be bound at more than one.
		return dedupFrom(m.out, start)
	}
	return m.out
}

// topicMatcher is the state of one Route call; it lives on the caller's stack.
//
// The remaining words of the routing key are given by p, the byte offset where the next word
// starts: p <= len(key) means a word starts at p (it may be empty), p == len(key)+1 means no
// words remain.
//
// Every (node, p) state is visited at most once: a literal or "*" node is entered only from
// its parent's state, and for "#" nodes cover remembers which suffixes were already tried.
// So a node emits its destinations at most once and patterns like "#.a.#.a.#" cost
// O(nodes × words) instead of the exponential backtracking of a naive matcher.
type topicMatcher struct {
	key      string
	out      []Destination
	hits     int // nodes whose destinations were appended
	ncovered int
	covered  [16]hashCover
	more     map[*topicNode]int // overflow of covered, rarely needed
}

// hashCover says that "#" node n has been matched against every suffix of the key from word
// offset from on.
type hashCover struct {
	n    *topicNode
	from int
}

// match is RabbitMQ's trie_match: node n against the words from offset p.
func (m *topicMatcher) match(n *topicNode, p int) {
	if p > len(m.key) {
		if !n.dests.empty() {
			m.out = append(m.out, n.dests.dests...)
			m.hits++
		}
		if n.hash != nil {
			m.skipAny(n.hash, p)
		}
		return
	}
	w, next := m.word(p)
	if c := n.lits[w]; c != nil {
		m.match(c, next)
	}
	if n.star != nil {
		m.match(n.star, next)
	}
	if n.hash != nil {
		m.skipAny(n.hash, p)
	}
}

// skipAny is RabbitMQ's trie_match_skip_any: "#" node h absorbs zero, one, two ... of the
// words from p, and the rest is matched below h.
func (m *topicMatcher) skipAny(h *topicNode, p int) {
	stop, done := m.cover(h, p)
	if done {
		return
	}
	for {
		m.match(h, p)
		if p > len(m.key) {
			return
		}
		if _, p = m.word(p); p == stop {
			return
		}
	}
}

// word returns the word starting at offset p <= len(key) and the offset after it.
func (m *topicMatcher) word(p int) (string, int) {
	rest := m.key[p:]
	if i := strings.IndexByte(rest, '.'); i >= 0 {
		return rest[:i], p + i + 1
	}
	return rest, len(m.key) + 1
}

// cover records that h is about to be matched against the suffixes from p on. It reports
// done if that was already done from p or earlier; otherwise the caller stops at stop, where
// an earlier pass (if any) began.
func (m *topicMatcher) cover(h *topicNode, p int) (stop int, done bool) {
	const never = -1 // offsets are >= 0
	for i := range m.covered[:m.ncovered] {
		c := &m.covered[i]
		if c.n == h {
			if c.from <= p {
				return 0, true
			}
			stop, c.from = c.from, p
			return stop, false
		}
	}
	if from, ok := m.more[h]; ok {
		if from <= p {
			return 0, true
		}
		m.more[h] = p
		return from, false
	}
	if m.ncovered < len(m.covered) {
		m.covered[m.ncovered] = hashCover{h, p}
		m.ncovered++
		return never, false
	}
	if m.more == nil {
		m.more = make(map[*topicNode]int)
	}
	m.more[h] = p
	return never, false
}

// dedupLinearMax is the most destinations dedupFrom de-duplicates by pairwise comparison,
// keeping their order; above it, it sorts.
const dedupLinearMax = 32

// dedupFrom removes repeated destinations from out[start:] in place and returns the shortened
// slice. It does not allocate.
func dedupFrom(out []Destination, start int) []Destination {
	seg := out[start:]
	n := 0
	if len(seg) <= dedupLinearMax {
	next:
		for i := range seg {
			for j := range n {
				if seg[j] == seg[i] {
					continue next
				}
			}
			seg[n] = seg[i]
			n++
		}
	} else {
		slices.SortFunc(seg, compareDestinations)
		n = len(slices.Compact(seg))
	}
	clear(seg[n:])
	return out[:start+n]
}

func compareDestinations(a, b Destination) int {
	if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}
