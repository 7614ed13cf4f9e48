package broker

import (
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// Dead-lettering. The queue's state machine reports every message it
// removes without an acknowledgement as a queue.DeadLetter: rejected
// (reject or nack with requeue=false), expired, maxlen, delivery_limit.
// Under the queue's lock the broker deletes the message's durable record
// and, when the queue has a dead-letter exchange, keeps it in
// queueFeatures.dead; once the lock is released flushDead republishes it
// to the exchange with x-death recorded, as rabbit_dead_letter does. A
// second queue's lock is never taken while holding the first.

// maxDeadLetterDepth bounds chains of dead-letterings set off by one
// (each hop is a queue whose publish dead-letters again).
const maxDeadLetterDepth = 16

// deadLocked deletes the durable records of dls (except that of fresh, a
// message being published and not journaled) and keeps them for flushDead
// when the queue has a dead-letter exchange. It reports whether flushDead
// has work. Hold qe.mu.
func (qe *queueEntity) deadLocked(dls []queue.DeadLetter, fresh *queue.Message) bool {
	if len(dls) == 0 {
		return false
	}
	b := qe.vhost.b
	hasDLX := qe.fx.set.hasDLX
	for i := range dls {
		// A paged-out message (Msg nil) to be dead-lettered keeps its
		// record until flushDead has read it back.
		if e := dls[i].Entry; e.Msg != fresh && e.Seq != 0 && (e.Msg != nil || !hasDLX) {
			b.unjournal(qe, e)
		}
	}
	if !hasDLX {
		return false
	}
	qe.fx.dead = append(qe.fx.dead, dls...)
	return true
}

// flushDead routes the queue's pending dead letters to its dead-letter
// exchange. Call with no lock held.
func (qe *queueEntity) flushDead() {
	qe.flushDeadDepth(0)
}

func (qe *queueEntity) flushDeadDepth(depth int) {
	qe.mu.Lock()
	dls := qe.fx.dead
	qe.fx.dead = nil
	set := qe.fx.set
	qe.mu.Unlock()
	qe.loadDead(dls)
	if len(dls) == 0 || !set.hasDLX {
		return
	}
	if depth >= maxDeadLetterDepth {
		qe.vhost.b.log.Warn("dead-letter chain too long, dropping", zap.String("queue", qe.name), zap.Int("messages", len(dls)))
		return
	}
	now := time.Now()
	for i := range dls {
		qe.vhost.deadLetter(qe.name, &set, &dls[i], now, depth)
	}
}

// loadDead reads back the paged-out messages among dls (Msg nil) and
// then deletes their records; one that cannot be read is dropped (its Msg
// stays nil and deadLetter skips it). Call with no lock held.
func (qe *queueEntity) loadDead(dls []queue.DeadLetter) {
	var refs []queue.PageRef
	var idx []int
	for i := range dls {
		if dls[i].Entry.Msg == nil && dls[i].Entry.Seq != 0 {
			refs = append(refs, queue.PageRef{Seq: dls[i].Entry.Seq, Spilled: dls[i].Entry.Spilled})
			idx = append(idx, i)
		}
	}
	if len(refs) == 0 {
		return
	}
	b := qe.vhost.b
	qe.mu.Lock()
	storeID, pageID := qe.storeID, qe.pageID
	qe.mu.Unlock()
	msgs, err := b.readPages(storeID, pageID, refs)
	if err != nil {
		b.log.Error("reading paged-out dead letters", zap.String("queue", qe.name), zap.Error(err))
		msgs = make([]*queue.Message, len(refs))
	}
	qe.mu.Lock()
	for j, i := range idx {
		b.unjournal(qe, dls[i].Entry)
		dls[i].Entry.Msg = msgs[j]
	}
	qe.mu.Unlock()
}

// deadLetter republishes one dead letter of queue src to the dead-letter
// exchange of set: x-death and the x-first/last-death headers recorded,
// the expiration property removed (kept as original-expiration), routed
// with x-dead-letter-routing-key or the message's own routing keys, and
// not delivered to a queue where it would close a cycle.
func (v *vhost) deadLetter(src string, set *queueSettings, dl *queue.DeadLetter, now time.Time, depth int) {
	var buf [8]*queueEntity
	msg, targets, _ := v.deadLetterTargets(src, set, dl, now, buf[:0])
	for _, t := range targets {
		t.enqueue(msg, depth+1)
	}
}

// deadLetterTargets builds the message that dead letter dl of queue src
// becomes and appends the queues it goes to (cycles left out) to
// targets. routed reports whether it reached any queue (those where it
// would close a cycle included): it is false with no message (paged out
// and lost), a header that does not decode, no such exchange, no
// binding that matches.
func (v *vhost) deadLetterTargets(src string, set *queueSettings, dl *queue.DeadLetter, now time.Time,
	targets []*queueEntity) (msg *queue.Message, out []*queueEntity, routed bool) {
	m := dl.Entry.Msg
	if m == nil {
		return nil, targets, false // paged out and lost (logged when read)
	}
	var h amqp.ContentHeader
	if err := amqp.DecodeContentHeader(m.Header, &h); err != nil {
		return nil, targets, false
	}
	p := &h.Properties
	keys := []string{m.RoutingKey}
	if cc, ok := p.Headers["CC"].([]any); ok {
		for _, k := range cc {
			if s, ok := k.(string); ok {
				keys = append(keys, s)
			}
		}
	}
	death := queue.Death{Queue: src, Reason: dl.Reason, Exchange: m.Exchange, RoutingKeys: keys, Time: now}
	if p.Flags&amqp.FlagExpiration != 0 {
		death.OriginalExpiration = p.Expiration
		p.Expiration = ""
		p.Flags &^= amqp.FlagExpiration
	}
	p.Headers = queue.AddDeath(p.Headers, death)
	p.Flags |= amqp.FlagHeaders
	routeKeys := keys
	if set.hasDLRK {
		routeKeys = []string{set.dlrk}
		delete(p.Headers, "CC")
	}
	header, err := h.AppendTo(nil)
	if err != nil {
		v.b.log.Warn("dead-lettering: encoding header", zap.String("queue", src), zap.Error(err))
		return nil, targets, false
	}
	msg = &queue.Message{
		Exchange: set.dlx, RoutingKey: routeKeys[0], Header: header, Body: m.Body,
		Persistent: m.Persistent, Priority: m.Priority,
	}
	headers := func() amqp.Table { return p.Headers }
	v.mu.RLock()
	ex := v.exchanges[set.dlx]
	if ex == nil {
		// RabbitMQ drops dead letters for a missing exchange (at most
		// once; at least once they wait for it).
		v.mu.RUnlock()
		return msg, targets, false
	}
	n := len(targets)
	rs := routeScratchPool.Get().(*routeScratch)
	for _, k := range routeKeys {
		targets = v.routeLocked(ex, k, headers, targets, rs)
	}
	v.mu.RUnlock()
	routeScratchPool.Put(rs)
	routed = len(targets) > n
	out = targets[:n]
	for _, t := range targets[n:] {
		if queue.DeathCycle(p.Headers, t.name) {
			v.b.log.Debug("dead-letter cycle, dropping", zap.String("queue", t.name))
			continue
		}
		out = append(out, t)
	}
	return msg, out, routed
}

// enqueue publishes a message the broker made (a dead letter) into qe:
// journaled when persistent and durable, no confirm, then dispatched.
// Dead letters it causes are routed in turn. Call with no lock held.
func (qe *queueEntity) enqueue(msg *queue.Message, depth int) {
	b := qe.vhost.b
	if qe.repl != nil {
		b.enqueueRepl(qe, msg)
		return
	}
	if qe.home != nil {
		qe.forwardDead(msg)
		return
	}
	qe.mu.Lock()
	if qe.deleted {
		qe.mu.Unlock()
		return
	}
	if !qe.at {
		seq := qe.q.Publish(msg)
		qe.stats.publish++
		qe.pageOutLocked(seq, msg, b.journal(qe, seq, msg, 0, nil))
		qe.dispatchLocked()
		qe.mu.Unlock()
		return
	}
	now := nowMs()
	seq, accepted, kept, dead := qe.enqueueAtLocked(msg, -1, now)
	if accepted {
		if kept {
			qe.pageOutLocked(seq, msg, b.journal(qe, seq, msg, 0, nil))
		}
		qe.afterPublishLocked(now)
	}
	qe.mu.Unlock()
	if dead {
		qe.flushDeadDepth(depth)
	}
}

// forwardDead publishes a dead letter to qe, homed on another node, over
// the node link: no confirm (a link that is down drops it). No lock held.
func (qe *queueEntity) forwardDead(msg *queue.Message) {
	p := qe.home.peer
	p.mu.Lock()
	w := p.w
	p.mu.Unlock()
	if w == nil {
		return
	}
	start, ok := w.begin(lkPublish)
	if !ok {
		return
	}
	w.buf = appendU(w.buf, 0)
	w.buf = appendQueueRef(w.buf, qe)
	w.buf = appendLinkMessage(w.buf, msg)
	w.end(start)
	qe.mu.Lock()
	qe.stats.publish++
	qe.mu.Unlock()
}

// discard settles deliveries rejected without requeue (basic.reject,
// basic.nack): their queues dead-letter them with reason "rejected".
func (ch *channel) discard(ps []pending) {
	ch.releaseGlobal(ps)
	for i := 0; i < len(ps); {
		qe := ps[i].qe
		if qe.repl != nil {
			i = ch.settleRepl(queue.OpDiscard, ps, i)
			continue
		}
		if qe.home != nil {
			i = ch.settleRemote(linkDiscard, ps, i)
			continue
		}
		j := i + 1
		for j < len(ps) && ps[j].qe == qe {
			j++
		}
		dead := false
		qe.mu.Lock()
		if !qe.deleted {
			qe.stats.ack += uint64(j - i)
			dead = qe.settleRunLocked(queue.OpDiscard, ps[i:j])
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
