package queue

import (
	"encoding/binary"
	"slices"
	"strings"

	"github.com/warrenmq/warren/amqp"
)

// Message groups (Config.GroupHeader, the x-message-group-header queue
// argument). A message's group is the value of that header (a message
// without it is in no group). All ready messages of one group go to one
// consumer at a time, in queue order: the group's owner, which it stays
// while it has unacknowledged deliveries of the group. A group without an
// owner (free) goes to the next consumer with credit, round robin; a
// consumer takes its own groups' messages first, round robin among them,
// then free groups, oldest first. Other consumers meanwhile take other
// groups, so a slow consumer holds up its groups only. A group becomes
// free when its owner has nothing unacknowledged of it left, or goes away
// (its unacknowledged deliveries then stay its own). A requeued message
// takes its place again at the head of its group. Messages in no group
// go to any consumer, in order.
//
// The messages stay in the queue's ready list, in queue order (TTL,
// length limits, purge and snapshots see them as always); each group
// indexes its ready messages by id. One delivered from the middle of the
// ready list leaves a hole there (its id kept, its message gone), dropped
// when it reaches the head: holes counts them. Consumer priorities and
// message priorities do not apply in such a queue; it is never paged out.
// basic.get takes the oldest ready message whatever its group.

// flagTaken marks a hole in a ready list: a message delivered from the
// middle of it.
const flagTaken = 1 << 30

// groupState is the groups of a queue.
type groupState struct {
	header string
	byKey  map[string]*msgGroup
	// free is the groups with ready messages and no owner, in the order
	// they became so.
	free groupFIFO
	// held is the group of each unacknowledged delivery counted in one.
	held map[uint64]*msgGroup
}

func newGroupState(header string) *groupState {
	return &groupState{header: header, byKey: make(map[string]*msgGroup), held: make(map[uint64]*msgGroup)}
}

// msgGroup is one group: its ready messages by id, its owner and how
// many of its deliveries are unacknowledged.
type msgGroup struct {
	key     string // "" is the messages in no group, never owned
	owner   *Consumer
	unacked int
	// requeued precede fresh: a message was delivered, and so requeued,
	// only after every older message of its group.
	requeued seqHeap
	fresh    seqFIFO
	// in is the FIFO the group waits in (free or its owner's), nil when
	// it has no ready message; gen tells its entry there from stale ones.
	in  *groupFIFO
	gen uint32
}

func (g *msgGroup) ready() int { return len(g.requeued) + g.fresh.len() }

// drop removes ready message seq from the group's index.
func (g *msgGroup) drop(seq uint64) {
	if len(g.requeued) > 0 {
		if g.requeued[0] == seq {
			g.requeued.pop()
			return
		}
		for i, s := range g.requeued {
			if s == seq {
				g.requeued.removeAt(i)
				return
			}
		}
	}
	g.fresh.remove(seq)
}

// groupKey appends the group key of the message with header to b: ""
// when it has none, else the header value's type octet and encoding.
func groupKey(b []byte, header []byte, name string) []byte {
	typ, raw, ok := amqp.PeekHeader(header, name)
	if !ok {
		return b
	}
	return append(append(b, typ), raw...)
}

// groupOf returns the group of m, made if need be when create is set.
func (gs *groupState) groupOf(m *Message, create bool) *msgGroup {
	var buf [64]byte
	var k []byte
	if m != nil {
		k = groupKey(buf[:0], m.Header, gs.header)
	}
	if g, ok := gs.byKey[string(k)]; ok {
		return g
	}
	if !create {
		return nil
	}
	g := &msgGroup{key: string(k)}
	gs.byKey[g.key] = g
	return g
}

// add indexes ready entry s (new, restored or requeued) in its group.
func (gs *groupState) add(s *slot, requeued bool) {
	g := gs.groupOf(s.msg, true)
	if requeued {
		g.requeued.push(s.seq)
	} else {
		g.fresh.push(s.seq)
	}
	if g.in == nil {
		gs.place(g)
	}
}

// place puts g, which has ready messages, at the back of its owner's
// FIFO, or of free when it has no owner that is still a consumer.
func (gs *groupState) place(g *msgGroup) {
	if g.owner != nil && g.owner.gone {
		g.owner = nil
	}
	f := &gs.free
	if g.owner != nil {
		if g.owner.owned == nil {
			g.owner.owned = &groupFIFO{}
		}
		f = g.owner.owned
	}
	g.gen++
	g.in = f
	f.push(groupRef{g: g, gen: g.gen})
}

