package queue

import "errors"

// Unacknowledged deliveries live in the queue, by message id (the entry's
// Seq, unique among a queue's unacknowledged deliveries: a message is
// delivered again only after it was returned). A delivery to a consumer
// that is not NoAck, or a basic.get without no-ack, is held until it is
// settled (Settle), returned (Return, ReturnAt) or discarded (Discard).
// The delivery counts and redelivered flags travel with the held entry.
// A consumer's unacknowledged deliveries stay held when it is removed:
// their owner settles or returns them later.

// ErrUnknownMessage means a command named a message id that is not an
// unacknowledged delivery of the queue.
var ErrUnknownMessage = errors.New("queue: no such unacknowledged delivery")

// held is an unacknowledged delivery: the entry as delivered and the
// consumer it went to (nil for basic.get).
type held struct {
	s slot
	c *Consumer
}

// flagHole marks a settled entry left in heldSet's list.
const flagHole = 1 << 31

func (x *held) hole() bool { return x.s.flags&flagHole != 0 }

// heldSet is the unacknowledged deliveries by message id. Deliveries
// mostly come in message id order (a queue hands out its messages in
// order) and are mostly acknowledged in that order, so they go in a list
// sorted by id, appended at the tail and found by bisection, with settled
// ones left as holes (which keep their id) that go from the front or when
// they outnumber the rest; a delivery whose id is not above the list's
// last (a redelivery, or a higher priority overtaking) goes in a map.
// Nothing here is iterated where its order could reach an effect
// (Snapshot sorts).
type heldSet struct {
	list []held // list[head:] sorted by seq, holes included
	head int
	live int // entries in list that are not holes
	late map[uint64]held
}

// holesAt is the number of holes the list may have before it compacts,
// whatever the number of live entries.
const holesAt = 64

func (h *heldSet) len() int { return h.live + len(h.late) }

func (h *heldSet) add(s *slot, c *Consumer) {
	if n := len(h.list); n > h.head && h.list[n-1].s.seq >= s.seq {
		if h.late == nil {
			h.late = make(map[uint64]held)
		}
		h.late[s.seq] = held{s: *s, c: c}
		return
	}
	p := h.next()
	p.s = *s
	p.c = c
}

// addCell is add of the ready list's cell x, whose seq is seq, unpacked
// in place.
func (h *heldSet) addCell(x *cell, seq uint64, c *Consumer) {
	if n := len(h.list); n > h.head && h.list[n-1].s.seq >= seq {
		s := x.slot(seq)
		h.add(&s, c)
		return
	}
	p := h.next()
	x.unpack(&p.s, seq)
	p.c = c
}

// next appends a place at the tail of the list and returns it.
func (h *heldSet) next() *held {
	if len(h.list) == cap(h.list) {
		if h.head > 0 {
			h.compact()
		}
		if len(h.list) == cap(h.list) {
			h.list = append(h.list, held{})[:len(h.list)]
		}
	}
	// In place: building a held and appending it copies it twice.
	h.list = h.list[:len(h.list)+1]
	h.live++
	return &h.list[len(h.list)-1]
}

