package broker

import (
	"errors"
	"io"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// The home node's side of the node link: ServeLink serves the requests a
// peer's broker sends for queues homed here, on behalf of that peer's
// clients. A peer's consumer is a consumer of the queue like any other,
// whose deliveries go over the link (its gate is the link's bound); what
// the link delivers and has not had settled is held here per queue, and
// returned to its queue when the link ends, as a closed channel's
// deliveries are.

// linkServer is one served link stream.
type linkServer struct {
	b    *Broker
	peer string
	log  *zap.Logger
	w    *linkWriter
	conn net.Conn

	// mu guards the fields below; it is taken under queue locks (a
	// leaf).
	mu        sync.Mutex
	ended     bool
	consumers map[uint64]*consumer // by the peer's handle
	held      map[*queueEntity]map[uint64]struct{}
	// replHeld are the deliveries of replicated queues the peer holds,
	// with the consumer id the group holds each for (quorumlink.go).
	replHeld map[*queueEntity]map[uint64]queue.ConsumerID
	// replPub and replSeq are the publisher id and last sequence of the
	// peer's publishes to replicated queues (publishRepl; read loop
	// only).
	replPub, replSeq uint64
}

// ServeLink serves a node link stream opened by the broker of node peer
// (Link.Dial on that node) until the stream ends or the broker closes; it
// owns conn. Everything the link had delivered and not settled goes back
// to its queues, and its consumers are detached.
func (b *Broker) ServeLink(peer string, conn net.Conn) {
	s := &linkServer{b: b, peer: peer, log: b.log.With(zap.String("peer", peer)), w: newLinkWriter(conn), conn: conn,
		consumers: make(map[uint64]*consumer), held: make(map[*queueEntity]map[uint64]struct{})}
	l := &b.links
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		conn.Close()
		return
	}
	if l.served == nil {
		l.served = make(map[*linkServer]struct{})
	}
	l.served[s] = struct{}{}
	l.mu.Unlock()
	go s.w.run()
	err := s.read()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		s.log.Debug("node link from peer ended", zap.Error(err))
	}
	s.w.close()
	conn.Close()
	<-s.w.done
	s.end()
	l.mu.Lock()
	delete(l.served, s)
	l.mu.Unlock()
}

