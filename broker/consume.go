package broker

import (
	"crypto/rand"
	"encoding/base64"
	"errors"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

func zapErr(err error) zap.Field { return zap.Error(err) }

// consumerArgs is what a basic.consume asked for. The queue's state
// machine has its own record of the consumer, made by queue.OpAttach and
// named by ID.
type consumerArgs struct {
	ID        queue.ConsumerID
	Tag       string
	NoAck     bool
	Exclusive bool
	Prefetch  int
	Priority  int
}

// consumer is a basic.consume: what it asked for plus where its
// deliveries go.
type consumer struct {
	consumerArgs
	ch *channel
	qe *queueEntity
	// starved is guarded by the connection's starvedMu.
	starved bool
	// chStarved is guarded by the channel's starvedMu.
	chStarved bool
	// timeout is the consumer timeout of its deliveries in ms, 0 for the
	// broker's (consumer_timeout.go).
	timeout int64
	// stream is the cursor of a consumer of a stream queue (stream.go).
	stream *queue.StreamConsumer
	// remote is the link handle of a consumer of a remote queue
	// (link.go), or of a peer's consumer this node feeds (link set).
	remote uint64
	// link, on a queue's home node, is the node link a peer's consumer
	// is fed over (linkserve.go); ch is then nil.
	link *linkServer
	// via is the link a consumer of this node's client is fed over: the
	// home node of a remote queue (link.go), or a member of the data
	// group of a replicated queue this node has no replica of
	// (quorumlink.go).
	via *linkPeer
}

// serverCancel ends the consumer from the broker's side (its queue was
// deleted), telling whoever consumes.
func (cons *consumer) serverCancel() {
	if cons.link != nil {
		cons.link.cancelled(cons)
		return
	}
	cons.ch.serverCancel(cons)
}

// Acquire implements queue.Gate: the connection's outbound cap, then
// the channel-wide prefetch. Called under the queue's lock.
//
// A consumer refused by the outbound cap is retried by the connection's
// writer once the buffer drains (conn.starve). One refused by a limit of its
// channel is retried by whoever lifts it (channel.kickStarved), with no
// goroutine looking in between: a refused consumer costs nothing until then.
//
// The outbound cap counts what is written and what this dispatch has
// already promised (reserved) but not yet appended: the queue hands out a
// whole batch of deliveries before any of them is written.
func (cons *consumer) Acquire(size int) bool {
	if cons.link != nil {
		return cons.link.acquire(cons)
	}
	ch := cons.ch
	c := ch.c
	o := c.out
	if o.pending.Load()+o.reserved.Load() > int64(c.b.cfg.OutboundCap) {
		c.starve(cons)
		return false
	}
	if cons.channelCredit() {
		o.reserved.Add(deliveryCost(size))
		return true
	}
	ch.starve(cons)
	// The limit may have lifted before cons was recorded, and the lifter
	// found nobody to retry: look once more. A stale record is harmless.
	if cons.channelCredit() {
		o.reserved.Add(deliveryCost(size))
		return true
	}
	return false
}

// deliveryCost is what a delivery of a body of size bytes is reckoned to
// add to the outbound buffer, for the outbound cap: the body and an
// allowance for the frames around it.
func deliveryCost(size int) int64 { return int64(size) + 256 }

// channelCredit takes one delivery's worth of the channel's limits.
func (cons *consumer) channelCredit() bool {
	ch := cons.ch
	if cons.NoAck {
		return true
	}
	limit := ch.globalPrefetch.Load()
	for {
		u := ch.globalUnacked.Load()
		if limit > 0 && u >= limit {
			return false
		}
		if ch.globalUnacked.CompareAndSwap(u, u+1) {
			return true
		}
	}
}

// starve records that cons was refused a delivery by a limit of ch.
func (ch *channel) starve(cons *consumer) {
	ch.starvedMu.Lock()
	if !cons.chStarved {
		cons.chStarved = true
		ch.starved = append(ch.starved, cons)
	}
	ch.starvedMu.Unlock()
}

// kickStarved dispatches again to the consumers refused by a limit of ch,
// after the limit was raised or credit given back. Call with no lock held.
func (ch *channel) kickStarved() {
	ch.starvedMu.Lock()
	list := ch.starved
	ch.starved = nil
	for _, cons := range list {
		cons.chStarved = false
	}
	ch.starvedMu.Unlock()
	for _, cons := range list {
		cons.qe.dispatch()
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
	} else {
		ch.prefetch = int(m.PrefetchCount)
		ch.shown.prefetch.Store(int32(m.PrefetchCount))
		// RabbitMQ unlimits the channel's limiter here too: a per-consumer
		// qos lifts the channel-wide limit.
		ch.globalPrefetch.Store(0)
	}
	ch.c.send(ch.id, &amqp.BasicQosOk{})
	ch.kickStarved()
	return nil
}

func (ch *channel) consume(m *amqp.BasicConsume) error {
	if m.Queue == replyToQueue {
		return ch.consumeReplyTo(m)
	}
	if err := ch.accessQueue(permRead, m.Queue, amqp.ClassBasic, 20); err != nil {
		return err
	}
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
	prio, err := consumerPriority(m.Arguments, qe.name, ch.c.vhost.name)
	if qe.repl != nil && err == nil {
		return ch.consumeRepl(qe, m, tag, prio)
	}
	if qe.home != nil && err == nil {
		return ch.consumeRemote(qe, m, tag, prio)
	}
	if qe.stream != nil {
		return ch.consumeStream(qe, m, tag)
	}
	if err != nil {
		return err
	}
	cons := &consumer{
		consumerArgs: consumerArgs{
			ID:        queue.ConsumerID(ch.c.b.consumerIDs.Add(1)),
			Tag:       tag,
			NoAck:     m.NoAck,
			Exclusive: m.Exclusive,
			Prefetch:  ch.prefetch,
			Priority:  prio,
		},
		ch: ch,
		qe: qe,
	}
	attach := queue.Cmd{Op: queue.OpAttach, Consumer: cons.ID, Tag: tag, NoAck: m.NoAck,
		Exclusive: m.Exclusive, Prefetch: ch.prefetch, Priority: prio}

	qe.mu.Lock()
	if qe.deleted {
		qe.mu.Unlock()
		return notFoundQueue(qe.name, ch.c.vhost.name, amqp.ClassBasic, 20)
	}
	if _, err := qe.q.Apply(&attach, nil); err != nil {
		qe.mu.Unlock()
		if errors.Is(err, queue.ErrExclusiveConsumer) {
			return amqp.Errorf(amqp.AccessRefused, amqp.ClassBasic, 20,
				"queue '%s' in vhost '%s' in exclusive use", qe.name, ch.c.vhost.name)
		}
		return err
	}
	qe.addConsumerLocked(cons)
	ch.registerConsumerLocked(qe, cons, tag, m.NoWait)
	qe.mu.Unlock()
	return nil
}

// addConsumerLocked records cons, just attached to qe's state machine, by
// its id (the queue's deliveries name consumers by id), and gives the
// queue cons as the consumer's gate (consumer.Acquire). Hold qe.mu.
func (qe *queueEntity) addConsumerLocked(cons *consumer) {
	if qe.consumers == nil {
		qe.consumers = make(map[queue.ConsumerID]*consumer)
	}
	qe.consumers[cons.ID] = cons
	qe.q.SetGate(cons.ID, cons)
}

// registerConsumerLocked records cons, just added to qe's consumers, on
// the channel, answers basic.consume (consume-ok goes out before the first
// delivery) and dispatches. Hold qe.mu.
func (ch *channel) registerConsumerLocked(qe *queueEntity, cons *consumer, tag string, noWait bool) {
	qe.hadConsumer = true
	qe.touchLocked()
	cons.timeout = qe.fx.set.consumerTimeout
	ch.confirmConsumer(cons, tag, noWait)
	qe.dispatchLocked()
}

// confirmConsumer records cons as the channel's consumer tag and sends
// consume-ok unless noWait.
func (ch *channel) confirmConsumer(cons *consumer, tag string, noWait bool) {
	ch.mu.Lock()
	ch.consumers[tag] = cons
	ch.mu.Unlock()
	if !noWait {
		ch.c.send(ch.id, &amqp.BasicConsumeOk{ConsumerTag: tag})
	}
}

// lateConsumeOk sends the basic.consume-ok of cons, registered earlier
// (confirmConsumer without one), if the channel still has it: not after
// the channel closed or the consumer was cancelled.
func (ch *channel) lateConsumeOk(cons *consumer, tag string) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if !ch.closed && ch.consumers[tag] == cons {
		ch.c.send(ch.id, &amqp.BasicConsumeOk{ConsumerTag: tag})
	}
}

