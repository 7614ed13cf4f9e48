package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// Message TTL and queue expiry. A queue with a TTL, a length limit, a
// dead-letter exchange or a delivery limit (queueEntity.at) is driven
// through the queue's *At variants with the current time; the others keep
// the plain fast paths. Messages expire when they reach the head of the
// queue (as in RabbitMQ's classic queues), when something looks at the
// head, or when the queue's expiry timer fires at the head's expiry with
// nothing else happening. x-expires deletes a queue left unused for that
// long (below: the state machine decides, the broker ticks and deletes).

// errRejectPublish turns a publish confirm into a basic.nack: a queue's
// length limit refused the message (x-overflow reject-publish).
var errRejectPublish = errors.New("broker: rejected by queue length limit")

// checkExpiration is rabbit_channel's check_expiration_header: the
// expiration property, when present, must be a non-negative integer of
// milliseconds no larger than maxExpiry.
func checkExpiration(header []byte) error {
	if !hasExpiration(header) {
		return nil
	}
	_, _, exp, err := amqp.PeekDeliveryModePriorityExpiration(header)
	if err != nil {
		return err
	}
	if _, why := parseExpiration(exp); why != "" {
		return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 40, "invalid expiration '%s': %s", exp, why)
	}
	return nil
}

// hasExpiration reports whether a content header payload has the
// expiration property, from its flag word alone.
func hasExpiration(header []byte) bool {
	return len(header) >= 14 && binary.BigEndian.Uint16(header[12:])&amqp.FlagExpiration != 0
}

// parseExpiration is rabbit_basic:parse_expiration: Erlang's
// string:to_integer, then check_expiry. why is the refusal reason as
// RabbitMQ prints it.
func parseExpiration(s string) (ms int64, why string) {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == i {
		return 0, "no_integer"
	}
	n, err := strconv.ParseInt(s[:j], 10, 64)
	if err != nil {
		return 0, fmt.Sprintf("{value_too_large,%s}", s[:j])
	}
	if j < len(s) {
		return 0, fmt.Sprintf("{leftover_string,%q}", s[j:])
	}
	switch {
	case n < 0:
		return 0, fmt.Sprintf("{value_negative,%d}", n)
	case n > maxExpiry:
		return 0, fmt.Sprintf("{value_too_large,%d}", n)
	}
	return n, ""
}

// messageTTL is a published message's per-message TTL in ms, -1 if it has
// none. The property was validated at publish.
func messageTTL(header []byte) int64 {
	if !hasExpiration(header) {
		return -1
	}
	_, _, exp, err := amqp.PeekDeliveryModePriorityExpiration(header)
	if err != nil {
		return -1
	}
	ms, why := parseExpiration(exp)
	if why != "" {
		return -1
	}
	return ms
}

// nowMs is the clock of TTLs and expiries: unix milliseconds.
func nowMs() int64 { return time.Now().UnixMilli() }

// enqueueAtLocked publishes msg to a queue that needs the *At variants at
// now (unix ms), with its per-message ttl (-1 = none). accepted is false
// when a length limit refused it; kept is false when it was accepted but
// not kept (a TTL of 0 with no consumer ready). Dead letters go to
// queueFeatures.dead; dead reports whether flushDead has work. The caller
// journals a kept message and then calls afterPublishLocked. Hold qe.mu.
func (qe *queueEntity) enqueueAtLocked(msg *queue.Message, ttl, now int64) (seq uint64, accepted, kept, dead bool) {
	if ttl >= 0 {
		qe.at = true
	}
	seq, accepted, dls := qe.q.PublishAt(msg, now, ttl)
	kept = accepted
	for i := range dls {
		if dls[i].Entry.Msg == msg {
			kept = false
		}
	}
	if accepted {
		qe.stats.publish++
	}
	dead = qe.deadLocked(dls, msg)
	return seq, accepted, kept, dead
}

// afterPublishLocked arms the expiry timer for the new head and
// dispatches at now. Hold qe.mu.
func (qe *queueEntity) afterPublishLocked(now int64) {
	qe.armExpiryLocked()
	qe.fx.now = now
	qe.dispatchLocked()
	qe.fx.now = 0
}

