package broker

import (
	"errors"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// Replicated queues through a node that has no replica of them. A node
// that is not a member of a quorum queue's data group (a cluster larger
// than the group, or a node removed with delete_member) serves the queue's
// clients all the same, as a RabbitMQ node does: their publishes go to a
// member over the node link (forwardReplLocked), and so do their consumers,
// basic.gets, purges and the counts of queue.declare-ok. The member
// attaches such a consumer to the group under a consumer id of its own
// process, so the group returns what the consumer held if the member dies,
// and feeds it over the link; what it delivered and has not had settled is
// held per link (linkServer.replHeld) and returned to the group when the
// link ends, as a closed channel's deliveries are.

// viaGet is a basic.get of replicated queue qe a member answered: the
// member holds message seq for this node's client until it is settled.
type viaGet struct {
	qe  *queueEntity
	seq uint64
}

// memberPeer returns the link to node, the member of a group this node is
// not a member of, or nil when there is none.
func (b *Broker) memberPeer(node string) *linkPeer {
	if node == "" || b.cfg.Link == nil {
		return nil
	}
	p := b.peer(node)
	if p == nil || !p.up() {
		return nil
	}
	return p
}

// memberError is a member's refusal, or groupDown when the member could not
// be reached.
func (r linkReply) memberError(qe *queueEntity, cls, mth uint16) error {
	return r.refusal(qe, cls, mth, groupDown)
}

// seqRuns gathers message ids by who they go to (a link, a holder), in the
// order each first comes.
type seqRuns[K comparable] struct {
	keys []K
	seqs [][]uint64
}

func (r *seqRuns[K]) add(k K, seq uint64) {
	i := 0
	for i < len(r.keys) && r.keys[i] != k {
		i++
	}
	if i == len(r.keys) {
		r.keys, r.seqs = append(r.keys, k), append(r.seqs, nil)
	}
	r.seqs[i] = append(r.seqs[i], seq)
}

// consumeReplVia is basic.consume of replicated queue qe on a node that is
// not a member of its group: member node attaches it and feeds it over
// the link.
func (ch *channel) consumeReplVia(qe *queueEntity, node string, m *amqp.BasicConsume, tag string, prio int) error {
	p := ch.c.b.memberPeer(node)
	if p == nil {
		return groupDown(qe, amqp.ClassBasic, 20)
	}
	return ch.consumeVia(p, qe, m, tag, prio).memberError(qe, amqp.ClassBasic, 20)
}

// getReplVia is basic.get of replicated queue qe through member node.
func (ch *channel) getReplVia(qe *queueEntity, node string, m *amqp.BasicGet) error {
	p := ch.c.b.memberPeer(node)
	if p == nil {
		return groupDown(qe, amqp.ClassBasic, 70)
	}
	return ch.getOver(p, qe, m, groupDown, func(seq uint64) {
		ch.mu.Lock()
		if ch.viaGets == nil {
			ch.viaGets = make(map[viaGet]*linkPeer)
		}
		ch.viaGets[viaGet{qe, seq}] = p
		ch.mu.Unlock()
	})
}

// statusReplVia returns replicated queue qe's ready messages and consumers
// as member node counts them.
func (b *Broker) statusReplVia(qe *queueEntity, node string, cls, mth uint16) (msgs, conss int, err error) {
	p := b.memberPeer(node)
	if p == nil {
		return 0, 0, groupDown(qe, cls, mth)
	}
	r := p.queueCall(lkStatus, qe, nil)
	if err := r.memberError(qe, cls, mth); err != nil {
		return 0, 0, err
	}
	return int(r.a), int(r.b), nil
}

// purgeReplVia is queue.purge of replicated queue qe through member node.
func (ch *channel) purgeReplVia(qe *queueEntity, node string, m *amqp.QueuePurge) error {
	p := ch.c.b.memberPeer(node)
	if p == nil {
		return groupDown(qe, amqp.ClassQueue, 30)
	}
	r := p.queueCall(lkPurge, qe, nil)
	if err := r.memberError(qe, amqp.ClassQueue, 30); err != nil {
		return err
	}
	if !m.NoWait {
		ch.c.send(ch.id, &amqp.QueuePurgeOk{MessageCount: uint32(r.a)})
	}
	return nil
}

// linkOp is the node link's settlement op of a queue op.
func linkOp(op queue.Op) byte {
	switch op {
	case queue.OpReturn:
		return linkReturn
	case queue.OpDiscard:
		return linkDiscard
	}
	return linkSettle
}

// replOp is the queue op of a node link settlement op.
func replOp(op byte) queue.Op {
	switch op {
	case linkReturn:
		return queue.OpReturn
	case linkDiscard:
		return queue.OpDiscard
	}
	return queue.OpSettle
}

// settleGetsVia sends op for those of seqs (basic.gets of qe) that a
// member answered to the member, and returns the others.
func (ch *channel) settleGetsVia(op queue.Op, qe *queueEntity, seqs []uint64) []uint64 {
	ch.mu.Lock()
	if len(ch.viaGets) == 0 {
		ch.mu.Unlock()
		return seqs
	}
	var via seqRuns[*linkPeer]
	rest := seqs[:0]
	for _, seq := range seqs {
		k := viaGet{qe, seq}
		if p := ch.viaGets[k]; p != nil {
			delete(ch.viaGets, k)
			via.add(p, seq)
		} else {
			rest = append(rest, seq)
		}
	}
	ch.mu.Unlock()
	for i, p := range via.keys {
		p.sendSettle(linkOp(op), qe, via.seqs[i])
	}
	return rest
}

// deliverRepl writes a delivery of a replicated queue to cons: a consumer
// of this node's client, or one a peer's client has through this node
// (link set).
func (cons *consumer) deliverRepl(e *queue.Entry) {
	if cons.link != nil {
		cons.link.deliverRepl(cons, e)
		return
	}
	cons.ch.deliverRepl(cons, e)
}

// The member's side.

// consumeRepl attaches a peer's consumer to replicated queue qe, whose
// group this node is a member of. As for a consumer of this node's own
// client, the consumer is confirmed before the group attaches it (its
// deliveries may come with the attach); one the group refuses is
// cancelled.
func (s *linkServer) consumeRepl(qe *queueEntity, h uint64, tag string, noAck, exclusive bool, prefetch, prio int) {
	b := s.b
	if _, away := b.replAway(qe.repl.group); away {
		s.replyError(h, awayRefusal(qe, amqp.ClassBasic, 20))
		return
	}
	p := b.proposer(qe.repl.group)
	if p == nil {
		s.replyError(h, groupDown(qe, amqp.ClassBasic, 20))
		return
	}
	cons := &consumer{
		consumerArgs: consumerArgs{ID: b.replConsumerID(), Tag: tag, NoAck: noAck, Exclusive: exclusive,
			Prefetch: prefetch, Priority: prio},
		qe: qe, link: s, remote: h,
	}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.consumers[h] = cons
	s.mu.Unlock()
	b.registerReplConsumer(cons)
	s.reply(h, 0, "", 0, 0)
	b.attachRepl(p, cons)
}

// replyError replies to request id with err's code and text.
func (s *linkServer) replyError(id uint64, err error) {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		s.reply(id, ae.Code, ae.Text, 0, 0)
		return
	}
	s.reply(id, amqp.InternalError, err.Error(), 0, 0)
}

