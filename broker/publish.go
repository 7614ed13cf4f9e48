package broker

import (
	"encoding/binary"
	"errors"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

type publishStage uint8

const (
	stageIdle publishStage = iota
	stageHeader
	stageBody
)

// publishing is a basic.publish whose content is being read.
type publishing struct {
	stage      publishStage
	exchange   string
	routingKey string
	mandatory  bool
	// ex is the exchange, looked up (and the publish permitted) at
	// basic.publish, before any content is read.
	ex *exchangeEntity
	// hdr holds the content header payload until the first body frame
	// (a scratch buffer the channel keeps from one publish to the next).
	hdr []byte
	// buf holds the content header payload (hlen bytes) followed by the
	// body read so far; the message's header and body are slices of it.
	// It is allocated at the first body frame and grows with what
	// arrives, up to hlen+size: what the header claims costs nothing
	// until it comes. A body that comes in one frame costs one allocation.
	buf  []byte
	hlen int
	// size is the body size the content header gives.
	size int
}

// maxHeaderScratch is the largest content header scratch buffer a channel
// keeps for its next publish.
const maxHeaderScratch = 16 << 10

// txPublish is a publish held until tx.commit.
type txPublish struct {
	exchange  string
	mandatory bool
	msg       *queue.Message
}

// txAck is an ack, nack or reject held until tx.commit. The deliveries
// it names left the channel's unacked list when it arrived, as in RabbitMQ
// (a second ack of one is an unknown tag); tx.rollback puts them back.
type txAck struct {
	ps           []pending
	ack, requeue bool
}

func (ch *channel) startPublish(m *amqp.BasicPublish) error {
	if m.Immediate {
		return amqp.Errorf(amqp.NotImplemented, amqp.ClassBasic, 40, "immediate=true")
	}
	// What the method names is checked before the content is read: a
	// refused publish costs nothing whatever size its header claims
	// (its content is dropped with the closing channel's frames).
	if err := ch.accessPublish(m.Exchange); err != nil {
		return err
	}
	v := ch.c.vhost
	v.mu.RLock()
	ex := v.exchanges[m.Exchange]
	v.mu.RUnlock()
	if ex == nil && ch.c.b.syncDefinitions() {
		ex = v.exchange(m.Exchange)
	}
	if ex == nil {
		return notFoundExchange(m.Exchange, v.name, amqp.ClassBasic, 40)
	}
	if ex.internal {
		return amqp.Errorf(amqp.AccessRefused, amqp.ClassBasic, 40,
			"cannot publish to internal exchange '%s' in vhost '%s'", m.Exchange, v.name)
	}
	if err := ch.accessPublishTopic(ex, m.RoutingKey); err != nil {
		return err
	}
	ch.pub = publishing{stage: stageHeader, exchange: m.Exchange, routingKey: m.RoutingKey, mandatory: m.Mandatory, ex: ex, hdr: ch.pub.hdr}
	return nil
}

// handleContent takes a content header or body frame. A channel exception
// (an unknown or internal exchange, say) closes the channel here; only
// connection exceptions are returned.
func (ch *channel) handleContent(f amqp.Frame) error {
	err := ch.content(f)
	if err == nil {
		return nil
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && !ae.Hard() {
		ch.softClose(ae)
		return nil
	}
	return err
}

// unexpectedFrame is the connection error for a frame the channel did
// not expect at its stage of a publish, in RabbitMQ's words
// (rabbit_command_assembler).
func (p *publishing) unexpectedFrame(cls, mth uint16) error {
	switch p.stage {
	case stageHeader:
		return amqp.Errorf(amqp.UnexpectedFrame, cls, mth, "expected content header for class 60, got non content header frame instead")
	case stageBody:
		return amqp.Errorf(amqp.UnexpectedFrame, cls, mth, "expected content body, got non content body frame instead")
	}
	return amqp.Errorf(amqp.UnexpectedFrame, cls, mth, "expected method frame, got non method frame instead")
}

func (ch *channel) content(f amqp.Frame) error {
	if ch.closing.Load() {
		return nil
	}
	p := &ch.pub
	switch f.Type {
	case amqp.FrameHeader:
		if p.stage != stageHeader {
			return p.unexpectedFrame(0, 0)
		}
		classID, size, err := amqp.ParseContentHeaderPrefix(f.Payload)
		if err != nil {
			return err
		}
		if classID != amqp.ClassBasic {
			return amqp.Errorf(amqp.UnexpectedFrame, 0, 0, "expected content header for class 60, got one for class %d instead", classID)
		}
		if size > ch.c.b.cfg.MaxMessageSize {
			ch.softClose(amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 40,
				"message size %d is larger than configured max size %d", size, ch.c.b.cfg.MaxMessageSize))
			return nil
		}
		p.hlen, p.size = len(f.Payload), int(size)
		if size == 0 {
			p.buf = append(make([]byte, 0, p.hlen), f.Payload...)
			return ch.finishPublish()
		}
		p.hdr = append(p.hdr[:0], f.Payload...)
		p.stage = stageBody
		return nil
	default: // amqp.FrameBody
		if p.stage != stageBody {
			return p.unexpectedFrame(0, 0)
		}
		end := p.hlen + p.size
		if p.buf == nil {
			// The first body frame: room for the whole body when it
			// brings all of it, else for twice what it brings.
			n := min(p.size, 2*len(f.Payload))
			if len(f.Payload) >= p.size {
				n = p.size
			}
			p.buf = append(make([]byte, 0, p.hlen+n), p.hdr...)
		}
		need := len(p.buf) + len(f.Payload)
		if need > end {
			return amqp.Errorf(amqp.UnexpectedFrame, 0, 0, "content body exceeds the size given in the content header")
		}
		if need > cap(p.buf) {
			// Grow with what arrives: a client that claims a large body
			// and sends little of it costs little.
			buf := make([]byte, len(p.buf), min(end, max(need, 2*cap(p.buf))))
			copy(buf, p.buf)
			p.buf = buf
		}
		p.buf = append(p.buf, f.Payload...)
		if len(p.buf) == end {
			return ch.finishPublish()
		}
		return nil
	}
}

// finishPublish routes a complete message.
func (ch *channel) finishPublish() error {
	p := ch.pub
	ch.pub = publishing{}
	if cap(p.hdr) <= maxHeaderScratch {
		ch.pub.hdr = p.hdr[:0]
	}
	// Flow control holds a connection after a complete publish
	// (conn.throttle).
	ch.c.published = true
	hdr := p.buf[:p.hlen:p.hlen]
	mode, prio := peekModePriority(hdr)
	msg := &queue.Message{
		Exchange:   p.exchange,
		RoutingKey: p.routingKey,
		Header:     hdr,
		Body:       p.buf[p.hlen:],
		Persistent: mode == 2,
		Priority:   prio,
	}
	// The exchange was checked at basic.publish; route treats one
	// deleted since as routing nowhere.
	ex := p.ex
	if err := ch.checkUserID(hdr); err != nil {
		return err
	}
	if err := checkExpiration(hdr); err != nil {
		return err
	}
	if err := checkSenderSelected(hdr); err != nil {
		return err
	}
	header, err := ch.rewriteReplyTo(hdr)
	if err != nil {
		return err
	}
	msg.Header = header
	if ch.tx {
		return ch.txPublish(p.exchange, p.mandatory, msg)
	}
	if !ch.confirm {
		ch.routeBatched(ex, p.mandatory, msg, 0)
		return nil
	}
	ch.confirmSeq++
	seq := ch.confirmSeq
	// Hold the confirm until routing is done: journal writes may complete
	// before route returns. A batched publish is confirmed by its
	// batch's flush (batch.go).
	ch.confirms.add(seq, 1)
	if !ch.routeBatched(ex, p.mandatory, msg, seq) {
		ch.confirms.done(seq, nil)
	}
	if !ch.confirmDirty {
		ch.confirmDirty = true
		ch.c.confirmDirty = append(ch.c.confirmDirty, ch)
	}
	return nil
}

// route delivers msg through ex to its queues and returns it to the
// publisher when mandatory and unroutable. It reports whether any queue
// took it. A non-zero confirmSeq makes the publish's confirm wait for
// every journal write the message needs.
func (ch *channel) route(ex *exchangeEntity, mandatory bool, msg *queue.Message, confirmSeq uint64) bool {
	xc := ch.stats.exchange(ex)
	xc.in.Add(1)
	if ex.plug != nil {
		if handled, routed := ch.plugPublish(ex, mandatory, msg, confirmSeq); handled {
			return routed
		}
	}
	if ex.name == "" && isReplyName(msg.RoutingKey) {
		return ch.routeReply(mandatory, msg)
	}
	targets, msg, ok := ch.resolve(ex, msg)
	if !ok {
		ch.returnUnroutable(mandatory, msg)
		return false
	}
	routed, throttle := ch.deliverTo(targets, msg, confirmSeq)
	clear(targets)
	ch.targets = targets[:0]
	if throttle != nil {
		ch.c.holdPublisher(throttle)
	}
	if !routed {
		ch.returnUnroutable(mandatory, msg)
	} else {
		xc.out.Add(1)
	}
	return routed
}

// resolve finds the queues msg goes to through ex, in ch.targets. It
// reports false when ex was deleted since the publish looked it up: the
// message then routes nowhere, as RabbitMQ would. The message returned may
// be a copy with the sender-selected headers (CC, BCC) taken out.
func (ch *channel) resolve(ex *exchangeEntity, msg *queue.Message) ([]*queueEntity, *queue.Message, bool) {
	v := ch.c.vhost
	v.mu.RLock()
	if ex.gone {
		v.mu.RUnlock()
		return nil, msg, false
	}
	hdrs := func() amqp.Table { return headersOf(msg.Header) }
	ch.routing.header = msg.Header
	targets := v.routeLocked(ex, msg.RoutingKey, hdrs, ch.targets[:0], &ch.routing)
	if extra, header := senderSelected(msg.Header); extra != nil {
		for _, k := range extra {
			targets = v.routeLocked(ex, k, hdrs, targets, &ch.routing)
		}
		if len(header) != len(msg.Header) {
			msg = withHeader(msg, header)
		}
	}
	v.mu.RUnlock()
	ch.routing.header = nil
	return targets, msg, true
}

// deliverTo puts msg on each of targets, one queue lock at a time. It
// reports whether any queue took it, and the backlog a publisher should
// wait on (flow control), if any.
func (ch *channel) deliverTo(targets []*queueEntity, msg *queue.Message, confirmSeq uint64) (routed bool, throttle chan struct{}) {
	// Queues with TTLs, limits or a dead-letter exchange take the clock
	// (read once per publish) and may leave dead letters (expiry.go).
	ttl, now := messageTTL(msg.Header), int64(0)
	var dead []*queueEntity
	for _, qe := range targets {
		if qe.home != nil {
			qe.home.peer.awaitFirst()
		}
		qe.mu.Lock()
		if qe.repl != nil {
			// A replicated quorum queue: routed if its group may take it.
			routed = !qe.deleted && ch.publishReplLocked(qe, msg, confirmSeq, &throttle) || routed
		} else if qe.home != nil {
			// A remote queue: routed if its home node takes it (link.go).
			routed = !qe.deleted && ch.forwardLocked(qe, msg, confirmSeq, &throttle) || routed
		} else if !qe.deleted {
			routed = true
			if ch.enqueueLocked(qe, msg, ttl, &now, confirmSeq, true, &throttle) {
				dead = append(dead, qe)
			}
		}
		qe.mu.Unlock()
	}
	for _, qe := range dead {
		qe.flushDead()
	}
	return routed, throttle
}

// enqueueLocked puts msg on qe, which is not deleted, journaling it when
// qe keeps it, and dispatches to qe's consumers (a plain queue only when
// dispatch is set: a batch dispatches after its last message). It reports
// whether qe has dead letters to flush (qe.flushDead, with no lock held)
// and sets *throttle to the backlog of a queue over the flow-control
// mark. Hold qe.mu.
func (ch *channel) enqueueLocked(qe *queueEntity, msg *queue.Message, ttl int64, now *int64, confirmSeq uint64, dispatch bool, throttle *chan struct{}) (dead bool) {
	if qe.repl != nil {
		ch.publishReplLocked(qe, msg, confirmSeq, throttle)
		return false
	}
	if qe.home != nil {
		ch.forwardLocked(qe, msg, confirmSeq, throttle)
		return false
	}
	if qe.stream != nil {
		if t := ch.publishStreamLocked(qe, msg, confirmSeq); t != nil && *throttle == nil {
			*throttle = t
		}
		return false
	}
	if qe.dedup != nil {
		return ch.enqueueDedupLocked(qe, msg, ttl, now, confirmSeq, dispatch, throttle)
	}
	return ch.enqueueClassicLocked(qe, msg, ttl, now, confirmSeq, dispatch, throttle)
}

// enqueueClassicLocked is enqueueLocked's path into a classic queue.
// Hold qe.mu.
func (ch *channel) enqueueClassicLocked(qe *queueEntity, msg *queue.Message, ttl int64, now *int64, confirmSeq uint64, dispatch bool, throttle *chan struct{}) (dead bool) {
	if ttl >= 0 || qe.at {
		return ch.publishAtLocked(qe, msg, ttl, now, confirmSeq)
	}
	seq := qe.q.Publish(msg)
	qe.stats.publish++
	var journaled bool
	if confirmSeq != 0 && qe.journaled(msg) {
		ch.confirms.hold(confirmSeq)
		journaled = ch.c.b.journal(qe, seq, msg, 0, func(err error) { ch.journaled(confirmSeq, err) })
	} else {
		journaled = ch.c.b.journal(qe, seq, msg, 0, nil)
	}
	qe.pageOutLocked(seq, msg, journaled)
	if dispatch && qe.q.ConsumerCount() > 0 {
		// With no consumer there is nothing to dispatch, and no head to
		// page in for one (fanouts to thousands of queues: each call
		// costs cache misses).
		qe.dispatchLocked()
		if *throttle == nil && qe.q.Ready() > flowHigh {
			*throttle = qe.drainedLocked()
		}
	}
	return false
}

func (ch *channel) returnUnroutable(mandatory bool, msg *queue.Message) {
	if !mandatory {
		ch.stats.dropUnroutable.Add(1)
		return
	}
	ch.stats.returnUnroutable.Add(1)
	o := ch.c.out
	o.lock()
	was := len(o.buf) + len(o.segs)
	start := len(o.buf)
	o.buf = amqp.AppendMethodFrame(o.buf, ch.id, &amqp.BasicReturn{
		ReplyCode:  amqp.NoRoute,
		ReplyText:  "NO_ROUTE",
		Exchange:   msg.Exchange,
		RoutingKey: msg.RoutingKey,
	})
	added := ch.appendContentLocked(msg)
	o.unlock(len(o.buf) - start + added)
	if was == 0 {
		o.wake()
	}
}

// flushConfirms sends the confirms that are due, at the end of a read
// batch. Reader goroutine.
func (ch *channel) flushConfirms() {
	ch.confirmDirty = false
	ch.confirms.flush(ch.c, ch.id)
}

// journaled is the journal's completion of one write for publish seq. It
// runs on the store's writer goroutine: the confirm is sent by the
// connection's writer.
func (ch *channel) journaled(seq uint64, err error) {
	ch.confirms.done(seq, err)
	ch.c.confirmReady(ch)
}

// txPublish holds a publish until tx.commit, within the transaction
// limits of the configuration (Config.TxMaxMessages, TxMaxBytes): a
// transaction may not hold the broker's memory without bound. Over them,
// the channel is closed (and the transaction dropped) with 406, the code
// RabbitMQ closes a channel with for a limit a client breaks.
func (ch *channel) txPublish(exchange string, mandatory bool, msg *queue.Message) error {
	cfg := &ch.c.b.cfg
	size := int64(len(msg.Header) + len(msg.Body))
	if len(ch.txPubs) >= cfg.TxMaxMessages || ch.txBytes+size > cfg.TxMaxBytes {
		return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 40,
			"transaction holds too much: %d uncommitted messages of %d bytes, this one of %d bytes is over the limit of %d messages or %d bytes; commit or roll back first",
			len(ch.txPubs), ch.txBytes, size, cfg.TxMaxMessages, cfg.TxMaxBytes)
	}
	ch.txPubs = append(ch.txPubs, txPublish{exchange: exchange, mandatory: mandatory, msg: msg})
	ch.txBytes += size
	return nil
}

