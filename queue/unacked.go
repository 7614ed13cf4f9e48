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

// hold records the delivery of s to c (nil for basic.get) as
// unacknowledged.
func (q *Queue) hold(s *slot, c *Consumer) {
	if q.held == nil {
		q.held = make(map[uint64]held)
	}
	q.held[s.seq] = held{s: *s, c: c}
	q.unacked++
	if c != nil {
		c.unacked++
	}
}

// release removes the unacknowledged delivery seq, giving its consumer
// the credit back.
func (q *Queue) release(seq uint64) (held, bool) {
	h, ok := q.held[seq]
	if !ok {
		return h, false
	}
	delete(q.held, seq)
	q.unacked--
	if h.c != nil {
		h.c.unacked--
	}
	return h, true
}

// Held returns the unacknowledged delivery seq, and whether there is one.
func (q *Queue) Held(seq uint64) (Entry, bool) {
	h, ok := q.held[seq]
	return h.s.entry(), ok
}

// Settle acknowledges the delivery of message seq: the queue forgets it and
// returns it (the owner deletes its durable record or spilled copy). ok is
// false when seq is not an unacknowledged delivery.
func (q *Queue) Settle(seq uint64) (e Entry, ok bool) {
	h, ok := q.release(seq)
	if !ok {
		return Entry{}, false
	}
	return h.s.entry(), true
}

// Return puts the delivery of message seq back in the queue, ahead of
// every message of its priority never delivered, in Seq order, marked
// redelivered. It applies no delivery limit (ReturnAt does). It reports
// whether seq was an unacknowledged delivery.
func (q *Queue) Return(seq uint64) bool {
	h, ok := q.release(seq)
	if !ok {
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
	h, ok := q.held[seq]
	if !ok {
		return DeadLetter{}, false
	}
	e := h.s.entry()
	if lim := q.cfg.DeliveryLimit; lim >= 0 && int64(e.Deliveries) > lim {
		q.release(seq)
		return DeadLetter{Entry: e, Reason: ReasonDeliveryLimit}, true
	}
	if now != 0 && e.Expires != 0 && e.Expires <= now {
		q.release(seq)
		return DeadLetter{Entry: e, Reason: ReasonExpired}, true
	}
	q.Return(seq)
	return DeadLetter{}, false
}

// Discard settles the delivery of message seq, rejected without requeue,
// and returns it as a dead letter (reason "rejected"). ok is false when seq
// is not an unacknowledged delivery.
func (q *Queue) Discard(seq uint64) (dl DeadLetter, ok bool) {
	h, ok := q.release(seq)
	if !ok {
		return DeadLetter{}, false
	}
	return DeadLetter{Entry: h.s.entry(), Reason: ReasonRejected}, true
}
