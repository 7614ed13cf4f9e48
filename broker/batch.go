package broker

import (
	"encoding/binary"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// Publishes routed to many queues are enqueued in batches: consecutive
// publishes of one channel that route to the same queues, read from the
// socket in one go, are held until the read batch ends (or a frame
// other than the next publish arrives), then put on each queue under one
// lock acquisition: a fanout to 10,000 queues pays the cache misses of
// each queue's lock and ready list once per batch instead of once per
// message. Nothing is confirmed, returned or visible before its batch is
// enqueued, and every frame that could observe the queues (any method
// other than basic.publish on the batch's channel, any frame of another
// channel) enqueues the batch first, so the order a client can see is the
// order it published in.

const (
	// batchMinTargets is the fewest queues a publish must route to for
	// its enqueue to be batched: below it, one lock per queue per
	// message costs less than comparing destination lists.
	batchMinTargets = 16
	// batchMaxMessages and batchMaxBytes bound a batch.
	batchMaxMessages = 256
	batchMaxBytes    = 1 << 20
	// methodBasicPublish is basic.publish's method id in class basic.
	methodBasicPublish = 40
)

// routeBatch is a connection's publishes held for one batched enqueue
// (reader goroutine only).
type routeBatch struct {
	ch *channel
	// targets are the queues every message of the batch routes to.
	targets []*queueEntity
	msgs    []batchedPublish
	bytes   int
}

type batchedPublish struct {
	msg        *queue.Message
	mandatory  bool
	confirmSeq uint64
	// xc counts the message out of its exchange once a queue took it.
	xc *exchangeCounts
}

// routeBatched is route for a publish read from the socket: when msg goes
// to at least batchMinTargets queues it joins the connection's batch
// (enqueued by flushRoutes) and routeBatched reports true; the caller then
// leaves the publish's confirm to the flush. Otherwise msg is routed at
// once.
func (ch *channel) routeBatched(ex *exchangeEntity, mandatory bool, msg *queue.Message, confirmSeq uint64) (batched bool) {
	c := ch.c
	b := &c.batch
	xc := ch.stats.exchange(ex)
	xc.in.Add(1)
	if ex.plug != nil {
		if handled, _ := ch.plugPublish(ex, mandatory, msg, confirmSeq); handled {
			c.flushRoutes()
			return false
		}
	}
	if ex.name == "" && isReplyName(msg.RoutingKey) {
		c.flushRoutes()
		ch.routeReply(mandatory, msg)
		return false
	}
	targets, msg, ok := ch.resolve(ex, msg)
	if !ok {
		c.flushRoutes()
		ch.returnUnroutable(mandatory, msg)
		return false
	}
	if len(b.msgs) > 0 && (b.ch != ch || !sameQueues(b.targets, targets)) {
		c.flushRoutes()
	}
	if len(b.msgs) == 0 {
		if len(targets) < batchMinTargets {
			routed, throttle := ch.deliverTo(targets, msg, confirmSeq)
			clear(targets)
			ch.targets = targets[:0]
			if throttle != nil {
				c.holdPublisher(throttle)
			}
			if !routed {
				ch.returnUnroutable(mandatory, msg)
			} else {
				xc.out.Add(1)
			}
			return false
		}
		// The batch keeps this publish's destination list; the channel
		// routes the next one into the batch's old one.
		b.ch = ch
		b.targets, ch.targets = targets, b.targets[:0]
	} else {
		clear(targets)
		ch.targets = targets[:0]
	}
	b.msgs = append(b.msgs, batchedPublish{msg: msg, mandatory: mandatory, confirmSeq: confirmSeq, xc: xc})
	b.bytes += len(msg.Body)
	if len(b.msgs) >= batchMaxMessages || b.bytes >= batchMaxBytes {
		c.flushRoutes()
	}
	return true
}

// sameQueues reports whether a and b list the same queues in the same
// order.
func sameQueues(a, b []*queueEntity) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// flushRoutes enqueues the connection's batch: queue by queue, each
// message in publish order, under one lock acquisition per queue. Then
// the batch's mandatory messages no queue took are returned, and its
// confirms released. Reader goroutine, no lock held.
func (c *conn) flushRoutes() {
	b := &c.batch
	if len(b.msgs) == 0 {
		return
	}
	ch := b.ch
	var throttle chan struct{}
	var dead []*queueEntity
	routed := false
	now := int64(0)
	for _, qe := range b.targets {
		if qe.home != nil {
			qe.home.peer.awaitFirst()
		}
		qe.mu.Lock()
		if qe.deleted {
			qe.mu.Unlock()
			continue
		}
		if qe.home != nil {
			// A remote queue counts as routed only if its home node
			// takes the messages (as in deliverTo).
			for i := range b.msgs {
				m := &b.msgs[i]
				if ch.forwardLocked(qe, m.msg, m.confirmSeq, &throttle) {
					routed = true
				}
			}
		} else {
			routed = true
			for i := range b.msgs {
				m := &b.msgs[i]
				last := i == len(b.msgs)-1
				if ch.enqueueLocked(qe, m.msg, messageTTL(m.msg.Header), &now, m.confirmSeq, last, &throttle) &&
					(len(dead) == 0 || dead[len(dead)-1] != qe) {
					dead = append(dead, qe)
				}
			}
		}
		qe.mu.Unlock()
	}
	for _, qe := range dead {
		qe.flushDead()
	}
	for i := range b.msgs {
		m := &b.msgs[i]
		if !routed {
			ch.returnUnroutable(m.mandatory, m.msg)
		} else {
			m.xc.out.Add(1)
		}
		if m.confirmSeq != 0 {
			ch.confirms.done(m.confirmSeq, nil)
		}
	}
	clear(b.msgs)
	b.msgs = b.msgs[:0]
	clear(b.targets)
	b.targets = b.targets[:0]
	b.bytes = 0
	b.ch = nil
	if throttle != nil {
		c.holdPublisher(throttle)
	}
}

// joinsBatch reports whether frame f may be read while the connection's
// batch is held: a basic.publish, content header or body frame on the
// batch's channel. Any other frame may observe or change the queues
// (a basic.get, a purge, a close), so the batch is enqueued before it.
func (c *conn) joinsBatch(f amqp.Frame) bool {
	if f.Channel != c.batch.ch.id {
		return false
	}
	switch f.Type {
	case amqp.FrameHeader, amqp.FrameBody:
		return true
	case amqp.FrameMethod:
		return len(f.Payload) >= 4 &&
			binary.BigEndian.Uint16(f.Payload) == amqp.ClassBasic &&
			binary.BigEndian.Uint16(f.Payload[2:]) == methodBasicPublish
	}
	return false
}