// publishAtLocked is route's path into a queue with TTLs, limits or a
// dead-letter exchange: publish at now, journal, dispatch. A refused
// publish turns confirm confirmSeq (0 = none) into a nack. It reports
// whether dead letters await flushDead. Hold qe.mu.
func (ch *channel) publishAtLocked(qe *queueEntity, msg *queue.Message, ttl int64, now *int64, confirmSeq uint64) bool {
	if *now == 0 {
		*now = nowMs()
	}
	seq, accepted, kept, dead := qe.enqueueAtLocked(msg, ttl, *now)
	if !accepted {
		if confirmSeq != 0 {
			ch.confirms.done(confirmSeq, errRejectPublish)
		}
		return dead
	}
	if kept {
		b := ch.c.b
		exp := qe.expiryAt(ttl, *now)
		var journaled bool
		if confirmSeq != 0 && qe.journaled(msg) {
			ch.confirms.hold(confirmSeq)
			journaled = b.journal(qe, seq, msg, exp, func(err error) { ch.journaled(confirmSeq, err) })
		} else {
			journaled = b.journal(qe, seq, msg, exp, nil)
		}
		qe.pageOutLocked(seq, msg, journaled)
	}
	qe.afterPublishLocked(*now)
	return dead
}

// getLocked is basic.get's take, with expiry for queues that need it. It
// counts as a use for x-expires. dead reports whether flushDead has work.
// Hold qe.mu.
func (qe *queueEntity) getLocked(noAck bool) (e queue.Entry, ok, dead bool) {
	qe.touchLocked()
	cmd := queue.Cmd{Op: queue.OpGet, NoAck: noAck}
	if qe.at {
		cmd.Now = nowMs()
	}
	effs, _ := qe.q.Apply(&cmd, qe.effects[:0])
	for i := range effs {
		if f := &effs[i]; f.Kind == queue.EffDeliver {
			e, ok = f.Entry, true
		} else {
			dead = qe.executeLocked(effs[i:i+1]) || dead
		}
	}
	qe.doneEffectsLocked(effs)
	return e, ok, dead
}

// armExpiryLocked (re)arms the expiry timer for the earliest head expiry,
// unless it is already due no later. Hold qe.mu.
func (qe *queueEntity) armExpiryLocked() {
	if qe.deleted {
		return
	}
	next := qe.q.NextExpiry()
	if next == 0 || (qe.fx.expiryAt != 0 && qe.fx.expiryAt <= next) {
		return
	}
	qe.fx.expiryAt = next
	qe.resetExpiryLocked(time.Duration(next-nowMs()) * time.Millisecond)
}

// kickLocked makes the expiry timer fire at once, to route dead letters
// taken out where the caller could not. Hold qe.mu.
func (qe *queueEntity) kickLocked() {
	qe.fx.expiryAt = 1
	qe.resetExpiryLocked(0)
}

func (qe *queueEntity) resetExpiryLocked(d time.Duration) {
	if d < 0 {
		d = 0
	}
	if qe.fx.expiry == nil {
		qe.fx.expiry = time.AfterFunc(d, qe.expireTick)
		return
	}
	qe.fx.expiry.Reset(d)
}

// expireTick is the expiry timer: expire what is due, dead-letter it,
// re-arm. Its tick may also find the queue's x-expires due (expireQueue).
// Timer goroutine, no lock held.
func (qe *queueEntity) expireTick() {
	if qe.vhost.b.isClosed() {
		return
	}
	qe.mu.Lock()
	qe.fx.expiryAt = 0
	if qe.deleted {
		qe.mu.Unlock()
		return
	}
	expired := false
	if qe.at {
		_, expired = qe.tickLocked(nowMs())
		qe.armExpiryLocked()
	}
	qe.mu.Unlock()
	qe.flushDead()
	if expired {
		qe.expireQueue()
	}
}

// tickLocked applies OpTick at now and carries out its effects: messages
// expired at the heads are dead-lettered, and expired reports the queue's
// own expiry (x-expires, queue.EffExpired), which the caller carries out
// with expireQueue once the lock is released. dead reports whether dead
// letters await flushDead. Hold qe.mu.
func (qe *queueEntity) tickLocked(now int64) (dead, expired bool) {
	cmd := queue.Cmd{Op: queue.OpTick, Now: now}
	effs, _ := qe.q.Apply(&cmd, qe.effects[:0])
	for i := range effs {
		if effs[i].Kind == queue.EffExpired {
			expired = true
		}
	}
	dead = qe.executeLocked(effs)
	qe.doneEffectsLocked(effs)
	return dead, expired
}

// x-expires. Whether a queue has gone unused for its x-expires
// (queue.Config.Expires) is the state machine's to decide: a redeclare
// (passive too), a consume, a basic.get and the last consumer leaving are uses (OpTouch,
// OpAttach, OpDetach, OpGet), a tick that finds consumers is one too, and
// the tick at which it has been unused long enough reports EffExpired.
// The broker only issues the ticks — the unused timer fires at
// Queue.ExpiresAt, or after x-expires while the queue has consumers — and
// carries the effect out: the queue is deleted through the definitions
// log (expireQueue), as an AMQP queue.delete is.