func (ch *channel) cancel(m *amqp.BasicCancel) error {
	ch.c.b.reply.drop(ch, m.ConsumerTag)
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
	if qe.stream != nil {
		qe.removeStreamConsumer(cons)
		return
	}
	if cons.via != nil {
		cons.via.cancelRemote(cons)
		return
	}
	if qe.repl != nil {
		qe.removeReplConsumer(cons)
		return
	}
	qe.mu.Lock()
	detach := queue.Cmd{Op: queue.OpDetach, Consumer: cons.ID}
	_, _ = qe.q.Apply(&detach, nil) // refused only if already detached
	delete(qe.consumers, cons.ID)
	qe.touchLocked()
	autoDelete := qe.autoDelete && qe.hadConsumer && qe.q.ConsumerCount() == 0 && !qe.deleted
	qe.mu.Unlock()
	if autoDelete {
		qe.vhost.deleteQueue(qe, false, false)
	}
}

// dispatch hands ready messages to consumers with credit.
func (qe *queueEntity) dispatch() {
	if qe.repl != nil && qe.stream != nil {
		// A replicated stream's consumers are cursors on this node's
		// replica (streamrepl.go).
		qe.vhost.b.withReplStream(qe, func(*queue.Stream) {})
		return
	}
	qe.mu.Lock()
	qe.dispatchLocked()
	qe.mu.Unlock()
}

