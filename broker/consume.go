package broker

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"sort"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

func zapErr(err error) zap.Field { return zap.Error(err) }

// consumer is a basic.consume: the queue's view (queue.Consumer) plus
// where its deliveries go.
type consumer struct {
	queue.Consumer
	ch *channel
	qe *queueEntity
	// starved is guarded by the connection's starvedMu.
	starved bool
}

// Acquire implements queue.Gate: channel.flow, the connection's outbound
// cap and the channel-wide prefetch. Called under the queue's lock.
func (cons *consumer) Acquire() bool {
	ch := cons.ch
	c := ch.c
	if ch.paused.Load() || c.out.pending.Load() > int64(c.b.cfg.OutboundCap) {
		c.starve(cons)
		return false
	}
	if cons.NoAck {
		return true
	}
	limit := ch.globalPrefetch.Load()
	for {
		u := ch.globalUnacked.Load()
		if limit > 0 && u >= limit {
			c.starve(cons)
			return false
		}
		if ch.globalUnacked.CompareAndSwap(u, u+1) {
			return true
		}
	}
}

// randomName returns prefix followed by 22 URL-safe random characters, as
// RabbitMQ's generated queue names and consumer tags are.
func randomName(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

func (ch *channel) qos(m *amqp.BasicQos) error {
	if m.PrefetchSize != 0 {
		return amqp.Errorf(amqp.NotImplemented, amqp.ClassBasic, 10, "prefetch_size!=0 (%d)", m.PrefetchSize)
	}
	if m.Global {
		ch.globalPrefetch.Store(int32(m.PrefetchCount))
		ch.c.out.wake()
	} else {
		ch.prefetch = int(m.PrefetchCount)
	}
	ch.c.send(ch.id, &amqp.BasicQosOk{})
	return nil
}

func (ch *channel) consume(m *amqp.BasicConsume) error {
	qe, err := ch.findQueue(m.Queue, amqp.ClassBasic, 20)
	if err != nil {
		return err
	}
	tag := m.ConsumerTag
	if tag == "" {
		tag = randomName("amq.ctag-")
	}
	ch.mu.Lock()
	_, dup := ch.consumers[tag]
	ch.mu.Unlock()
	if dup {
		return amqp.Errorf(amqp.NotAllowed, amqp.ClassBasic, 20, "attempt to reuse consumer tag '%s'", tag)
	}
	cons := &consumer{
		Consumer: queue.Consumer{
			Tag:       tag,
			NoAck:     m.NoAck,
			Exclusive: m.Exclusive,
			Prefetch:  ch.prefetch,
		},
		ch: ch,
		qe: qe,
	}
	cons.Gate = cons
	cons.Owner = cons

	qe.mu.Lock()
	if qe.deleted {
		qe.mu.Unlock()
		return notFoundQueue(qe.name, ch.c.vhost.name, amqp.ClassBasic, 20)
	}
	if err := qe.q.AddConsumer(&cons.Consumer); err != nil {
		qe.mu.Unlock()
		if errors.Is(err, queue.ErrExclusiveConsumer) {
			return amqp.Errorf(amqp.AccessRefused, amqp.ClassBasic, 20,
				"queue '%s' in vhost '%s' in exclusive use", qe.name, ch.c.vhost.name)
		}
		return err
	}
	qe.hadConsumer = true
	ch.mu.Lock()
	ch.consumers[tag] = cons
	ch.mu.Unlock()
	// consume-ok goes out before the first delivery.
	if !m.NoWait {
		ch.c.send(ch.id, &amqp.BasicConsumeOk{ConsumerTag: tag})
	}
	qe.dispatchLocked()
	qe.mu.Unlock()
	return nil
}

func (ch *channel) cancel(m *amqp.BasicCancel) error {
	ch.mu.Lock()
	cons := ch.consumers[m.ConsumerTag]
	delete(ch.consumers, m.ConsumerTag)
	ch.mu.Unlock()
	if cons != nil {
		cons.qe.removeConsumer(cons)
	}
	if !m.NoWait {
		ch.c.send(ch.id, &amqp.BasicCancelOk{ConsumerTag: m.ConsumerTag})
	}
	return nil
}

// serverCancel ends a consumer whose queue went away, telling the client
// when it understands basic.cancel from the server.
func (ch *channel) serverCancel(cons *consumer) {
	ch.mu.Lock()
	if ch.consumers[cons.Tag] != cons || ch.closed {
		ch.mu.Unlock()
		return
	}
	delete(ch.consumers, cons.Tag)
	ch.mu.Unlock()
	if ch.c.capCancelNotify {
		ch.c.send(ch.id, &amqp.BasicCancel{ConsumerTag: cons.Tag, NoWait: true})
	}
}

// removeConsumer takes cons off the queue; an auto-delete queue whose last
// consumer this was is deleted.
func (qe *queueEntity) removeConsumer(cons *consumer) {
	qe.mu.Lock()
	qe.q.RemoveConsumer(&cons.Consumer)
	autoDelete := qe.autoDelete && qe.hadConsumer && qe.q.ConsumerCount() == 0 && !qe.deleted
	qe.mu.Unlock()
	if autoDelete {
		qe.vhost.deleteQueue(qe, false, false)
	}
}

// dispatch hands ready messages to consumers with credit.
func (qe *queueEntity) dispatch() {
	qe.mu.Lock()
	qe.dispatchLocked()
	qe.mu.Unlock()
}

// dispatchLocked runs the queue's dispatch and writes the deliveries to
// their consumers' connections. Hold qe.mu: deliveries leave in queue order.
func (qe *queueEntity) dispatchLocked() {
	if qe.deleted {
		return
	}
	ds := qe.q.Dispatch(qe.scratch[:0])
	for i := range ds {
		cons := ds[i].Consumer.Owner.(*consumer)
		cons.ch.deliver(cons, qe, ds[i].Entry)
		ds[i] = queue.Delivery{}
	}
	qe.scratch = ds[:0]
}

// deliver writes basic.deliver with the message to the channel's
// connection and records it as unacknowledged. Hold qe.mu.
func (ch *channel) deliver(cons *consumer, qe *queueEntity, e queue.Entry) {
	ch.mu.Lock()
	ch.nextTag++
	tag := ch.nextTag
	if !cons.NoAck {
		ch.unacked = append(ch.unacked, pending{tag: tag, qe: qe, cons: cons, entry: e})
	}
	o := ch.c.out
	o.lock()
	was := len(o.buf) + len(o.segs)
	start := len(o.buf)
	m := amqp.BasicDeliver{
		ConsumerTag: cons.Tag,
		DeliveryTag: tag,
		Redelivered: e.Redelivered,
		Exchange:    e.Msg.Exchange,
		RoutingKey:  e.Msg.RoutingKey,
	}
	o.buf = appendMethod(o.buf, ch.id, &m)
	added := ch.appendContentLocked(e.Msg)
	o.unlock(len(o.buf) - start + added)
	ch.mu.Unlock()
	if was == 0 {
		o.wake()
	}
}

// appendContentLocked appends the header and body frames of msg; bodies
// of bigBody bytes or more are referenced, not copied. It returns the
// number of referenced bytes. Hold the outbound lock.
func (ch *channel) appendContentLocked(msg *queue.Message) int {
	o := ch.c.out
	o.buf = amqp.AppendFrame(o.buf, amqp.FrameHeader, ch.id, msg.Header)
	if len(msg.Body) < bigBody {
		o.buf = amqp.AppendBodyFrames(o.buf, ch.id, msg.Body, ch.c.frameMax)
		return 0
	}
	maxPayload := len(msg.Body)
	if ch.c.frameMax > 0 {
		maxPayload = int(ch.c.frameMax) - amqp.FrameOverhead
	}
	refs := 0
	for body := msg.Body; len(body) > 0; {
		n := min(len(body), maxPayload)
		o.buf = appendFrameHeader(o.buf, amqp.FrameBody, ch.id, n)
		o.appendRefLocked(body[:n])
		o.buf = append(o.buf, amqp.FrameEnd)
		refs += n
		body = body[n:]
	}
	return refs
}

func (ch *channel) get(m *amqp.BasicGet) error {
	qe, err := ch.findQueue(m.Queue, amqp.ClassBasic, 70)
	if err != nil {
		return err
	}
	qe.mu.Lock()
	e, ok := qe.q.Get(m.NoAck)
	if !ok {
		qe.mu.Unlock()
		ch.c.send(ch.id, &amqp.BasicGetEmpty{})
		return nil
	}
	ch.mu.Lock()
	ch.nextTag++
	tag := ch.nextTag
	if !m.NoAck {
		ch.unacked = append(ch.unacked, pending{tag: tag, qe: qe, entry: e})
	}
	o := ch.c.out
	o.lock()
	was := len(o.buf) + len(o.segs)
	start := len(o.buf)
	o.buf = amqp.AppendMethodFrame(o.buf, ch.id, &amqp.BasicGetOk{
		DeliveryTag:  tag,
		Redelivered:  e.Redelivered,
		Exchange:     e.Msg.Exchange,
		RoutingKey:   e.Msg.RoutingKey,
		MessageCount: uint32(qe.q.Ready()),
	})
	added := ch.appendContentLocked(e.Msg)
	o.unlock(len(o.buf) - start + added)
	ch.mu.Unlock()
	qe.mu.Unlock()
	if was == 0 {
		o.wake()
	}
	return nil
}

// takeUnacked removes the deliveries an ack, nack or reject names: tag
// alone, or with multiple every delivery up to tag (0 = all).
func (ch *channel) takeUnacked(tag uint64, multiple bool) ([]pending, bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	u := ch.unacked
	if multiple {
		n := len(u)
		if tag != 0 {
			n = sort.Search(len(u), func(i int) bool { return u[i].tag > tag })
			if n == 0 {
				return nil, false
			}
		}
		taken := make([]pending, n)
		copy(taken, u[:n])
		clear(u[:n])
		ch.unacked = u[n:]
		return taken, true
	}
	i := sort.Search(len(u), func(i int) bool { return u[i].tag >= tag })
	if i == len(u) || u[i].tag != tag {
		return nil, false
	}
	p := u[i]
	if i == 0 {
		u[0] = pending{}
		ch.unacked = u[1:]
	} else {
		copy(u[i:], u[i+1:])
		u[len(u)-1] = pending{}
		ch.unacked = u[:len(u)-1]
	}
	return []pending{p}, true
}

func (ch *channel) ack(tag uint64, multiple bool) error {
	if ch.tx {
		if !ch.hasUnacked(tag, multiple) {
			return unknownTag(tag, 80)
		}
		ch.txAcks = append(ch.txAcks, txAck{tag: tag, multiple: multiple, ack: true})
		return nil
	}
	taken, ok := ch.takeUnacked(tag, multiple)
	if !ok {
		return unknownTag(tag, 80)
	}
	ch.settle(taken)
	return nil
}

func (ch *channel) reject(tag uint64, multiple, requeue bool, methodID uint16) error {
	if ch.tx {
		if !ch.hasUnacked(tag, multiple) {
			return unknownTag(tag, methodID)
		}
		ch.txAcks = append(ch.txAcks, txAck{tag: tag, multiple: multiple, requeue: requeue})
		return nil
	}
	taken, ok := ch.takeUnacked(tag, multiple)
	if !ok {
		return unknownTag(tag, methodID)
	}
	if requeue {
		ch.requeue(taken)
	} else {
		ch.settle(taken)
	}
	return nil
}

func unknownTag(tag uint64, methodID uint16) error {
	return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, methodID, "unknown delivery tag %d", tag)
}