// find returns the index in list of live delivery seq, or -1.
func (h *heldSet) find(seq uint64) int {
	if h.live == 0 {
		return -1
	}
	if f := &h.list[h.head]; f.s.seq == seq {
		if f.hole() {
			return -1
		}
		return h.head
	}
	s := h.list[h.head:]
	lo, hi := 0, len(s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s[m].s.seq < seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(s) || s[lo].s.seq != seq || s[lo].hole() {
		return -1
	}
	return h.head + lo
}

func (h *heldSet) get(seq uint64) (held, bool) {
	if i := h.find(seq); i >= 0 {
		return h.list[i], true
	}
	x, ok := h.late[seq]
	return x, ok
}

// remove takes the live delivery seq out of the set into *dst and reports
// whether there was one. The delivery is copied once, into *dst: a held
// entry is five words, and returning it by value through the callers cost
// more than the rest of an acknowledgement.
func (h *heldSet) remove(seq uint64, dst *held) bool {
	i := h.find(seq)
	if i < 0 {
		x, ok := h.late[seq]
		if ok {
			*dst = x
			delete(h.late, seq)
		}
		return ok
	}
	p := &h.list[i]
	*dst = *p
	h.live--
	if i == h.head {
		// In-order settlement: the front goes, and the holes behind it.
		*p = held{}
		h.head++
		for h.head < len(h.list) && h.list[h.head].hole() {
			h.list[h.head] = held{}
			h.head++
		}
	} else {
		p.s.flags |= flagHole
		p.s.msg, p.c = nil, nil
	}
	switch {
	case h.live == 0:
		// Every entry before len is zero or a hole without pointers.
		h.list, h.head = h.list[:0], 0
	case len(h.list)-h.head-h.live > holesAt && len(h.list)-h.head-h.live > h.live:
		h.compact()
	}
	return true
}

// compact moves the live entries to the front of the list, dropping the
// holes, and gives memory back when the list is mostly empty.
func (h *heldSet) compact() {
	n := 0
	for i := h.head; i < len(h.list); i++ {
		if !h.list[i].hole() {
			h.list[n] = h.list[i]
			n++
		}
	}
	clear(h.list[n:])
	l := h.list[:n]
	if cap(l) > 1024 && cap(l) > 4*n {
		l = append(make([]held, 0, 2*n), l...)
	}
	h.list, h.head = l, 0
}

// appendSeqs appends the ids of every delivery, in no particular order.
func (h *heldSet) appendSeqs(seqs []uint64) []uint64 {
	for i := h.head; i < len(h.list); i++ {
		if !h.list[i].hole() {
			seqs = append(seqs, h.list[i].s.seq)
		}
	}
	for seq := range h.late {
		seqs = append(seqs, seq)
	}
	return seqs
}

// hold records the delivery of s to c (nil for basic.get) as
// unacknowledged.
func (q *Queue) hold(s *slot, c *Consumer) {
	q.held.add(s, c)
	q.unacked++
	q.ackedLen += int64(s.size)
	q.persistAcked(s.msg, s.flags&flagSpilled != 0, s.size, 1)
	if c != nil {
		c.unacked++
	}
}

// holdCell is hold of the ready list's cell x, whose seq is seq.
func (q *Queue) holdCell(x *cell, seq uint64, c *Consumer) {
	q.held.addCell(x, seq, c)
	q.unacked++
	q.ackedLen += int64(x.size)
	q.persistAcked(x.msg, x.spilled(), x.size, 1)
	if c != nil {
		c.unacked++
	}
}

// release removes the unacknowledged delivery seq into *h, giving its
// consumer the credit back.
func (q *Queue) release(seq uint64, h *held) bool {
	if !q.held.remove(seq, h) {
		return false
	}
	if q.mg != nil {
		q.mg.released(seq)
	}
	q.unacked--
	q.ackedLen -= int64(h.s.size)
	q.persistAcked(h.s.msg, h.s.flags&flagSpilled != 0, h.s.size, -1)
	if h.c != nil {
		h.c.unacked--
	}
	return true
}

// Held returns the unacknowledged delivery seq, and whether there is one.
func (q *Queue) Held(seq uint64) (Entry, bool) {
	h, ok := q.held.get(seq)
	return h.s.entry(), ok
}

// Settle acknowledges the delivery of message seq: the queue forgets it and
// returns it (the owner deletes its durable record or spilled copy). ok is
// false when seq is not an unacknowledged delivery.
func (q *Queue) Settle(seq uint64) (e Entry, ok bool) {
	ok = q.settleInto(seq, &e)
	return e, ok
}

// settleInto is Settle writing the entry into *e.
func (q *Queue) settleInto(seq uint64, e *Entry) bool {
	var h held
	if !q.release(seq, &h) {
		return false
	}
	h.s.fill(e)
	return true
}

// Return puts the delivery of message seq back in the queue, ahead of
// every message of its priority never delivered, in Seq order, marked
// redelivered. It applies no delivery limit (ReturnAt does). It reports
// whether seq was an unacknowledged delivery.
func (q *Queue) Return(seq uint64) bool {
	var h held
	if !q.release(seq, &h) {
		return false
	}
	h.s.meta |= redeliveredBit
	q.requeue(h.s)
	return true
}

// ReturnAt is Return at time now (unix ms) with the delivery limit and TTL
// applied: a message delivered more than Config.DeliveryLimit times comes
// back as a dead letter with reason "delivery_limit", and one that has
// expired with reason "expired" (dead true); otherwise it is requeued as by
// Return (dead false). Either way the delivery is settled. An unknown seq
// changes nothing (dead false).
func (q *Queue) ReturnAt(seq uint64, now int64) (dl DeadLetter, dead bool) {
	dl, dead, _ = q.returnAt(seq, now)
	return dl, dead
}

// returnAt is ReturnAt that also reports whether seq was held, with one
// lookup of the delivery.
func (q *Queue) returnAt(seq uint64, now int64) (dl DeadLetter, dead, ok bool) {
	var h held
	if !q.release(seq, &h) {
		return DeadLetter{}, false, false
	}
	if lim := q.cfg.DeliveryLimit; lim >= 0 && int64(h.s.meta&deliveriesMask) > lim {
		return DeadLetter{Entry: h.s.entry(), Reason: ReasonDeliveryLimit}, true, true
	}
	if x := h.s.expires(); now != 0 && x != 0 && x <= now {
		return DeadLetter{Entry: h.s.entry(), Reason: ReasonExpired}, true, true
	}
	h.s.meta |= redeliveredBit
	q.requeue(h.s)
	return DeadLetter{}, false, true
}

// Discard settles the delivery of message seq, rejected without requeue,
// and returns it as a dead letter (reason "rejected"). ok is false when seq
// is not an unacknowledged delivery.
func (q *Queue) Discard(seq uint64) (dl DeadLetter, ok bool) {
	var h held
	if !q.release(seq, &h) {
		return DeadLetter{}, false
	}
	return DeadLetter{Entry: h.s.entry(), Reason: ReasonRejected}, true
}