// holdRepl records that the link's peer holds delivery seq of qe, held in
// the group by holder; false when the link has ended.
func (s *linkServer) holdRepl(qe *queueEntity, seq uint64, holder queue.ConsumerID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	m := s.replHeld[qe]
	if m == nil {
		if s.replHeld == nil {
			s.replHeld = make(map[*queueEntity]map[uint64]queue.ConsumerID)
		}
		m = make(map[uint64]queue.ConsumerID)
		s.replHeld[qe] = m
	}
	m[seq] = holder
	return true
}

// unholdRepl forgets that the peer holds delivery seq of qe.
func (s *linkServer) unholdRepl(qe *queueEntity, seq uint64) {
	s.mu.Lock()
	if m := s.replHeld[qe]; m != nil {
		delete(m, seq)
		if len(m) == 0 {
			delete(s.replHeld, qe)
		}
	}
	s.mu.Unlock()
}

// deliverRepl sends a delivery the group made to cons, a peer's consumer;
// one the link cannot take goes back to the group. It runs on the group's
// apply goroutine (observe), or its bodies runner.
func (s *linkServer) deliverRepl(cons *consumer, e *queue.Entry) {
	qe := cons.qe
	if !cons.NoAck && !s.holdRepl(qe, e.Seq, cons.ID) {
		s.b.settleReplSeqs(qe, queue.OpReturn, []uint64{e.Seq}, cons.ID)
		return
	}
	msg := qe.deliveryMessage(e, false)
	start, ok := s.w.begin(lkDeliver)
	if !ok {
		if !cons.NoAck {
			s.unholdRepl(qe, e.Seq)
			s.b.settleReplSeqs(qe, queue.OpReturn, []uint64{e.Seq}, cons.ID)
		}
		return
	}
	s.w.buf = appendU(s.w.buf, cons.remote)
	s.w.buf = appendU(s.w.buf, e.Seq)
	s.w.buf = appendFlag(s.w.buf, e.Redelivered)
	s.w.buf = appendLinkMessage(s.w.buf, msg)
	s.w.end(start)
}