// touch records a use of the queue for x-expires: a redeclare (passive
// too), a consume, a basic.get, the last consumer leaving.
func (qe *queueEntity) touch() {
	qe.mu.Lock()
	qe.touchLocked()
	qe.mu.Unlock()
}

// touchLocked applies OpTouch now to a queue with x-expires. Hold qe.mu.
func (qe *queueEntity) touchLocked() {
	if qe.q.Config().Expires > 0 {
		cmd := queue.Cmd{Op: queue.OpTouch, Now: nowMs()}
		_, _ = qe.q.Apply(&cmd, nil) // no effects, never refused
	}
}

// armUnused starts the x-expires timer of a new or recovered queue, or
// re-arms it after a policy change.
func (qe *queueEntity) armUnused() {
	qe.mu.Lock()
	qe.armUnusedLocked()
	qe.mu.Unlock()
}

// armUnusedLocked arms the unused timer for the queue's next tick:
// Queue.ExpiresAt, or x-expires from now while consumers keep the queue in
// use. Hold qe.mu.
func (qe *queueEntity) armUnusedLocked() {
	exp := qe.q.Config().Expires
	if qe.deleted || exp <= 0 {
		if qe.fx.unused != nil {
			qe.fx.unused.Stop()
		}
		return
	}
	d := time.Duration(exp) * time.Millisecond
	if at := qe.q.ExpiresAt(); at != 0 {
		d = time.Duration(at-nowMs()) * time.Millisecond
	}
	if d < 0 {
		d = 0
	}
	if qe.fx.unused == nil {
		qe.fx.unused = time.AfterFunc(d, qe.checkUnused)
		return
	}
	qe.fx.unused.Reset(d)
}

// checkUnused is the x-expires timer: tick the queue, and delete it if the
// tick reports its expiry (or an earlier report whose deletion failed
// still stands), else arm for the next tick. Timer goroutine, no lock
// held.
func (qe *queueEntity) checkUnused() {
	if qe.vhost.b.isClosed() {
		return
	}
	qe.mu.Lock()
	if qe.deleted || qe.q.Config().Expires <= 0 {
		qe.mu.Unlock()
		return
	}
	expired := qe.q.Expired()
	dead := false
	if !expired {
		dead, expired = qe.tickLocked(nowMs())
		if dead {
			qe.armExpiryLocked()
		}
	}
	if !expired {
		qe.armUnusedLocked()
	}
	qe.mu.Unlock()
	if dead {
		qe.flushDead()
	}
	if expired {
		qe.expireQueue()
	}
}

// expireQueue carries out queue.EffExpired: the queue is deleted through
// the definitions log. If its records cannot be deleted it stays, and the
// unused timer tries again in a second (unless a use takes the expiry
// back meanwhile). No lock held.
func (qe *queueEntity) expireQueue() {
	if _, err := qe.vhost.deleteQueue(qe, false, false); err != nil {
		qe.vhost.b.log.Warn("expiring queue: " + err.Error())
		qe.mu.Lock()
		if !qe.deleted {
			if qe.fx.unused == nil {
				qe.fx.unused = time.AfterFunc(time.Second, qe.checkUnused)
			} else {
				qe.fx.unused.Reset(time.Second)
			}
		}
		qe.mu.Unlock()
	}
}

// stopTimersLocked stops a deleted queue's timers. Hold qe.mu.
func (qe *queueEntity) stopTimersLocked() {
	if qe.fx.expiry != nil {
		qe.fx.expiry.Stop()
	}
	if qe.fx.unused != nil {
		qe.fx.unused.Stop()
	}
	qe.fx.dead = nil
}

// isClosed reports whether Close was called.
func (b *Broker) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// recoveredExpiry is the Expires of a message recovered at now (unix ms).
// The store's message record does not keep the expiry, so the TTL
// restarts at recovery: a message may outlive its TTL by the downtime,
// never the other way round.
func (qe *queueEntity) recoveredExpiry(msg *queue.Message, now int64) int64 {
	ttl := qe.fx.set.cfg.MessageTTL
	if t := messageTTL(msg.Header); t >= 0 {
		qe.at = true
		if ttl < 0 || t < ttl {
			ttl = t
		}
	}
	if ttl < 0 {
		return 0
	}
	return now + ttl
}

// expiryAt is when a message published at now with per-message TTL msgTTL
// (-1 = none) expires in qe: the lower of the two TTLs from now, 0 when
// neither applies. Hold qe.mu.
func (qe *queueEntity) expiryAt(msgTTL, now int64) int64 {
	ttl := qe.q.Config().MessageTTL
	if msgTTL >= 0 && (ttl < 0 || msgTTL < ttl) {
		ttl = msgTTL
	}
	if ttl < 0 {
		return 0
	}
	return now + ttl
}
