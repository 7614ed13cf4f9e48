package exchange

import (
	"bytes"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/warrenmq/warren/amqp"
)

// bindingEntry is one stored binding. Indexes keep pointers to it, so a binding is found again
// on removal by identity rather than by comparing argument tables.
type bindingEntry struct {
	b   Binding
	seq uint64 // insertion order, for Bindings
}

type bindingID struct {
	dest Destination
	key  string
}

// bindingSet owns binding identity (destination, key, argument table) and insertion order for
// one exchange. The zero value is empty and ready.
type bindingSet struct {
	seq    uint64
	n      int
	byID   map[bindingID][]*bindingEntry // bindings differing only in arguments share an ID
	byDest map[Destination][]*bindingEntry
}

// add stores b unless an identical binding exists; it returns the stored entry and whether it
// is new.
func (s *bindingSet) add(b Binding) (*bindingEntry, bool) {
	id := bindingID{b.Destination, b.Key}
	for _, e := range s.byID[id] {
		if argsEqual(e.b.Args, b.Args) {
			return e, false
		}
	}
	if s.byID == nil {
		s.byID = make(map[bindingID][]*bindingEntry)
		s.byDest = make(map[Destination][]*bindingEntry)
	}
	b.Args = maps.Clone(b.Args)
	s.seq++
	e := &bindingEntry{b: b, seq: s.seq}
	s.byID[id] = append(s.byID[id], e)
	s.byDest[b.Destination] = append(s.byDest[b.Destination], e)
	s.n++
	return e, true
}

// find returns the entry of the binding identical to b, or nil if there is none.
func (s *bindingSet) find(b Binding) *bindingEntry {
	for _, e := range s.byID[bindingID{b.Destination, b.Key}] {
		if argsEqual(e.b.Args, b.Args) {
			return e
		}
	}
	return nil
}

// remove deletes the binding identical to b and returns its entry, or nil if there is none.
func (s *bindingSet) remove(b Binding) *bindingEntry {
	e := s.find(b)
	if e != nil {
		s.unlinkID(e)
		deleteEntry(s.byDest, e.b.Destination, e)
		s.n--
	}
	return e
}

// removeDestination deletes every binding to d and returns their entries.
func (s *bindingSet) removeDestination(d Destination) []*bindingEntry {
	es := s.byDest[d]
	delete(s.byDest, d)
	for _, e := range es {
		s.unlinkID(e)
	}
	s.n -= len(es)
	return es
}

func (s *bindingSet) unlinkID(e *bindingEntry) {
	deleteEntry(s.byID, bindingID{e.b.Destination, e.b.Key}, e)
}

// deleteEntry removes e from m[k], deleting the key when no entry remains.
func deleteEntry[K comparable](m map[K][]*bindingEntry, k K, e *bindingEntry) {
	es := m[k]
	i := slices.Index(es, e)
	if i < 0 {
		return
	}
	if es = slices.Delete(es, i, i+1); len(es) == 0 {
		delete(m, k)
	} else {
		m[k] = es
	}
}

func (s *bindingSet) len() int { return s.n }

// snapshot returns the bindings in insertion order.
func (s *bindingSet) snapshot() []Binding {
	es := make([]*bindingEntry, 0, s.n)
	for _, l := range s.byDest {
		es = append(es, l...)
	}
	slices.SortFunc(es, func(a, b *bindingEntry) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	out := make([]Binding, len(es))
	for i, e := range es {
		out[i] = e.b
	}
	return out
}

// argsEqual reports whether two binding argument tables are the same for binding identity.
// Like RabbitMQ, which compares typed field tables, it is strict about types (int32(1) and
// int64(1) differ); nil and empty tables are equal.
func argsEqual(a, b amqp.Table) bool { return tablesIdentical(a, b) }

func tablesIdentical(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok || !valuesIdentical(va, vb) {
			return false
		}
	}
	return true
}

func valuesIdentical(a, b any) bool {
	if x, ok := asTable(a); ok {
		y, ok := asTable(b)
		return ok && tablesIdentical(x, y)
	}
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !valuesIdentical(x[i], y[i]) {
				return false
			}
		}
		return true
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case time.Time:
		y, ok := b.(time.Time)
		return ok && x.Equal(y)
	}
	return reflect.DeepEqual(a, b)
}

// asTable returns v as a map if it is a field table (amqp.Table or its underlying type).
func asTable(v any) (map[string]any, bool) {
	switch t := v.(type) {
	case amqp.Table:
		return t, true
	case map[string]any:
		return t, true
	}
	return nil, false
}

// destSetIndexAt is the size above which a destSet keeps a position map instead of scanning.
const destSetIndexAt = 16

// destSet is a set of destinations with a reference count each: several bindings (different
// arguments, or binding keys that meet at one trie node) may lead to one destination. dests
// is contiguous so that Route appends it with a single copy. The zero value is empty.
type destSet struct {
	dests []Destination
	refs  []int32
	pos   map[Destination]int // index into dests; nil until len(dests) > destSetIndexAt
}

func (s *destSet) find(d Destination) int {
	if s.pos != nil {
		if i, ok := s.pos[d]; ok {
			return i
		}
		return -1
	}
	for i := range s.dests {
		if s.dests[i] == d {
			return i
		}
	}
	return -1
}

func (s *destSet) add(d Destination) {
	if i := s.find(d); i >= 0 {
		s.refs[i]++
		return
	}
	s.dests = append(s.dests, d)
	s.refs = append(s.refs, 1)
	switch {
	case s.pos != nil:
		s.pos[d] = len(s.dests) - 1
	case len(s.dests) > destSetIndexAt:
		s.pos = make(map[Destination]int, len(s.dests))
		for i, x := range s.dests {
			s.pos[x] = i
		}
	}
}

// remove drops one reference to d and the destination itself with its last reference.
// Removal moves the last destination into the freed slot, so Route's order is not the order
// of binding.
func (s *destSet) remove(d Destination) {
	i := s.find(d)
	if i < 0 {
		return
	}
	if s.refs[i]--; s.refs[i] > 0 {
		return
	}
	last := len(s.dests) - 1
	if i != last {
		s.dests[i], s.refs[i] = s.dests[last], s.refs[last]
		if s.pos != nil {
			s.pos[s.dests[i]] = i
		}
	}
	s.dests[last] = Destination{}
	s.dests, s.refs = s.dests[:last], s.refs[:last]
	if s.pos != nil {
		delete(s.pos, d)
	}
	if last == 0 {
		*s = destSet{}
	}
}

func (s *destSet) empty() bool { return len(s.dests) == 0 }