// closeServedLinks closes the links peers opened (Broker.Close).
func (b *Broker) closeServedLinks() {
	l := &b.links
	l.mu.Lock()
	var conns []net.Conn
	for s := range l.served {
		conns = append(conns, s.conn)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// end detaches the link's consumers and returns what it held.
func (s *linkServer) end() {
	s.mu.Lock()
	s.ended = true
	conss, held, replHeld := s.consumers, s.held, s.replHeld
	s.consumers, s.held, s.replHeld = nil, nil, nil
	s.mu.Unlock()
	for _, cons := range conss {
		cons.qe.removeConsumer(cons)
	}
	s.returnReplHeld(replHeld)
	for qe, m := range held {
		seqs := slices.Sorted(maps.Keys(m))
		qe.mu.Lock()
		dead := s.settleLocked(qe, linkReturn, seqs)
		qe.mu.Unlock()
		if dead {
			qe.flushDead()
		}
	}
}

// find reads a queue reference and returns the local queue it names, or
// nil (gone, or not homed here).
func (s *linkServer) find(d *linkDecoder) (*queueEntity, string, string) {
	qid, vname, name := d.u(), d.s(), d.s()
	v := s.b.vhost(vname)
	if v == nil {
		return nil, vname, name
	}
	v.mu.RLock()
	qe := v.queues[name]
	v.mu.RUnlock()
	if qe == nil || qe.id != qid || qe.home != nil {
		return nil, vname, name
	}
	return qe, vname, name
}

func (s *linkServer) read() error {
	r := newLinkReader(s.conn, s.b.cfg.MaxMessageSize)
	var seqs []uint64
	for {
		t, payload, err := r.next()
		if err != nil {
			return err
		}
		d := linkDecoder{b: payload}
		switch t {
		case lkPublish:
			id := d.u()
			qe, vname, name := s.find(&d)
			msg := decodeLinkMessage(&d)
			if d.err != nil {
				return d.err
			}
			if qe == nil {
				if id != 0 {
					s.replyNoQueue(id, vname, name)
				}
				continue
			}
			if hold := s.publish(qe, msg, id); hold != nil {
				// Flow control: a deep queue stops the link's reading
				// for a while, which holds the peer's publishers.
				t := time.NewTimer(flowWait)
				select {
				case <-hold:
				case <-t.C:
				}
				t.Stop()
			}
		case lkConsume:
			id := d.u()
			qe, vname, name := s.find(&d)
			tag, flags := d.s(), d.byte1()
			prefetch, prio := int(d.u()), unzigzag(d.u())
			if d.err != nil {
				return d.err
			}
			if qe == nil {
				s.replyNoQueue(id, vname, name)
				continue
			}
			s.consume(qe, id, tag, flags&1 != 0, flags&2 != 0, prefetch, prio)
		case lkCancel:
			h := d.u()
			if d.err != nil {
				return d.err
			}
			s.mu.Lock()
			cons := s.consumers[h]
			delete(s.consumers, h)
			s.mu.Unlock()
			if cons != nil {
				cons.qe.removeConsumer(cons)
			}
			s.frame(lkCancelled, func(b []byte) []byte { return appendU(b, h) })
		case lkSettle:
			op := d.byte1()
			qe, _, _ := s.find(&d)
			n := d.u()
			if d.err != nil || n > uint64(len(d.b)) {
				return errLinkFrame
			}
			seqs = seqs[:0]
			for range n {
				seqs = append(seqs, d.u())
			}
			if d.err != nil {
				return d.err
			}
			if qe != nil {
				s.settleSeqs(qe, op, seqs)
			}
		case lkGet:
			id := d.u()
			qe, vname, name := s.find(&d)
			noAck := d.flag()
			if d.err != nil {
				return d.err
			}
			if qe == nil {
				s.replyNoQueue(id, vname, name)
				continue
			}
			s.get(qe, id, noAck)
		case lkStatus, lkPurge:
			id := d.u()
			qe, vname, name := s.find(&d)
			if d.err != nil {
				return d.err
			}
			if qe == nil {
				s.replyNoQueue(id, vname, name)
				continue
			}
			if qe.repl != nil && qe.stream == nil {
				if t == lkPurge {
					go s.purgeRepl(qe, id)
				} else {
					ready, conss := s.b.replCounts(qe)
					s.reply(id, 0, "", uint64(ready), uint64(conss))
				}
				continue
			}
			var a, b uint64
			qe.mu.Lock()
			if t == lkStatus {
				a, b = uint64(qe.q.Ready()), uint64(qe.q.ConsumerCount())
			} else {
				a = uint64(qe.q.PurgeEach(func(e queue.Entry) { s.b.unjournal(qe, e) }))
			}
			qe.mu.Unlock()
			s.reply(id, 0, "", a, b)
		case lkStreamRead:
			id, group := d.u(), d.u()
			k := GroupQueueKey{VHost: d.s(), Name: d.s(), ID: d.u()}
			from, limit := d.u(), d.u()
			if d.err != nil {
				return d.err
			}
			s.streamRead(id, group, k, from, limit)
		default:
			return errLinkFrame
		}
	}
}

// frame appends one frame built by fill.
func (s *linkServer) frame(t byte, fill func(b []byte) []byte) {
	if start, ok := s.w.begin(t); ok {
		s.w.buf = fill(s.w.buf)
		s.w.end(start)
	}
}

func (s *linkServer) reply(id uint64, code uint16, text string, a, b uint64) {
	s.frame(lkReply, func(buf []byte) []byte {
		buf = appendU(buf, id)
		buf = appendU(buf, uint64(code))
		buf = appendS(buf, text)
		buf = appendU(buf, a)
		return appendU(buf, b)
	})
}

func (s *linkServer) replyNoQueue(id uint64, vname, name string) {
	ae := notFoundQueue(name, vname, 0, 0).(*amqp.Error)
	s.reply(id, ae.Code, ae.Text, 0, 0)
}

// publish enqueues a message a peer routed to qe. A reply (id != 0) is
// the publish's confirm: sent once qe has the message, and for a
// persistent message of a durable queue once it is journaled. It returns a
// channel to wait on when qe is over the flow-control mark.
func (s *linkServer) publish(qe *queueEntity, msg *queue.Message, id uint64) chan struct{} {
	b := s.b
	if qe.repl != nil {
		return s.publishRepl(qe, msg, id)
	}
	var done func(error)
	if id != 0 {
		done = func(err error) {
			code := uint16(0)
			if err != nil {
				code = amqp.InternalError
			}
			s.reply(id, code, "", 0, 0)
		}
	}
	var throttle chan struct{}
	dead, refused := false, false
	ttl := messageTTL(msg.Header)
	qe.mu.Lock()
	switch {
	case qe.deleted || qe.stream != nil:
		refused = true
	case ttl >= 0 || qe.at:
		now := nowMs()
		seq, accepted, kept, d := qe.enqueueAtLocked(msg, ttl, now)
		dead = d
		if !accepted {
			refused = true
			break
		}
		if kept {
			exp := qe.expiryAt(ttl, now)
			var journaled bool
			if done != nil && qe.journaled(msg) {
				journaled = b.journal(qe, seq, msg, exp, done)
				done = nil
			} else {
				journaled = b.journal(qe, seq, msg, exp, nil)
			}
			qe.pageOutLocked(seq, msg, journaled)
		}
		qe.afterPublishLocked(now)
	default:
		seq := qe.q.Publish(msg)
		qe.stats.publish++
		var journaled bool
		if done != nil && qe.journaled(msg) {
			journaled = b.journal(qe, seq, msg, 0, done)
			done = nil
		} else {
			journaled = b.journal(qe, seq, msg, 0, nil)
		}
		qe.pageOutLocked(seq, msg, journaled)
		if qe.q.ConsumerCount() > 0 {
			qe.dispatchLocked()
		}
		if qe.q.Ready() > flowHigh {
			throttle = qe.drainedLocked()
		}
	}
	qe.mu.Unlock()
	if dead {
		qe.flushDead()
	}
	switch {
	case refused && id != 0:
		s.reply(id, amqp.PreconditionFailed, "rejected", 0, 0)
	case done != nil:
		done(nil)
	}
	return throttle
}

// consume attaches a peer's consumer to qe; the reply goes before its
// first delivery.
func (s *linkServer) consume(qe *queueEntity, h uint64, tag string, noAck, exclusive bool, prefetch, prio int) {
	cons := &consumer{
		consumerArgs: consumerArgs{ID: queue.ConsumerID(s.b.consumerIDs.Add(1)), Tag: tag, NoAck: noAck,
			Exclusive: exclusive, Prefetch: prefetch, Priority: prio},
		qe: qe, link: s, remote: h,
	}
	if qe.repl != nil && qe.stream == nil {
		s.consumeRepl(qe, h, tag, noAck, exclusive, prefetch, prio)
		return
	}
	attach := queue.Cmd{Op: queue.OpAttach, Consumer: cons.ID, Tag: tag, NoAck: noAck, Exclusive: exclusive,
		Prefetch: prefetch, Priority: prio}
	if qe.stream != nil {
		s.reply(h, amqp.PreconditionFailed, "stream queue '"+qe.name+"' in vhost '"+qe.vhost.name+
			"' is consumed on its own node ("+s.b.cfg.NodeName+") only", 0, 0)
		return
	}
	qe.mu.Lock()
	if qe.deleted {
		qe.mu.Unlock()
		s.replyNoQueue(h, qe.vhost.name, qe.name)
		return
	}
	if _, err := qe.q.Apply(&attach, nil); err != nil {
		qe.mu.Unlock()
		code, text := uint16(amqp.InternalError), err.Error()
		if errors.Is(err, queue.ErrExclusiveConsumer) {
			code, text = amqp.AccessRefused, "queue '"+qe.name+"' in vhost '"+qe.vhost.name+"' in exclusive use"
		}
		s.reply(h, code, text, 0, 0)
		return
	}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		detach := queue.Cmd{Op: queue.OpDetach, Consumer: cons.ID}
		_, _ = qe.q.Apply(&detach, nil)
		qe.mu.Unlock()
		return
	}
	s.consumers[h] = cons
	s.mu.Unlock()
	qe.addConsumerLocked(cons)
	qe.hadConsumer = true
	qe.touchLocked()
	cons.timeout = qe.fx.set.consumerTimeout
	s.reply(h, 0, "", 0, 0)
	qe.dispatchLocked()
	qe.mu.Unlock()
}

// acquire is a link consumer's gate: no credit while the link is over its
// bound (the writer dispatches again once it drains).
func (s *linkServer) acquire(cons *consumer) bool { return !s.w.over(cons) }

// deliverLocked sends a delivery of qe to cons, a peer's consumer. Hold
// qe.mu.
func (s *linkServer) deliverLocked(cons *consumer, qe *queueEntity, e *queue.Entry) {
	if !cons.NoAck {
		s.mu.Lock()
		if s.ended {
			s.mu.Unlock()
			qe.returnLocked(e.Seq)
			return
		}
		m := s.held[qe]
		if m == nil {
			m = make(map[uint64]struct{})
			s.held[qe] = m
		}
		m[e.Seq] = struct{}{}
		s.mu.Unlock()
	}
	msg := qe.deliveryMessage(e, false)
	if start, ok := s.w.begin(lkDeliver); ok {
		s.w.buf = appendU(s.w.buf, cons.remote)
		s.w.buf = appendU(s.w.buf, e.Seq)
		s.w.buf = appendFlag(s.w.buf, e.Redelivered)
		s.w.buf = appendLinkMessage(s.w.buf, msg)
		s.w.end(start)
	}
}

// cancelled tells the peer its consumer cons was ended here (its queue
// was deleted).
func (s *linkServer) cancelled(cons *consumer) {
	s.mu.Lock()
	_, ok := s.consumers[cons.remote]
	delete(s.consumers, cons.remote)
	s.mu.Unlock()
	if ok {
		s.frame(lkCancelled, func(b []byte) []byte { return appendU(b, cons.remote) })
	}
}

// get is basic.get for a peer's client.
func (s *linkServer) get(qe *queueEntity, id uint64, noAck bool) {
	if qe.repl != nil && qe.stream == nil {
		go s.getRepl(qe, id, noAck)
		return
	}
	qe.mu.Lock()
	if qe.deleted || qe.stream != nil {
		qe.mu.Unlock()
		s.replyNoQueue(id, qe.vhost.name, qe.name)
		return
	}
	e, ok, dead := qe.getPagedLocked(noAck)
	if !ok {
		qe.stats.getEmpty++
		qe.mu.Unlock()
		if dead {
			qe.flushDead()
		}
		s.reply(id, 0, "", 0, 0)
		return
	}
	qe.journalDelivery(noAck, &e)
	qe.stats.countGet(noAck, e.Redelivered)
	if !noAck {
		s.mu.Lock()
		m := s.held[qe]
		if m == nil {
			m = make(map[uint64]struct{})
			s.held[qe] = m
		}
		m[e.Seq] = struct{}{}
		s.mu.Unlock()
	}
	msg := qe.deliveryMessage(&e, true)
	ready := uint64(qe.q.Ready())
	s.frame(lkReply, func(b []byte) []byte {
		b = appendU(b, id)
		b = appendU(b, 0)
		b = appendS(b, "")
		b = appendU(b, ready)
		b = appendU(b, 0)
		b = appendU(b, e.Seq)
		b = appendFlag(b, e.Redelivered)
		return appendLinkMessage(b, msg)
	})
	qe.mu.Unlock()
	if dead {
		qe.flushDead()
	}
}

// settleSeqs settles, returns or discards the link's deliveries seqs of
// qe; seqs the link does not hold are ignored.
func (s *linkServer) settleSeqs(qe *queueEntity, op byte, seqs []uint64) {
	if qe.repl != nil && qe.stream == nil {
		s.settleRepl(qe, op, seqs)
		return
	}
	qe.mu.Lock()
	s.mu.Lock()
	m := s.held[qe]
	mine := seqs[:0]
	for _, seq := range seqs {
		if _, ok := m[seq]; ok {
			delete(m, seq)
			mine = append(mine, seq)
		}
	}
	if m != nil && len(m) == 0 {
		delete(s.held, qe)
	}
	s.mu.Unlock()
	dead := s.settleLocked(qe, op, mine)
	qe.mu.Unlock()
	if dead {
		qe.flushDead()
	}
}

// settleLocked applies op to qe's deliveries seqs, which the link no
// longer holds, and dispatches. It reports whether flushDead has work.
// Hold qe.mu.
func (s *linkServer) settleLocked(qe *queueEntity, op byte, seqs []uint64) bool {
	if qe.deleted || len(seqs) == 0 {
		return false
	}
	dead := false
	for _, seq := range seqs {
		switch op {
		case linkSettle:
			qe.stats.ack++
			qe.settleLocked(seq)
		case linkReturn:
			dead = qe.returnLocked(seq) || dead
		case linkDiscard:
			qe.stats.ack++
			dead = qe.discardLocked(seq) || dead
		}
	}
	qe.dispatchLocked()
	return dead
}