// tidy takes g out of its FIFO when it has no ready message left, and
// forgets it when nothing refers to it either.
func (gs *groupState) tidy(g *msgGroup) {
	if g.ready() > 0 {
		return
	}
	g.in = nil
	if g.unacked == 0 {
		delete(gs.byKey, g.key)
	}
}

// removed drops ready entry s, gone other than by a dispatch (expired,
// dropped for a length limit, purged, taken by basic.get), from its group.
func (gs *groupState) removed(s *slot) {
	if g := gs.groupOf(s.msg, false); g != nil {
		g.drop(s.seq)
		gs.tidy(g)
	}
}

// released notes that delivery seq was settled, returned or discarded: a
// group with nothing unacknowledged left is free.
func (gs *groupState) released(seq uint64) {
	g, ok := gs.held[seq]
	if !ok {
		return
	}
	delete(gs.held, seq)
	g.unacked--
	if g.unacked > 0 {
		return
	}
	g.owner = nil
	switch {
	case g.in != nil && g.in != &gs.free:
		gs.place(g)
	case g.in == nil:
		gs.tidy(g)
	}
}

// consumerGone frees the groups consumer c owned (its unacknowledged
// deliveries stay held), in the order they waited for it.
func (gs *groupState) consumerGone(c *Consumer) {
	c.gone = true
	if c.owned == nil {
		return
	}
	c.owned.each(func(g *msgGroup) {
		g.owner = nil
		gs.place(g)
	})
	c.owned = nil
}

// next returns the group c takes its next message from: its own first,
// then the oldest free one; nil if none.
func (gs *groupState) next(c *Consumer) *msgGroup {
	if c.owned != nil {
		if g := c.owned.front(); g != nil {
			return g
		}
	}
	return gs.free.front()
}

// dispatchGroups is dispatch for a queue with message groups.
func (q *Queue) dispatchGroups(out []Delivery, now int64, dls *[]DeadLetter) []Delivery {
	gs := q.mg
	n := len(q.consumers)
	for idle := 0; idle < n; {
		if now != 0 {
			q.expireNext(now, dls)
		}
		if q.Ready() == 0 {
			return out
		}
		i := q.cursor % n
		q.cursor = (i + 1) % n
		c := q.consumers[i]
		if (q.cfg.SingleActiveConsumer && i != 0) || !c.hasCredit() {
			idle++
			continue
		}
		g := gs.next(c)
		if g == nil {
			idle++
			continue
		}
		size, at := q.groupHead(g)
		if c.Gate != nil && !c.Gate.Acquire(int(size)) {
			idle++
			continue
		}
		out = q.deliverGroup(out, c, g, at)
		idle = 0
	}
	return out
}

// groupHead returns the body size of the next message of g and where it
// is: at >= 0 is its index in the ready list, at < 0 its index -at-1 in
// the requeued heap.
func (q *Queue) groupHead(g *msgGroup) (uint32, int) {
	l := &q.base
	if len(g.requeued) > 0 {
		seq := g.requeued[0]
		for i := range l.requeued {
			if l.requeued[i].seq == seq {
				return l.requeued[i].size, -i - 1
			}
		}
	}
	seq := g.fresh.front()
	i := l.ready.search(seq)
	return l.ready.at(i).size, i
}

// deliverGroup takes the message of g at at (groupHead) and delivers it
// to c, who owns g from then while the delivery is unacknowledged.
func (q *Queue) deliverGroup(out []Delivery, c *Consumer, g *msgGroup, at int) []Delivery {
	gs := q.mg
	l := &q.base
	var s slot
	switch {
	case at < 0:
		s = l.requeued.removeAt(-at - 1)
	case at == 0:
		s = l.ready.pop()
		q.dropHoles()
	default:
		s = l.ready.slotAt(at)
		p := l.ready.at(at)
		p.msg = nil
		p.setTaken()
		q.holes++
	}
	q.readyLen -= int64(s.size)
	q.persistReady(s.msg, s.flags&flagSpilled != 0, s.size, -1)
	g.drop(s.seq)
	s.delivered()
	if !c.NoAck {
		q.hold(&s, c)
		if g.key != "" {
			g.owner = c
			g.unacked++
			gs.held[s.seq] = g
		}
	}
	out = appendDelivery(out, c, &s)
	// Round robin among a consumer's groups, and among free ones.
	g.in = nil
	if g.ready() > 0 {
		gs.place(g)
	} else {
		gs.tidy(g)
	}
	return out
}

