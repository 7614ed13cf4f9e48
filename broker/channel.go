package broker

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/warrenmq/warren/amqp"
)

// channel is one AMQP channel. The connection's reader runs it; fields
// below mu are also touched by goroutines that deliver to its consumers.
type channel struct {
	id uint16
	c  *conn

	// closing is set after this side sent channel.close: frames are
	// dropped until channel.close-ok.
	closing atomic.Bool

	// content assembly of the publish in progress
	pub publishing
	// access caches publish permission verdicts (access.go).
	access publishAccess

	// prefetch is the per-consumer limit given to new consumers.
	prefetch int
	// globalPrefetch is the channel-wide limit (0 = none); globalUnacked
	// counts consumer deliveries awaiting acknowledgement.
	globalPrefetch atomic.Int32
	// shown is what the management API reports of the reader-owned
	// prefetch, confirm and tx fields: written by the reader, read by
	// snapshots.
	shown struct {
		prefetch atomic.Int32
		confirm  atomic.Bool
		tx       atomic.Bool
	}
	globalUnacked atomic.Int32

	confirm    bool
	confirmSeq uint64 // last publish sequence number
	confirms   confirmTracker
	// replPub and replSeq are the channel's publisher id and last sequence
	// in the enqueues it proposes to data groups (quorumrepl.go; reader
	// goroutine).
	replPub      uint64
	replSeq      uint64
	confirmDirty bool
	// viaGets are the unsettled basic.gets of replicated queues that a
	// member answered for this node, which has no replica (quorumlink.go;
	// guarded by mu).
	viaGets map[viaGet]*linkPeer

	tx     bool
	txPubs []txPublish
	// txBytes is the header and body bytes of txPubs, which
	// Config.TxMaxBytes bounds.
	txBytes int64
	// txStreams is, per stream a committing transaction appended to, the
	// end of what it appended and the epoch of its first append (stream.go;
	// reader goroutine).
	txStreams map[*streamState]txStream
	txAcks    []txAck
	targets   []*queueEntity
	// routing is the reader's scratch for routing (vhost.routeLocked).
	routing routeScratch
	// ackBuf is the reader's buffer of settled deliveries (consume.go).
	ackBuf []pending
	// lastQueue is the queue last declared on the channel, used when a
	// method names the queue "".
	lastQueue string

	// starvedMu (a leaf lock) guards starved: consumers refused a delivery
	// by the channel-wide prefetch, to retry when it lifts.
	starvedMu sync.Mutex
	starved   []*consumer

	// stats are the channel's message counters (stats.go).
	stats chanStats

	// mu guards the fields below; see the lock order in doc.go.
	mu        sync.Mutex
	nextTag   uint64
	unacked   unackedList
	consumers map[string]*consumer
	closed    bool
}

// pending is a delivery awaiting acknowledgement.
type pending struct {
	tag  uint64
	qe   *queueEntity
	cons *consumer // nil for basic.get
	// seq is the message id in qe, which holds the delivery (the offset
	// for a stream).
	seq uint64
	// at is when it was delivered, by the coarse clock of
	// consumer_timeout.go (unix ms; 0 = not timed).
	at int64
}

func newChannel(c *conn, id uint16) *channel {
	ch := &channel{id: id, c: c, consumers: make(map[string]*consumer)}
	c.b.mgmt.addChannel(ch)
	return ch
}

// handleMethod runs one method. A soft error closes the channel; a hard
// one is returned to close the connection.
func (ch *channel) handleMethod(m amqp.Method) error {
	if ch.closing.Load() {
		// As in RabbitMQ, a closing channel ignores everything but close
		// and close-ok, and keeps its number until the close-ok: a
		// client's channel.close that crossed ours is answered, and its
		// close-ok for ours follows.
		switch m.(type) {
		case *amqp.ChannelCloseOk:
			delete(ch.c.channels, ch.id)
			ch.c.openChannels.Add(-1)
		case *amqp.ChannelClose:
			ch.c.send(ch.id, &amqp.ChannelCloseOk{})
		}
		return nil
	}
	if h := testMethodHook.Load(); h != nil {
		(*h)(m)
	}
	if ch.pub.stage != stageIdle {
		return ch.pub.unexpectedFrame(m.ClassID(), m.MethodID())
	}
	err := ch.dispatch(m)
	if err == nil {
		return nil
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		ch.c.log.Error("internal error", zapErr(err))
		return amqp.Errorf(amqp.InternalError, m.ClassID(), m.MethodID(), "%v", err)
	}
	if ae.Hard() {
		return ae
	}
	ch.softClose(ae)
	return nil
}

// softClose sends channel.close for a channel exception and releases what
// the channel holds.
func (ch *channel) softClose(ae *amqp.Error) {
	// The channel's publishes before the failing frame were taken.
	ch.c.flushRoutes()
	ch.pub = publishing{}
	ch.closeWith(ae)
}

// closeWith sends channel.close for ae once and releases what the channel
// holds; the reader then drops the channel's frames until close-ok. Any
// goroutine (the consumer-timeout checker closes channels too).
func (ch *channel) closeWith(ae *amqp.Error) {
	if !ch.closing.CompareAndSwap(false, true) {
		return
	}
	ch.c.send(ch.id, &amqp.ChannelClose{ReplyCode: ae.Code, ReplyText: ae.Text, FailingClassID: ae.ClassID, FailingMethodID: ae.MethodID})
	ch.shutdown()
}