func (ch *channel) txCommit() error {
	if !ch.tx {
		return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassTx, 20, "channel is not transactional")
	}
	pubs, acks := ch.txPubs, ch.txAcks
	ch.txPubs, ch.txAcks, ch.txBytes = nil, nil, 0
	v := ch.c.vhost
	for _, p := range pubs {
		v.mu.RLock()
		ex := v.exchanges[p.exchange]
		v.mu.RUnlock()
		if ex == nil {
			ch.returnUnroutable(p.mandatory, p.msg)
			continue
		}
		ch.route(ex, p.mandatory, p.msg, 0)
	}
	if st := ch.c.b.cfg.Store; st != nil && len(pubs) > 0 {
		// tx.commit-ok promises the persistent messages are on disk.
		if err := st.Flush(); err != nil {
			return amqp.Errorf(amqp.InternalError, amqp.ClassTx, 20, "writing messages: %v", err)
		}
	}
	if err := ch.waitTxStreams(); err != nil {
		return amqp.Errorf(amqp.InternalError, amqp.ClassTx, 20, "writing stream messages: %v", err)
	}
	for _, a := range acks {
		if a.ack {
			ch.settle(a.ps)
		} else if !a.requeue {
			ch.discard(a.ps)
		} else {
			ch.requeue(a.ps)
		}
	}
	ch.c.send(ch.id, &amqp.TxCommitOk{})
	return nil
}