// dispatchLocked runs the queue's dispatch and writes the deliveries to
// their consumers' connections. Hold qe.mu: deliveries leave in queue order.
//
// It is OpCheckout through the state machine's typed form (Queue.Checkout,
// the same transition): the deliveries come back as (consumer record,
// entry) pairs in a buffer the queue entity keeps, each consumer reached
// through its record's gate (consumerOf), each entry passed on by pointer.
func (qe *queueEntity) dispatchLocked() {
	if qe.deleted {
		return
	}
	if qe.stream != nil {
		qe.streamDispatchLocked()
		return
	}
	var now int64
	if qe.at {
		// Expired heads become dead letters instead of deliveries, at
		// the publish's clock when a publish dispatches.
		now = qe.fx.now
		if now == 0 {
			now = nowMs()
		}
	}
	var dls []queue.DeadLetter
	ds := qe.q.Checkout(now, qe.deliveries[:0], &dls)
	// OpCheckout's dead letters come ahead of its deliveries.
	dead := qe.deadLocked(dls, nil)
	for i := range ds {
		d := &ds[i]
		cons := qe.consumerOf(d.Consumer)
		e := &d.Entry
		if cons.link != nil {
			cons.link.deliverLocked(cons, qe, e)
		} else {
			cons.ch.deliverEntry(cons, qe, e)
			cons.ch.c.out.reserved.Add(-deliveryCost(e.Msg.Size()))
		}
		qe.stats.countDelivery(cons.NoAck, e.Redelivered)
		qe.journalDelivery(cons.NoAck, e)
	}
	qe.doneDeliveriesLocked(ds)
	if dead {
		// The caller may not route dead letters itself: the timer does.
		qe.kickLocked()
	}
	if qe.drained != nil && qe.q.Ready() <= flowLow {
		close(qe.drained)
		qe.drained = nil
	}
	qe.kickPagerLocked()
}

// consumerOf is the broker's consumer of a delivery to c: the gate
// addConsumerLocked gave c's record, else (a record without that gate)
// the consumer of c's id. Hold qe.mu.
func (qe *queueEntity) consumerOf(c *queue.Consumer) *consumer {
	if cons, ok := c.Gate.(*consumer); ok {
		return cons
	}
	return qe.consumers[c.ID]
}

// doneDeliveriesLocked hands the delivery buffer back for the next
// dispatch, cleared (it holds messages), unless a large dispatch grew it.
// Hold qe.mu.
func (qe *queueEntity) doneDeliveriesLocked(ds []queue.Delivery) {
	clear(ds)
	if cap(ds) > maxKeptEffects {
		ds = nil
	}
	qe.deliveries = ds[:0]
}