func (ch *channel) dispatch(m amqp.Method) error {
	switch m := m.(type) {
	case *amqp.BasicPublish:
		return ch.startPublish(m)
	case *amqp.BasicAck:
		return ch.ack(m.DeliveryTag, m.Multiple)
	case *amqp.BasicNack:
		return ch.reject(m.DeliveryTag, m.Multiple, m.Requeue, 120)
	case *amqp.BasicReject:
		return ch.reject(m.DeliveryTag, false, m.Requeue, 90)
	case *amqp.BasicConsume:
		return ch.consume(m)
	case *amqp.BasicCancel:
		return ch.cancel(m)
	case *amqp.BasicGet:
		return ch.get(m)
	case *amqp.BasicQos:
		return ch.qos(m)
	case *amqp.BasicRecover:
		if !m.Requeue {
			return amqp.Errorf(amqp.NotImplemented, amqp.ClassBasic, 110, "requeue=false")
		}
		ch.recover()
		ch.c.send(ch.id, &amqp.BasicRecoverOk{})
		return nil
	case *amqp.BasicRecoverAsync:
		if !m.Requeue {
			return amqp.Errorf(amqp.NotImplemented, amqp.ClassBasic, 100, "requeue=false")
		}
		ch.recover()
		return nil
	case *amqp.ExchangeDeclare:
		return ch.exchangeDeclare(m)
	case *amqp.ExchangeDelete:
		return ch.exchangeDelete(m)
	case *amqp.ExchangeBind:
		return ch.exchangeBind(m.Destination, m.Source, m.RoutingKey, m.Arguments, m.NoWait, true)
	case *amqp.ExchangeUnbind:
		return ch.exchangeBind(m.Destination, m.Source, m.RoutingKey, m.Arguments, m.NoWait, false)
	case *amqp.QueueDeclare:
		return ch.queueDeclare(m)
	case *amqp.QueueBind:
		return ch.queueBind(m.Queue, m.Exchange, m.RoutingKey, m.Arguments, m.NoWait, true)
	case *amqp.QueueUnbind:
		return ch.queueBind(m.Queue, m.Exchange, m.RoutingKey, m.Arguments, false, false)
	case *amqp.QueuePurge:
		return ch.queuePurge(m)
	case *amqp.QueueDelete:
		return ch.queueDelete(m)
	case *amqp.ConfirmSelect:
		if ch.tx {
			return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassConfirm, 10, "cannot switch from tx to confirm mode")
		}
		ch.confirm = true
		ch.shown.confirm.Store(true)
		if !m.NoWait {
			ch.c.send(ch.id, &amqp.ConfirmSelectOk{})
		}
		return nil
	case *amqp.TxSelect:
		if ch.confirm {
			return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassTx, 10, "cannot switch from confirm to tx mode")
		}
		ch.tx = true
		ch.shown.tx.Store(true)
		ch.c.send(ch.id, &amqp.TxSelectOk{})
		return nil
	case *amqp.TxCommit:
		return ch.txCommit()
	case *amqp.TxRollback:
		return ch.txRollback()
	case *amqp.ChannelFlow:
		// RabbitMQ refuses to stop deliveries by channel.flow (consumers
		// have basic.qos for that) with a connection exception.
		if !m.Active {
			return amqp.Errorf(amqp.NotImplemented, amqp.ClassChannel, 20, "active=false")
		}
		ch.c.send(ch.id, &amqp.ChannelFlowOk{Active: true})
		return nil
	case *amqp.ChannelFlowOk:
		return nil
	case *amqp.ChannelClose:
		ch.shutdown()
		delete(ch.c.channels, ch.id)
		ch.c.openChannels.Add(-1)
		ch.c.send(ch.id, &amqp.ChannelCloseOk{})
		return nil
	case *amqp.ChannelCloseOk:
		return nil
	case *amqp.ChannelOpen:
		return amqp.Errorf(amqp.ChannelError, amqp.ClassChannel, 10, "second 'channel.open' seen")
	case *amqp.AccessRequest:
		ch.c.send(ch.id, &amqp.AccessRequestOk{Ticket: 1})
		return nil
	}
	return amqp.Errorf(amqp.CommandInvalid, m.ClassID(), m.MethodID(), "method '%s' is not valid here", m.Name())
}

// shutdown cancels the channel's consumers and returns its unacknowledged
// deliveries to their queues. The channel takes no more deliveries.
func (ch *channel) shutdown() {
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return
	}
	ch.closed = true
	ch.c.b.mgmt.removeChannel(ch)
	ch.c.b.reply.drop(ch, "")
	ch.confirms.close()
	conss := make([]*consumer, 0, len(ch.consumers))
	for _, cons := range ch.consumers {
		conss = append(conss, cons)
	}
	clear(ch.consumers)
	unacked := ch.unacked.takeAll()
	ch.mu.Unlock()
	ch.starvedMu.Lock()
	ch.starved = nil
	ch.starvedMu.Unlock()
	for _, cons := range conss {
		cons.qe.removeConsumer(cons)
	}
	// Deliveries acknowledged in an uncommitted transaction go back too.
	for _, a := range ch.txAcks {
		unacked = append(unacked, a.ps...)
	}
	ch.requeue(unacked)
	ch.txPubs, ch.txAcks = nil, nil
}

// recover requeues every unacknowledged delivery of the channel.
func (ch *channel) recover() {
	ch.mu.Lock()
	unacked := ch.unacked.takeAll()
	ch.mu.Unlock()
	ch.requeue(unacked)
}