func (ch *channel) txRollback() error {
	if !ch.tx {
		return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassTx, 30, "channel is not transactional")
	}
	for _, a := range ch.txAcks {
		ch.restoreUnacked(a.ps)
	}
	ch.txPubs, ch.txAcks, ch.txBytes = nil, nil, 0
	ch.c.send(ch.id, &amqp.TxRollbackOk{})
	return nil
}

// checkUserID enforces RabbitMQ's rule for the user-id property: when set,
// it must name the authenticated user, unless that user has the
// impersonator tag. The header is decoded only when the property is there.
func (ch *channel) checkUserID(header []byte) error {
	if len(header) < 14 || binary.BigEndian.Uint16(header[12:])&amqp.FlagUserID == 0 {
		return nil
	}
	var h amqp.ContentHeader
	if err := ch.c.dec.DecodeContentHeader(header, &h); err != nil {
		return err
	}
	u := ch.c.user
	if h.Properties.UserID == u.name || ch.c.b.userHasTag(u, "impersonator") {
		return nil
	}
	return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 40,
		"user_id property set to '%s' but authenticated user was '%s'", h.Properties.UserID, u.name)
}

// peekModePriority reads delivery-mode and priority from a content header
// payload without decoding the rest.
func peekModePriority(header []byte) (mode, priority uint8) {
	mode, priority, _, err := amqp.PeekDeliveryModePriorityExpiration(header)
	if err != nil {
		return 0, 0
	}
	return mode, priority
}

// headersOf decodes the headers table of a content header payload.
func headersOf(header []byte) amqp.Table {
	var h amqp.ContentHeader
	if err := amqp.DecodeContentHeader(header, &h); err != nil {
		return nil
	}
	return h.Properties.Headers
}