// dropHoles drops the holes at the head of the ready list.
func (q *Queue) dropHoles() {
	r := &q.base.ready
	for q.holes > 0 && r.len() > 0 && r.front().taken() {
		r.drop()
		q.holes--
	}
}

// removedReady is called with each entry removed from the head of the
// ready lists other than by dispatch, in a queue with message groups.
func (q *Queue) removedReady(s *slot) {
	q.mg.removed(s)
	q.dropHoles()
}

// purgeGroups empties every group's ready index (Purge).
func (q *Queue) purgeGroups() {
	gs := q.mg
	for _, g := range gs.byKey { // order does not matter: no effect or list order depends on it
		g.requeued = nil
		g.fresh = seqFIFO{}
		g.in = nil
		if g.unacked == 0 {
			delete(gs.byKey, g.key)
		}
	}
	gs.free = groupFIFO{}
	for _, c := range q.consumers {
		c.owned = nil
	}
	q.holes = 0
}

// Groups is the number of message groups the queue knows (with ready or
// unacknowledged messages), 0 if it has no message groups.
func (q *Queue) Groups() int {
	if q.mg == nil {
		return 0
	}
	return len(q.mg.byKey)
}

// groupRef is an entry of a groupFIFO.
type groupRef struct {
	g   *msgGroup
	gen uint32
}

// groupFIFO is a FIFO of groups. An entry is live while its group is in
// this FIFO (g.in) with the same gen; others are stale and passed over,
// so that a group leaves a FIFO in O(1).
type groupFIFO struct {
	refs []groupRef
	head int
}

func (f *groupFIFO) push(r groupRef) {
	if f.head > 64 && f.head > len(f.refs)/2 {
		n := copy(f.refs, f.refs[f.head:])
		clear(f.refs[n:])
		f.refs, f.head = f.refs[:n], 0
	}
	f.refs = append(f.refs, r)
}

func (f *groupFIFO) live(r groupRef) bool { return r.g.in == f && r.g.gen == r.gen }

// front returns the first live group, dropping stale entries before it.
func (f *groupFIFO) front() *msgGroup {
	for f.head < len(f.refs) {
		if r := f.refs[f.head]; f.live(r) {
			return r.g
		}
		f.refs[f.head] = groupRef{}
		f.head++
	}
	f.refs, f.head = f.refs[:0], 0
	return nil
}

// each calls fn with each live group in order. fn may move the group to
// another FIFO.
func (f *groupFIFO) each(fn func(*msgGroup)) {
	for _, r := range f.refs[f.head:] {
		if f.live(r) {
			fn(r.g)
		}
	}
}

// seqFIFO is a FIFO of message ids.
type seqFIFO struct {
	s    []uint64
	head int
}

func (f *seqFIFO) len() int { return len(f.s) - f.head }

func (f *seqFIFO) push(seq uint64) {
	if f.head > 64 && f.head > len(f.s)/2 {
		n := copy(f.s, f.s[f.head:])
		f.s, f.head = f.s[:n], 0
	}
	f.s = append(f.s, seq)
}

func (f *seqFIFO) front() uint64 { return f.s[f.head] }

// remove takes seq out, in O(1) at the front.
func (f *seqFIFO) remove(seq uint64) {
	if f.len() == 0 {
		return
	}
	if f.s[f.head] == seq {
		f.head++
		if f.head == len(f.s) {
			f.s, f.head = f.s[:0], 0
		}
		return
	}
	for i := f.head; i < len(f.s); i++ {
		if f.s[i] == seq {
			f.s = append(f.s[:i], f.s[i+1:]...)
			return
		}
	}
}

// seqHeap is a min-heap of message ids.
type seqHeap []uint64

func (h *seqHeap) push(seq uint64) {
	*h = append(*h, seq)
	h.up(len(*h) - 1)
}

func (h *seqHeap) pop() uint64 {
	top := (*h)[0]
	h.removeAt(0)
	return top
}

func (h *seqHeap) removeAt(i int) {
	s := *h
	last := len(s) - 1
	s[i] = s[last]
	s = s[:last]
	*h = s
	if i < last {
		h.down(i)
		h.up(i)
	}
}

func (h seqHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p] <= h[i] {
			return
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
}

