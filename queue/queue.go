package queue

import "errors"

// ErrExclusiveConsumer means the queue has an exclusive consumer, or an
// exclusive consumer was asked for while others consume.
var ErrExclusiveConsumer = errors.New("queue: in exclusive use")

// Delivery is an effect of Dispatch or Get: hand Entry to Consumer.
type Delivery struct {
	Consumer *Consumer
	Entry    Entry
}

// Queue is one queue's state. It is not safe for concurrent use: the owner
// serialises calls.
type Queue struct {
	ready     ring
	requeued  returned
	nextSeq   uint64
	unacked   int
	readyLen  int64 // bytes of ready bodies
	consumers []*Consumer
	cursor    int // round-robin position in consumers
}

// New returns an empty queue.
func New() *Queue { return &Queue{} }

// Ready is the number of messages waiting for a consumer.
func (q *Queue) Ready() int { return q.ready.len() + len(q.requeued) }

// ReadyBytes is the body size of the ready messages.
func (q *Queue) ReadyBytes() int64 { return q.readyLen }

// Unacked is the number of deliveries awaiting settlement.
func (q *Queue) Unacked() int { return q.unacked }

// ConsumerCount is the number of consumers.
func (q *Queue) ConsumerCount() int { return len(q.consumers) }

// Consumers returns the consumers in registration order. The slice is the
// queue's own: do not modify it.
func (q *Queue) Consumers() []*Consumer { return q.consumers }

// Publish appends m to the ready list and returns its sequence number.
func (q *Queue) Publish(m *Message) uint64 {
	q.nextSeq++
	q.ready.push(Entry{Msg: m, Seq: q.nextSeq})
	q.readyLen += int64(m.Size())
	return q.nextSeq
}

// AddConsumer registers c. An exclusive consumer needs a queue without
// consumers, and no consumer may join a queue that has an exclusive one.
func (q *Queue) AddConsumer(c *Consumer) error {
	if len(q.consumers) > 0 && (c.Exclusive || q.consumers[0].Exclusive) {
		return ErrExclusiveConsumer
	}
	q.consumers = append(q.consumers, c)
	return nil
}

// RemoveConsumer unregisters c. Its unacknowledged deliveries stay with
// their owner, who settles or returns them.
func (q *Queue) RemoveConsumer(c *Consumer) bool {
	for i, x := range q.consumers {
		if x == c {
			copy(q.consumers[i:], q.consumers[i+1:])
			q.consumers[len(q.consumers)-1] = nil
			q.consumers = q.consumers[:len(q.consumers)-1]
			if q.cursor > i {
				q.cursor--
			}
			if q.cursor >= len(q.consumers) {
				q.cursor = 0
			}
			return true
		}
	}
	return false
}

// take removes the next ready entry in queue order.
func (q *Queue) take() Entry {
	var e Entry
	if len(q.requeued) > 0 {
		e = q.requeued.pop()
	} else {
		e = q.ready.pop()
	}
	q.readyLen -= int64(e.Msg.Size())
	e.Deliveries++
	return e
}

// Dispatch hands ready messages to consumers with credit, round robin, and
// appends the resulting deliveries to out. Entries given to NoAck consumers
// are settled at once; the others count as unacknowledged.
func (q *Queue) Dispatch(out []Delivery) []Delivery {
	n := len(q.consumers)
	if n == 0 {
		return out
	}
	for q.Ready() > 0 {
		var c *Consumer
		for i := 0; i < n; i++ {
			cand := q.consumers[(q.cursor+i)%n]
			if !cand.hasCredit() {
				continue
			}
			if cand.Gate != nil && !cand.Gate.Acquire() {
				continue
			}
			c = cand
			q.cursor = (q.cursor + i + 1) % n
			break
		}
		if c == nil {
			return out
		}
		e := q.take()
		if !c.NoAck {
			c.unacked++
			q.unacked++
		}
		out = append(out, Delivery{Consumer: c, Entry: e})
	}
	return out
}

// Get takes the next ready message for basic.get. With noAck false the
// delivery counts as unacknowledged (with no consumer).
func (q *Queue) Get(noAck bool) (Entry, bool) {
	if q.Ready() == 0 {
		return Entry{}, false
	}
	e := q.take()
	if !noAck {
		q.unacked++
	}
	return e, true
}

// Settle records that n deliveries made to c (nil for basic.get) were
// acknowledged or discarded.
func (q *Queue) Settle(c *Consumer, n int) {
	if c != nil {
		c.unacked -= n
	}
	q.unacked -= n
}

// Return puts a delivery made to c (nil for basic.get) back in the queue,
// ahead of every message never delivered, in Seq order, marked redelivered.
func (q *Queue) Return(c *Consumer, e Entry) {
	q.Settle(c, 1)
	e.Redelivered = true
	q.requeued.push(e)
	q.readyLen += int64(e.Msg.Size())
}

// Purge drops every ready message and returns how many there were.
func (q *Queue) Purge() int {
	n := q.Ready()
	q.ready.clear()
	q.requeued = nil
	q.readyLen = 0
	return n
}
