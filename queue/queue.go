package queue

import "errors"

// ErrExclusiveConsumer means the queue has an exclusive consumer, or an
// exclusive consumer was asked for while others consume.
var ErrExclusiveConsumer = errors.New("queue: in exclusive use")

// ErrUnknownConsumer means a command named a consumer the queue does not
// have.
var ErrUnknownConsumer = errors.New("queue: no such consumer")

// ErrUnknownCommand means Apply was given a command it does not know.
var ErrUnknownCommand = errors.New("queue: unknown command")

// Delivery is an effect of Dispatch or Get: hand Entry to Consumer.
type Delivery struct {
	Consumer *Consumer
	Entry    Entry
}

// Queue is one queue's state. It is not safe for concurrent use: the owner
// serialises calls.
type Queue struct {
	cfg Config

	base     lane   // priority 0, the only lane of a non-priority queue
	hi       []lane // hi[p-1] holds priority p (priority queues only)
	hiReady  int    // entries in hi
	nextSeq  uint64
	unacked  int
	ackedLen int64 // bytes of the unacknowledged bodies
	readyLen int64 // bytes of ready bodies
	paged    int   // ready entries whose message is paged out
	pagedLen int64 // bytes of their bodies

	consumers []*Consumer // registration order
	cursor    int         // round-robin position in consumers
	groups    []group     // consumers by priority, highest first
	prioCount int         // consumers with a non-zero Priority

	// held is the unacknowledged deliveries by message id (Seq): the
	// entry as delivered and the consumer it went to (nil for basic.get)
	// (unacked.go).
	held heldSet
	// pubs is the highest sequence enqueued per publisher, for the
	// deduplication of resends (dedup.go).
	pubs map[PublisherID]uint64
	// lastUsed is when the queue was last used (unix ms), for
	// Config.Expires; expired is set once Tick has reported the expiry.
	lastUsed int64
	expired  bool
	// scratch is Apply's buffer for the deliveries of a checkout.
	scratch []Delivery
	// mg is the message groups of a queue with Config.GroupHeader
	// (groups.go), nil otherwise; holes counts the messages delivered from
	// the middle of the ready list that still hold their place there.
	mg *groupState
	// dedup is the deduplication cache of a queue made with
	// Config.DedupSize (msgdedup.go), nil otherwise.
	dedup *Dedup
	holes int
	// discards are the dead letters kept until their targets confirm
	// them (Config.AtLeastOnce; discards.go).
	discards discardSet
	// deliverPaged, set by the owner (not state), makes dispatch and Get
	// hand out paged-out messages (Entry.Msg nil) instead of stopping at
	// them (SetDeliverPaged).
	deliverPaged bool
	// countPersistent, set by the owner (not state), has the queue count
	// its persistent messages (SetCountPersistent, persistent.go):
	// pReady/pReadyLen of the ready ones, pAcked/pAckedLen of the
	// unacknowledged ones, kept beside readyLen and ackedLen.
	countPersistent      bool
	pReady, pAcked       int
	pReadyLen, pAckedLen int64
}

// New returns an empty queue with the default configuration: no TTL, no
// length limits, no priorities, no single active consumer.
func New() *Queue { return &Queue{cfg: DefaultConfig()} }

// Ready is the number of messages waiting for a consumer.
func (q *Queue) Ready() int { return q.base.len() + q.hiReady - q.holes }

// ReadyBytes is the body size of the ready messages.
func (q *Queue) ReadyBytes() int64 { return q.readyLen }

// Unacked is the number of deliveries awaiting settlement.
func (q *Queue) Unacked() int { return q.unacked }

// UnackedBytes is the body size of the deliveries awaiting settlement.
func (q *Queue) UnackedBytes() int64 { return q.ackedLen }

// HeadMessage is the message the next delivery would take, nil when the
// queue has none ready or its body is paged out.
func (q *Queue) HeadMessage() *Message {
	if q.Ready() == 0 {
		return nil
	}
	return q.headMsg()
}

// ConsumerCount is the number of consumers.
func (q *Queue) ConsumerCount() int { return len(q.consumers) }