// settleRepl applies the peer's settlement op to its deliveries seqs of
// replicated queue qe; seqs the link does not hold are passed over.
func (s *linkServer) settleRepl(qe *queueEntity, op byte, seqs []uint64) {
	var held seqRuns[queue.ConsumerID]
	s.mu.Lock()
	m := s.replHeld[qe]
	for _, seq := range seqs {
		if h, ok := m[seq]; ok {
			delete(m, seq)
			held.add(h, seq)
		}
	}
	if m != nil && len(m) == 0 {
		delete(s.replHeld, qe)
	}
	s.mu.Unlock()
	for i, h := range held.keys {
		s.b.settleReplSeqs(qe, replOp(op), held.seqs[i], h)
	}
}

// returnReplHeld returns to their groups the deliveries of replicated
// queues the link held when it ended (end).
func (s *linkServer) returnReplHeld(held map[*queueEntity]map[uint64]queue.ConsumerID) {
	for qe, m := range held {
		var by seqRuns[queue.ConsumerID]
		for seq, h := range m {
			by.add(h, seq)
		}
		for i, h := range by.keys {
			s.b.settleReplSeqs(qe, queue.OpReturn, by.seqs[i], h)
		}
	}
}

// getRepl is basic.get of replicated queue qe for a peer's client. It
// waits for the group, so it runs on a goroutine of its own, not the
// link's reader.
func (s *linkServer) getRepl(qe *queueEntity, id uint64, noAck bool) {
	b := s.b
	if _, away := b.replAway(qe.repl.group); away {
		s.replyError(id, awayRefusal(qe, amqp.ClassBasic, 70))
		return
	}
	holder := b.replGetterID()
	c := queue.Cmd{Op: queue.OpGet, Now: nowMs(), NoAck: noAck, Consumer: holder}
	res, err := b.replCall(qe, qe.queueCmd(&c), amqp.ClassBasic, 70)
	if err != nil {
		s.replyError(id, err)
		return
	}
	var e *queue.Entry
	for i := range res.Effects {
		if f := &res.Effects[i]; f.Kind == queue.EffDeliver && f.Consumer == 0 {
			e = &f.Entry
		}
	}
	if e == nil {
		s.reply(id, 0, "", 0, 0)
		return
	}
	if e.Msg == nil && res.body != nil {
		e.Msg = <-res.body // paged out: read by the group's body runner
	}
	if e.Msg == nil || (!noAck && !s.holdRepl(qe, e.Seq, holder)) {
		if !noAck {
			b.settleReplSeqs(qe, queue.OpReturn, []uint64{e.Seq}, holder)
		}
		if e.Msg == nil {
			s.reply(id, amqp.InternalError, "quorum queue '"+qe.name+"': a message could not be read", 0, 0)
		}
		return
	}
	ready, _ := b.replCounts(qe)
	msg := qe.deliveryMessage(e, true)
	s.frame(lkReply, func(buf []byte) []byte {
		buf = appendU(buf, id)
		buf = appendU(buf, 0)
		buf = appendS(buf, "")
		buf = appendU(buf, uint64(ready))
		buf = appendU(buf, 0)
		buf = appendU(buf, e.Seq)
		buf = appendFlag(buf, e.Redelivered)
		return appendLinkMessage(buf, msg)
	})
}

// purgeRepl is queue.purge of replicated queue qe for a peer's client (on
// a goroutine of its own, as getRepl).
func (s *linkServer) purgeRepl(qe *queueEntity, id uint64) {
	c := queue.Cmd{Op: queue.OpPurge, Now: nowMs()}
	res, err := s.b.replCall(qe, qe.queueCmd(&c), amqp.ClassQueue, 30)
	if err != nil {
		s.replyError(id, err)
		return
	}
	s.reply(id, 0, "", uint64(len(res.Effects)), 0)
}