func (h seqHeap) down(i int) {
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l] < h[m] {
			m = l
		}
		if r < len(h) && h[r] < h[m] {
			m = r
		}
		if m == i {
			return
		}
		h[m], h[i] = h[i], h[m]
		i = m
	}
}

// removeAt removes the entry at index i of the requeued heap.
func (h *returned) removeAt(i int) slot {
	s := *h
	e := s[i]
	last := len(s) - 1
	s[i] = s[last]
	s[last] = slot{}
	s = s[:last]
	*h = s
	if i < last {
		for j := i; ; { // down
			l, r, m := 2*j+1, 2*j+2, j
			if l < len(s) && s[l].seq < s[m].seq {
				m = l
			}
			if r < len(s) && s[r].seq < s[m].seq {
				m = r
			}
			if m == j {
				break
			}
			s[m], s[j] = s[j], s[m]
			j = m
		}
		for j := i; j > 0; { // up
			p := (j - 1) / 2
			if s[p].seq <= s[j].seq {
				break
			}
			s[p], s[j] = s[j], s[p]
			j = p
		}
	}
	return e
}

// appendSnapshot appends the groups' order and owners to a snapshot: the
// free FIFO, each consumer's (in registration order), then the groups
// owned by a consumer by key. Their ready messages and unacknowledged
// deliveries are found again from the queue's.
func (gs *groupState) appendSnapshot(b []byte, consumers []*Consumer) []byte {
	appendFIFO := func(f *groupFIFO) {
		n := 0
		if f != nil {
			f.each(func(*msgGroup) { n++ })
		}
		b = binary.AppendUvarint(b, uint64(n))
		if f != nil {
			f.each(func(g *msgGroup) { b = appendString(b, g.key) })
		}
	}
	appendFIFO(&gs.free)
	for _, c := range consumers {
		appendFIFO(c.owned)
	}
	var owned []*msgGroup
	for _, g := range gs.byKey {
		if g.owner != nil && !g.owner.gone {
			owned = append(owned, g)
		}
	}
	slices.SortFunc(owned, func(x, y *msgGroup) int { return strings.Compare(x.key, y.key) })
	b = binary.AppendUvarint(b, uint64(len(owned)))
	for _, g := range owned {
		b = appendString(b, g.key)
		b = binary.AppendUvarint(b, uint64(g.owner.ID))
	}
	return b
}

// restoreGroups rebuilds the groups of a queue being restored, whose
// ready messages, deliveries and consumers are in place, and reads their
// order and owners from r.
func (q *Queue) restoreGroups(r *snapReader, byID map[ConsumerID]*Consumer) error {
	gs := q.mg
	l := &q.base
	for i := range l.requeued {
		s := &l.requeued[i]
		gs.groupOf(s.msg, true).requeued.push(s.seq)
	}
	for i := 0; i < l.ready.len(); i++ {
		gs.groupOf(l.ready.at(i).msg, true).fresh.push(l.ready.seqAt(i))
	}
	seqs := q.held.appendSeqs(nil)
	slices.Sort(seqs)
	for _, seq := range seqs {
		h, _ := q.held.get(seq)
		if h.c == nil {
			continue // basic.get: in no group
		}
		g := gs.groupOf(h.s.msg, true)
		if g.key == "" {
			gs.tidy(g)
			continue
		}
		g.unacked++
		gs.held[seq] = g
	}
	readFIFO := func(f *groupFIFO) {
		for range r.count() {
			g := gs.byKey[r.string()]
			if g == nil || g.in != nil || g.ready() == 0 {
				r.fail()
				return
			}
			g.gen++
			g.in = f
			f.push(groupRef{g: g, gen: g.gen})
		}
	}
	readFIFO(&gs.free)
	for _, c := range q.consumers {
		c.owned = &groupFIFO{}
		readFIFO(c.owned)
	}
	for range r.count() {
		g, c := gs.byKey[r.string()], byID[ConsumerID(r.uvarint())]
		if g == nil || c == nil || c.gone || g.unacked == 0 {
			r.fail()
			break
		}
		g.owner = c
	}
	if r.err != nil {
		return r.err
	}
	for _, g := range gs.byKey {
		if (g.ready() > 0) != (g.in != nil) || (g.in != nil && g.in != &gs.free && (g.owner == nil || g.in != g.owner.owned)) {
			return ErrBadSnapshot
		}
	}
	return nil
}