// hasUnacked reports whether an ack of tag would find a delivery.
func (ch *channel) hasUnacked(tag uint64, multiple bool) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if multiple && tag == 0 {
		return len(ch.unacked) > 0
	}
	i := sort.Search(len(ch.unacked), func(i int) bool { return ch.unacked[i].tag >= tag })
	if i == len(ch.unacked) {
		return false
	}
	return multiple || ch.unacked[i].tag == tag
}

// settle acknowledges deliveries: the queues forget them and may deliver
// more. Runs of the same queue and consumer are settled under one lock.
func (ch *channel) settle(ps []pending) {
	ch.releaseGlobal(ps)
	for i := 0; i < len(ps); {
		j := i + 1
		for j < len(ps) && ps[j].qe == ps[i].qe && ps[j].cons == ps[i].cons {
			j++
		}
		qe := ps[i].qe
		qe.mu.Lock()
		if !qe.deleted {
			var qc *queue.Consumer
			if ps[i].cons != nil {
				qc = &ps[i].cons.Consumer
			}
			qe.q.Settle(qc, j-i)
			qe.dispatchLocked()
		}
		qe.mu.Unlock()
		i = j
	}
}

// requeue returns deliveries to their queues, ahead of newer messages.
func (ch *channel) requeue(ps []pending) {
	ch.releaseGlobal(ps)
	for i := 0; i < len(ps); {
		qe := ps[i].qe
		qe.mu.Lock()
		for ; i < len(ps) && ps[i].qe == qe; i++ {
			if qe.deleted {
				continue
			}
			var qc *queue.Consumer
			if ps[i].cons != nil {
				qc = &ps[i].cons.Consumer
			}
			qe.q.Return(qc, ps[i].entry)
		}
		qe.dispatchLocked()
		qe.mu.Unlock()
	}
}

// releaseGlobal gives back channel-wide prefetch credit for consumer
// deliveries and lets starved consumers try again.
func (ch *channel) releaseGlobal(ps []pending) {
	n := 0
	for i := range ps {
		if ps[i].cons != nil {
			n++
		}
	}
	if n == 0 {
		return
	}
	ch.globalUnacked.Add(-int32(n))
	if ch.globalPrefetch.Load() > 0 {
		ch.c.out.wake()
	}
}