// Consumers returns the consumers in registration order. The slice is the
// queue's own: do not modify it.
func (q *Queue) Consumers() []*Consumer { return q.consumers }

// Publish appends m to the ready list and returns its sequence number. It
// is PublishAt without a clock: no TTL applies. Length limits of the
// configuration do apply; with them a rejected publish returns 0 and the
// messages dropped from the head are discarded without a trace, so a
// queue with limits or a dead-letter exchange should use PublishAt.
func (q *Queue) Publish(m *Message) uint64 {
	if q.cfg.plain() && q.hi == nil && q.mg == nil {
		q.nextSeq++
		q.base.ready.push(slot{msg: m, seq: q.nextSeq, size: uint32(m.Size())})
		q.readyLen += int64(m.Size())
		q.persistReady(m, false, uint32(m.Size()), 1)
		return q.nextSeq
	}
	seq, ok, _ := q.PublishAt(m, 0, -1)
	if !ok {
		return 0
	}
	return seq
}

// push adds a new entry at the tail of its priority's lane.
func (q *Queue) push(e slot) {
	q.pushPrio(e, q.priority(e.msg))
}

// pushPrio adds e at the tail of the lane of priority p.
func (q *Queue) pushPrio(e slot, p int) {
	if p > 0 {
		q.hi[p-1].ready.push(e)
		q.hiReady++
	} else {
		q.base.ready.push(e)
	}
	q.readyLen += int64(e.size)
	q.persistReady(e.msg, e.flags&flagSpilled != 0, e.size, 1)
	if e.msg == nil {
		q.paged++
		q.pagedLen += int64(e.size)
	}
	if q.mg != nil {
		q.mg.add(&e, false)
	}
}

// requeue puts a delivered entry back ahead of its lane's new messages.
func (q *Queue) requeue(s slot) {
	if p := q.priority(s.msg); p > 0 {
		q.hi[p-1].requeued.push(s)
		q.hiReady++
	} else {
		q.base.requeued.push(s)
	}
	q.readyLen += int64(s.size)
	q.persistReady(s.msg, s.flags&flagSpilled != 0, s.size, 1)
	if q.mg != nil {
		q.mg.add(&s, true)
	}
}

// next returns the lane the next delivery comes from; Ready must be > 0.
func (q *Queue) next() *lane {
	if q.hiReady > 0 {
		for i := len(q.hi) - 1; i >= 0; i-- {
			if q.hi[i].len() > 0 {
				return &q.hi[i]
			}
		}
	}
	return &q.base
}

// remove pops the head of l and takes it out of the ready counts.
func (q *Queue) remove(l *lane) slot {
	e := l.pop()
	if l != &q.base {
		q.hiReady--
	}
	q.readyLen -= int64(e.size)
	q.persistReady(e.msg, e.flags&flagSpilled != 0, e.size, -1)
	if e.msg == nil {
		q.paged--
		q.pagedLen -= int64(e.size)
	}
	if q.mg != nil {
		q.removedReady(&e)
	}
	return e
}

// head is the message (nil if paged out) and body size of the entry take
// would return; the queue must have a ready entry.
func (q *Queue) head() (*Message, uint32) {
	if q.hiReady == 0 && len(q.base.requeued) == 0 {
		c := q.base.ready.front()
		return c.msg, c.size
	}
	m, size, _ := q.next().head()
	return m, size
}

// headMsg is the message of the entry take would return, nil if paged
// out; the queue must have a ready entry.
func (q *Queue) headMsg() *Message {
	m, _ := q.head()
	return m
}

// headSize is the body size of the entry take would return; the queue
// must have a ready entry.
func (q *Queue) headSize() int {
	_, size := q.head()
	return int(size)
}

// take removes the next ready entry in queue order, counting a delivery.
func (q *Queue) take() slot {
	var e slot
	if q.hiReady == 0 && len(q.base.requeued) == 0 {
		e = q.base.ready.pop()
		q.readyLen -= int64(e.size)
		q.persistReady(e.msg, e.flags&flagSpilled != 0, e.size, -1)
	} else {
		e = q.remove(q.next())
		e.delivered()
		return e // remove told the groups
	}
	if q.mg != nil {
		q.removedReady(&e)
	}
	e.delivered()
	return e
}

