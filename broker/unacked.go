package broker

import (
	"slices"
	"sort"
)

// unackedList is a channel's deliveries awaiting acknowledgement, in tag
// order, which is the order they were delivered (channel.mu).
//
// Every operation an acknowledgement needs costs O(log n) at most, in
// whatever order the client settles: a delivery settled out of order
// leaves a hole (a pending with a nil qe that keeps its tag), so the list
// stays sorted by tag and is searched by bisection; holes at the front go
// as the front moves, and the list is compacted once holes outnumber the
// live deliveries, so each hole is moved or skipped a bounded number of
// times. basic.ack multiple=true costs the deliveries it settles (and the
// holes among them).
type unackedList struct {
	s    []pending // s[head:] sorted by tag; holes have qe == nil
	head int
	live int
	// timed is where the consumer-timeout checker's look for the oldest
	// delivery with a timeout starts: no entry in s[head:timed] is one.
	timed int
}

// holesAt is the number of holes the list may have before it compacts,
// whatever the number of live deliveries.
const holesAt = 64

func (l *unackedList) len() int { return l.live }

// push appends p, whose tag is greater than every tag in the list.
func (l *unackedList) push(p pending) {
	if len(l.s) == cap(l.s) && l.head+l.holes() >= len(l.s)/2 && len(l.s) > 0 {
		l.compact()
	}
	l.s = append(l.s, p)
	l.live++
}

func (l *unackedList) holes() int { return len(l.s) - l.head - l.live }

// find returns the index of the live delivery tagged tag, or -1. Acks
// mostly name the oldest delivery: the front is looked at first.
func (l *unackedList) find(tag uint64) int {
	if l.head >= len(l.s) {
		return -1
	}
	if f := &l.s[l.head]; f.tag >= tag {
		if f.tag != tag || f.qe == nil {
			return -1
		}
		return l.head
	}
	lo, hi := l.head+1, len(l.s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l.s[m].tag < tag {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(l.s) || l.s[lo].tag != tag || l.s[lo].qe == nil {
		return -1
	}
	return lo
}

// take removes the delivery tagged tag and appends it to dst; false if it
// is not outstanding.
func (l *unackedList) take(tag uint64, dst []pending) ([]pending, bool) {
	i := l.find(tag)
	if i < 0 {
		return dst, false
	}
	dst = append(dst, l.s[i])
	l.s[i] = pending{tag: tag}
	l.live--
	l.tidy()
	return dst, true
}

// takeUpTo removes the delivery tagged tag and every earlier one, and
// appends them to dst in tag order; false (and nothing removed) if tag is
// not outstanding.
func (l *unackedList) takeUpTo(tag uint64, dst []pending) ([]pending, bool) {
	i := l.find(tag)
	if i < 0 {
		return dst, false
	}
	for j := l.head; j <= i; j++ {
		if l.s[j].qe != nil {
			dst = append(dst, l.s[j])
			l.live--
		}
	}
	clear(l.s[l.head : i+1])
	l.head = i + 1
	l.tidy()
	return dst, true
}

// takeAll removes every delivery and returns them in tag order.
func (l *unackedList) takeAll() []pending {
	out := l.s[l.head:]
	if l.holes() > 0 {
		out = slices.DeleteFunc(out, func(p pending) bool { return p.qe == nil })
	}
	*l = unackedList{}
	return out
}

// takeIf removes the deliveries for which f is true and returns them in
// tag order. It costs the whole list: it is for rare events (a consumer
// timing out).
func (l *unackedList) takeIf(f func(*pending) bool) []pending {
	var out []pending
	for i := l.head; i < len(l.s); i++ {
		if p := &l.s[i]; p.qe != nil && f(p) {
			out = append(out, *p)
			*p = pending{tag: p.tag}
			l.live--
		}
	}
	l.tidy()
	return out
}

// restore puts back deliveries taken earlier (tx.rollback), keeping the
// tag order. It costs the whole list: rollbacks are rare.
func (l *unackedList) restore(ps []pending) {
	if len(ps) == 0 {
		return
	}
	u := append(l.takeAll(), ps...)
	sort.Slice(u, func(i, j int) bool { return u[i].tag < u[j].tag })
	l.s, l.live = u, len(u)
}

// tidy drops the holes at the front, and compacts the list when the holes
// outnumber the live deliveries.
func (l *unackedList) tidy() {
	for l.head < len(l.s) && l.s[l.head].qe == nil {
		l.s[l.head] = pending{}
		l.head++
	}
	switch {
	case l.live == 0:
		clear(l.s[l.head:])
		l.s, l.head, l.timed = l.s[:0], 0, 0
	case l.holes() > holesAt && l.holes() > l.live:
		l.compact()
	}
}

// compact moves the live deliveries to the front of the buffer, dropping
// the holes, and gives memory back when the buffer is mostly empty.
func (l *unackedList) compact() {
	n := 0
	for i := l.head; i < len(l.s); i++ {
		if l.s[i].qe != nil {
			l.s[n] = l.s[i]
			n++
		}
	}
	clear(l.s[n:])
	s := l.s[:n]
	if cap(s) > 1024 && cap(s) > 4*n {
		s = append(make([]pending, 0, 2*n), s...)
	}
	l.s, l.head, l.timed = s, 0, 0
}

// oldestTimed returns the oldest outstanding delivery made to a consumer
// whose time is recorded, or nil. Deliveries with no timeout (basic.get)
// and holes before it are passed once: later calls start after them.
func (l *unackedList) oldestTimed() *pending {
	i := max(l.timed, l.head)
	for ; i < len(l.s); i++ {
		if p := &l.s[i]; p.qe != nil && p.cons != nil && p.at != 0 {
			break
		}
	}
	l.timed = i
	if i == len(l.s) {
		return nil
	}
	return &l.s[i]
}