// deliver is deliverEntry of an entry made by the caller (a stream's).
func (ch *channel) deliver(cons *consumer, qe *queueEntity, e queue.Entry) {
	ch.deliverEntry(cons, qe, &e)
}

// deliverEntry writes basic.deliver with the message of e to the channel's
// connection and records it as unacknowledged. e is read, not kept. Hold
// qe.mu.
func (ch *channel) deliverEntry(cons *consumer, qe *queueEntity, e *queue.Entry) {
	ch.mu.Lock()
	ch.stats.countDeliveryLocked(cons.NoAck, e.Redelivered)
	ch.nextTag++
	tag := ch.nextTag
	if !cons.NoAck {
		ch.unacked.push(pending{tag: tag, qe: qe, cons: cons, seq: e.Seq, at: ch.c.b.ct.now.Load()})
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
	added := ch.appendContentLocked(qe.deliveryMessage(e, false))
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
	if err := ch.accessQueue(permRead, m.Queue, amqp.ClassBasic, 70); err != nil {
		return err
	}
	qe, err := ch.findQueue(m.Queue, amqp.ClassBasic, 70)
	if err != nil {
		return err
	}
	if qe.stream != nil {
		return streamGetError(qe)
	}
	if qe.repl != nil {
		return ch.getRepl(qe, m)
	}
	if qe.home != nil {
		return ch.getRemote(qe, m)
	}
	qe.mu.Lock()
	e, ok, dead := qe.getPagedLocked(m.NoAck)
	if dead {
		defer qe.flushDead()
	}
	if !ok {
		qe.stats.getEmpty++
		qe.mu.Unlock()
		ch.stats.getEmpty.Add(1)
		ch.c.send(ch.id, &amqp.BasicGetEmpty{})
		return nil
	}
	qe.journalDelivery(m.NoAck, &e)
	qe.stats.countGet(m.NoAck, e.Redelivered)
	wake := ch.sendGetOk(qe, e.Seq, m.NoAck, e.Redelivered, qe.deliveryMessage(&e, true), qe.q.Ready())
	qe.mu.Unlock()
	if wake {
		ch.c.out.wake()
	}
	return nil
}

// sendGetOk counts a basic.get that took msg (message seq of qe), holds the
// delivery unless noAck, and writes get-ok (count messages left) with msg;
// it reports whether the writer must be woken (the caller does so once it
// holds no lock).
func (ch *channel) sendGetOk(qe *queueEntity, seq uint64, noAck, redelivered bool, msg *queue.Message, count int) (wake bool) {
	ch.mu.Lock()
	ch.stats.countGetLocked(noAck, redelivered)
	ch.nextTag++
	tag := ch.nextTag
	if !noAck {
		ch.unacked.push(pending{tag: tag, qe: qe, seq: seq})
	}
	o := ch.c.out
	o.lock()
	was := len(o.buf) + len(o.segs)
	start := len(o.buf)
	o.buf = amqp.AppendMethodFrame(o.buf, ch.id, &amqp.BasicGetOk{DeliveryTag: tag, Redelivered: redelivered,
		Exchange: msg.Exchange, RoutingKey: msg.RoutingKey, MessageCount: uint32(count)})
	added := ch.appendContentLocked(msg)
	o.unlock(len(o.buf) - start + added)
	ch.mu.Unlock()
	return was == 0
}

// takeUnacked removes the deliveries an ack, nack or reject names, as
// RabbitMQ's collect_acks does, and appends them to dst: the delivery
// tagged tag, with multiple also every earlier one; multiple with tag 0
// takes all (none is fine). The tag itself must be outstanding, even with
// multiple.
func (ch *channel) takeUnacked(tag uint64, multiple bool, dst []pending) ([]pending, bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	switch {
	case multiple && tag == 0:
		return append(dst, ch.unacked.takeAll()...), true
	case multiple:
		return ch.unacked.takeUpTo(tag, dst)
	}
	return ch.unacked.take(tag, dst)
}

// restoreUnacked puts deliveries taken by an ack in a rolled back
// transaction back among the outstanding ones, in tag order.
func (ch *channel) restoreUnacked(ps []pending) {
	if len(ps) == 0 {
		return
	}
	ch.mu.Lock()
	ch.unacked.restore(ps)
	ch.mu.Unlock()
}

// settleScratch is the buffer of the deliveries an ack, nack or reject
// outside a transaction takes: the reader reuses it, so that settling
// allocates nothing. A buffer grown by a large multiple ack is dropped.
func (ch *channel) settleScratch() []pending { return ch.ackBuf[:0] }

// doneScratch hands ps, taken into settleScratch's buffer, back.
func (ch *channel) doneScratch(ps []pending) {
	clear(ps)
	if cap(ps) <= 1024 {
		ch.ackBuf = ps[:0]
	} else {
		ch.ackBuf = nil
	}
}

func (ch *channel) ack(tag uint64, multiple bool) error {
	if ch.tx {
		taken, ok := ch.takeUnacked(tag, multiple, nil)
		if !ok {
			return unknownTag(tag, 80)
		}
		ch.stats.ack.Add(uint64(len(taken)))
		ch.txAcks = append(ch.txAcks, txAck{ps: taken, ack: true})
		return nil
	}
	taken, ok := ch.takeUnacked(tag, multiple, ch.settleScratch())
	if !ok {
		return unknownTag(tag, 80)
	}
	ch.stats.ack.Add(uint64(len(taken)))
	ch.settle(taken)
	ch.doneScratch(taken)
	return nil
}

func (ch *channel) reject(tag uint64, multiple, requeue bool, methodID uint16) error {
	var dst []pending
	if !ch.tx {
		dst = ch.settleScratch()
	}
	taken, ok := ch.takeUnacked(tag, multiple, dst)
	if !ok {
		return unknownTag(tag, methodID)
	}
	if err := streamRejectError(taken, methodID); err != nil {
		return err
	}
	if ch.tx {
		ch.txAcks = append(ch.txAcks, txAck{ps: taken, requeue: requeue})
		return nil
	}
	if requeue {
		ch.requeue(taken)
	} else {
		ch.discard(taken)
	}
	ch.doneScratch(taken)
	return nil
}

func unknownTag(tag uint64, methodID uint16) error {
	return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, methodID, "unknown delivery tag %d", tag)
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
		if qe.repl != nil {
			i = ch.settleRepl(queue.OpSettle, ps, i)
			continue
		}
		if qe.home != nil {
			i = ch.settleRemote(linkSettle, ps, i)
			continue
		}
		qe.mu.Lock()
		if qe.stream != nil {
			qe.streamSettleLocked(ps[i:j])
		} else if !qe.deleted {
			qe.stats.ack += uint64(j - i)
			qe.settleRunLocked(queue.OpSettle, ps[i:j])
			qe.dispatchLocked()
		}
		qe.mu.Unlock()
		i = j
	}
	ch.kickStarved()
}