// Dispatch hands ready messages to consumers with credit and appends the
// resulting deliveries to out: to the active consumer of a
// single-active-consumer queue, else to the highest consumer priority with
// credit, round robin among equals. Entries given to NoAck consumers are
// settled at once; the others count as unacknowledged. Dispatch checks no
// expiry (DispatchAt does).
func (q *Queue) Dispatch(out []Delivery) []Delivery {
	if len(q.consumers) == 0 {
		// Nobody to deliver to: the ready list is not looked at (at one
		// queue of a fanout to thousands, that look is a cache miss).
		return out
	}
	if q.prioCount == 0 && !q.cfg.SingleActiveConsumer && q.mg == nil {
		return q.dispatchRoundRobin(out)
	}
	return q.dispatch(out, 0, nil)
}

// DispatchAt is Dispatch at time now (unix ms): expired messages at the
// head are removed and reported as dead letters (reason "expired") instead
// of being delivered.
func (q *Queue) DispatchAt(out []Delivery, now int64) ([]Delivery, []DeadLetter) {
	var dls []DeadLetter
	out = q.dispatch(out, now, &dls)
	return out, dls
}

func (q *Queue) dispatch(out []Delivery, now int64, dls *[]DeadLetter) []Delivery {
	n := len(q.consumers)
	if n == 0 {
		return out
	}
	if q.mg != nil {
		return q.dispatchGroups(out, now, dls)
	}
	for {
		if now != 0 {
			q.expireNext(now, dls)
		}
		if q.Ready() == 0 || (q.paged > 0 && q.headMsg() == nil && !q.deliverPaged) {
			return out
		}
		var c *Consumer
		switch {
		case q.cfg.SingleActiveConsumer:
			c = q.pickActive()
		case q.prioCount > 0:
			c = q.pickByPriority()
		default:
			c = q.pickRoundRobin()
		}
		if c == nil {
			return out
		}
		out = q.deliverHead(out, c)
	}
}

// dispatchRoundRobin is dispatch's common case, kept apart to stay fast:
// no expiry check, consumers all of one priority.
func (q *Queue) dispatchRoundRobin(out []Delivery) []Delivery {
	n := len(q.consumers)
	for q.Ready() > 0 {
		var c *Consumer
		m, sz := q.head()
		if m == nil && !q.deliverPaged {
			return out // paged out: the owner pages it in, then dispatches again
		}
		size := int(sz)
		for i := 0; i < n; i++ {
			cand := q.consumers[(q.cursor+i)%n]
			if !cand.hasCredit() || (cand.Gate != nil && !cand.Gate.Acquire(size)) {
				continue
			}
			c = cand
			q.cursor = (q.cursor + i + 1) % n
			break
		}
		if c == nil {
			return out
		}
		out = q.deliverHead(out, c)
	}
	return out
}

// deliverHead takes the next ready entry in queue order, counting a
// delivery, and appends its delivery to c; unless c is NoAck the entry
// is held as unacknowledged. New messages are delivered from their slot
// in place: copying a slot out costs more than the rest of dispatch.
func (q *Queue) deliverHead(out []Delivery, c *Consumer) []Delivery {
	l := &q.base
	if q.hiReady > 0 || len(q.base.requeued) > 0 {
		l = q.next()
		if len(l.requeued) > 0 {
			e := q.take()
			if !c.NoAck {
				q.hold(&e, c)
			}
			return appendDelivery(out, c, &e)
		}
		if l != &q.base {
			q.hiReady--
		}
	}
	h, seq := l.ready.front(), l.ready.frontSeq()
	h.delivered()
	if !c.NoAck {
		q.holdCell(h, seq, c)
	}
	out = appendCellDelivery(out, c, h, seq)
	q.readyLen -= int64(h.size)
	q.persistReady(h.msg, h.spilled(), h.size, -1)
	l.ready.drop()
	return out
}

