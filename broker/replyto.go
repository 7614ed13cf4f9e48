package broker

import (
	"encoding/binary"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// Direct reply-to (RabbitMQ's amq.rabbitmq.reply-to): a channel consumes
// from the pseudo-queue amq.rabbitmq.reply-to in no-ack mode; its
// publishes with reply_to "amq.rabbitmq.reply-to" get that property
// rewritten to a name of its own, "amq.rabbitmq.reply-to.<token>"; a
// publish to the default exchange with that name as routing key goes
// straight to the consumer, with no queue in between.

const (
	replyToQueue  = "amq.rabbitmq.reply-to"
	replyToPrefix = replyToQueue + "."
)

// replyConsumer is a channel's consumer of amq.rabbitmq.reply-to.
type replyConsumer struct {
	ch   *channel
	tag  string
	name string
	// stuck is set when a reply was dropped because the consumer's
	// outbound buffer stayed over its limit: later replies do not wait
	// for it again until it drains (routeReply).
	stuck atomic.Bool
}

// replyRegistry holds the reply consumers of the broker.
type replyRegistry struct {
	// mu (a leaf lock) guards the maps.
	mu     sync.Mutex
	byName map[string]*replyConsumer
	byCh   map[*channel]*replyConsumer
}

func (r *replyRegistry) lookup(name string) *replyConsumer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byName[name]
}

func (r *replyRegistry) of(ch *channel) *replyConsumer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byCh[ch]
}

// drop forgets the reply consumer of ch (tag "" = whatever its tag);
// it reports whether there was one.
func (r *replyRegistry) drop(ch *channel, tag string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc := r.byCh[ch]
	if rc == nil || (tag != "" && rc.tag != tag) {
		return false
	}
	delete(r.byCh, ch)
	delete(r.byName, rc.name)
	return true
}

// consumeReplyTo is basic.consume on amq.rabbitmq.reply-to.
func (ch *channel) consumeReplyTo(m *amqp.BasicConsume) error {
	if !m.NoAck {
		return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 20, "reply consumer cannot acknowledge")
	}
	r := &ch.c.b.reply
	tag := m.ConsumerTag
	if tag == "" {
		tag = randomName("amq.ctag-")
	}
	r.mu.Lock()
	if r.byCh[ch] != nil {
		r.mu.Unlock()
		return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 20, "reply consumer already set")
	}
	if r.byName == nil {
		r.byName = make(map[string]*replyConsumer)
		r.byCh = make(map[*channel]*replyConsumer)
	}
	rc := &replyConsumer{ch: ch, tag: tag, name: randomName(replyToPrefix)}
	r.byName[rc.name] = rc
	r.byCh[ch] = rc
	r.mu.Unlock()
	if !m.NoWait {
		ch.c.send(ch.id, &amqp.BasicConsumeOk{ConsumerTag: tag})
	}
	return nil
}

// rewriteReplyTo replaces reply_to "amq.rabbitmq.reply-to" in a publish's
// content header with the channel's reply name. Other headers come back
// unchanged, undecoded.
func (ch *channel) rewriteReplyTo(header []byte) ([]byte, error) {
	if len(header) < 14 || binary.BigEndian.Uint16(header[12:])&amqp.FlagReplyTo == 0 {
		return header, nil
	}
	var h amqp.ContentHeader
	if err := amqp.DecodeContentHeader(header, &h); err != nil {
		return nil, err
	}
	if h.Properties.ReplyTo != replyToQueue {
		return header, nil
	}
	rc := ch.c.b.reply.of(ch)
	if rc == nil {
		return nil, amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 40, "fast reply consumer does not exist")
	}
	h.Properties.ReplyTo = rc.name
	return h.AppendTo(nil)
}

// routeReply delivers a publish to the default exchange addressed to a
// reply name straight to its consumer. It reports whether it was
// delivered; an unknown name is unroutable.
//
// With no queue in between, the reply goes to the consumer's outbound
// buffer, which must stay bounded although this reader is another
// connection's: while that buffer is over its limit the publisher waits
// for it to drain, at most flowWait, and a reply that still finds it over
// is dropped as unroutable (returned when mandatory); until the buffer
// drains, further replies to it are dropped without waiting. A consumer
// that does not read its replies loses them rather than holding its RPC
// server's connection; RabbitMQ documents direct replies as not
// fault-tolerant.
func (ch *channel) routeReply(mandatory bool, msg *queue.Message) bool {
	rc := ch.c.b.reply.lookup(msg.RoutingKey)
	if rc != nil {
		if rc.ch.c.out.over() {
			if rc.stuck.Load() || !ch.c.waitDrained(rc.ch.c) {
				rc.stuck.Store(true)
				rc = nil
			}
		} else if rc.stuck.Load() {
			rc.stuck.Store(false)
		}
	}
	if rc == nil || !rc.deliver(msg) {
		ch.returnUnroutable(mandatory, msg)
		return false
	}
	return true
}

// deliver writes msg to the reply consumer's connection, no-ack.
func (rc *replyConsumer) deliver(msg *queue.Message) bool {
	ch := rc.ch
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return false
	}
	ch.nextTag++
	o := ch.c.out
	o.lock()
	was := len(o.buf) + len(o.segs)
	start := len(o.buf)
	o.buf = appendMethod(o.buf, ch.id, &amqp.BasicDeliver{
		ConsumerTag: rc.tag,
		DeliveryTag: ch.nextTag,
		Exchange:    msg.Exchange,
		RoutingKey:  msg.RoutingKey,
	})
	added := ch.appendContentLocked(msg)
	o.unlock(len(o.buf) - start + added)
	ch.mu.Unlock()
	if was == 0 {
		o.wake()
	}
	return true
}

// isReplyName reports whether a default-exchange routing key addresses a
// reply consumer.
func isReplyName(key string) bool { return strings.HasPrefix(key, replyToPrefix) }

// waitDrained waits, at most flowWait, for peer's outbound buffer to be
// within its limit, and reports whether it is. Reader goroutine (its
// flowTimer), no lock held.
func (c *conn) waitDrained(peer *conn) bool {
	if c.flowTimer == nil {
		c.flowTimer = time.NewTimer(flowWait)
	} else {
		c.flowTimer.Reset(flowWait)
	}
	// Go 1.23 timers: Stop leaves no stale tick behind.
	defer c.flowTimer.Stop()
	for {
		d := peer.out.drainedChan()
		if d == nil {
			return true
		}
		select {
		case <-d:
		case <-peer.writerDone:
			return false
		case <-c.closeSig:
			return false
		case <-c.flowTimer.C:
			return !peer.out.over()
		}
	}
}