// requeue returns deliveries to their queues, ahead of newer messages.
func (ch *channel) requeue(ps []pending) {
	ch.releaseGlobal(ps)
	for i := 0; i < len(ps); {
		qe := ps[i].qe
		if qe.stream != nil {
			i = ch.streamReturn(ps, i)
			continue
		}
		if qe.repl != nil {
			i = ch.settleRepl(queue.OpReturn, ps, i)
			continue
		}
		if qe.home != nil {
			i = ch.settleRemote(linkReturn, ps, i)
			continue
		}
		j := i + 1
		for j < len(ps) && ps[j].qe == qe {
			j++
		}
		dead := false
		qe.mu.Lock()
		if !qe.deleted {
			dead = qe.settleRunLocked(queue.OpReturn, ps[i:j])
		}
		i = j
		qe.dispatchLocked()
		qe.mu.Unlock()
		if dead {
			qe.flushDead()
		}
	}
	ch.kickStarved()
}

// releaseGlobal gives back channel-wide prefetch credit for consumer
// deliveries. The caller kicks starved consumers once it has settled or
// returned ps.
func (ch *channel) releaseGlobal(ps []pending) {
	n := 0
	for i := range ps {
		if ps[i].cons != nil {
			n++
		}
	}
	if n > 0 {
		ch.globalUnacked.Add(-int32(n))
	}
}