// pickRoundRobin chooses the next consumer with credit after the cursor.
func (q *Queue) pickRoundRobin() *Consumer {
	n := len(q.consumers)
	for i := 0; i < n; i++ {
		cand := q.consumers[(q.cursor+i)%n]
		if cand.take(q.headSize()) {
			q.cursor = (q.cursor + i + 1) % n
			return cand
		}
	}
	return nil
}

// appendDelivery appends the delivery of s to c, field by field: building
// a Delivery value and appending it makes the compiler copy it through the
// stack with mixed-width stores, which costs more than the rest of
// publish→deliver.
func appendDelivery(out []Delivery, c *Consumer, s *slot) []Delivery {
	if len(out) < cap(out) {
		out = out[:len(out)+1]
	} else {
		out = append(out, Delivery{})
	}
	d := &out[len(out)-1]
	d.Consumer = c
	d.Entry.Msg = s.msg
	d.Entry.Seq = s.seq
	d.Entry.Redelivered = s.meta&redeliveredBit != 0
	d.Entry.Deliveries = uint32(s.meta & deliveriesMask)
	d.Entry.Expires = s.expires()
	d.Entry.Spilled = s.flags&flagSpilled != 0
	d.Entry.Size = int(s.size)
	return out
}

// appendCellDelivery is appendDelivery of the ready list's cell x, whose
// seq is seq.
func appendCellDelivery(out []Delivery, c *Consumer, x *cell, seq uint64) []Delivery {
	if len(out) < cap(out) {
		out = out[:len(out)+1]
	} else {
		out = append(out, Delivery{})
	}
	d := &out[len(out)-1]
	d.Consumer = c
	d.Entry.Msg = x.msg
	d.Entry.Seq = seq
	d.Entry.Redelivered = x.meta&redeliveredBit != 0
	d.Entry.Deliveries = uint32(x.meta & cellDeliveriesMask)
	d.Entry.Expires = x.expires()
	d.Entry.Spilled = x.spilled()
	d.Entry.Size = int(x.size)
	return out
}

// Get takes the next ready message for basic.get. With noAck false the
// delivery counts as unacknowledged (with no consumer). Get checks no
// expiry (GetAt does).
//
// Get returns false also when the next message is paged out (HeadPaged):
// the owner pages it in and asks again.
func (q *Queue) Get(noAck bool) (Entry, bool) {
	if q.Ready() == 0 || (q.paged > 0 && q.headMsg() == nil && !q.deliverPaged) {
		return Entry{}, false
	}
	e := q.take()
	if !noAck {
		q.hold(&e, nil)
	}
	return e.entry(), true
}

// getBy is Get with the delivery held by holder id (0: none), a consumer
// that is not attached (OpGet).
func (q *Queue) getBy(noAck bool, id ConsumerID) (Entry, bool) {
	if id == 0 || noAck || q.mg != nil {
		return q.Get(noAck)
	}
	if q.Ready() == 0 || (q.paged > 0 && q.headMsg() == nil) {
		return Entry{}, false
	}
	e := q.take()
	q.hold(&e, &Consumer{ID: id, gone: true})
	return e.entry(), true
}

// GetAt is Get at time now (unix ms): expired messages at the head are
// removed and reported as dead letters first, so an expired message is
// never returned.
func (q *Queue) GetAt(noAck bool, now int64) (Entry, bool, []DeadLetter) {
	var dls []DeadLetter
	q.expireNext(now, &dls)
	e, ok := q.Get(noAck)
	return e, ok, dls
}

// Purge drops every ready message and returns how many there were.
func (q *Queue) Purge() int {
	n := q.Ready()
	q.base.clear()
	for i := range q.hi {
		q.hi[i].clear()
	}
	q.hiReady = 0
	if q.mg != nil {
		q.purgeGroups()
	}
	q.readyLen = 0
	q.pReady, q.pReadyLen = 0, 0
	q.paged = 0
	q.pagedLen = 0
	return n
}
