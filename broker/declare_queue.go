package broker

import (
	"cmp"
	"errors"
	"strings"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/exchange"
)

func notFoundQueue(name, vhost string, classID, methodID uint16) error {
	return amqp.Errorf(amqp.NotFound, classID, methodID, "no queue '%s' in vhost '%s'", name, vhost)
}

func resourceLocked(name, vhost string, classID, methodID uint16) error {
	return amqp.Errorf(amqp.ResourceLocked, classID, methodID,
		"cannot obtain exclusive access to locked queue '%s' in vhost '%s'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.",
		name, vhost)
}

// findQueue looks a queue up for a channel method, checking exclusivity.
// An empty name means the queue last declared on the channel, as in
// RabbitMQ.
func (ch *channel) findQueue(name string, cls, mth uint16) (*queueEntity, error) {
	v := ch.c.vhost
	name, err := ch.expandQueueName(name, cls, mth)
	if err != nil {
		return nil, err
	}
	qe := v.queue(name)
	if qe == nil && ch.c.b.syncDefinitions() {
		qe = v.queue(name)
	}
	if qe == nil {
		return nil, notFoundQueue(name, v.name, cls, mth)
	}
	if err := ch.exclusiveAccess(qe, false, false, cls, mth); err != nil {
		return nil, err
	}
	return qe, nil
}

// expandQueueName resolves RabbitMQ's shortcut: the empty queue name means
// the queue last declared on the channel.
func (ch *channel) expandQueueName(name string, cls, mth uint16) (string, error) {
	if name != "" {
		return name, nil
	}
	if ch.lastQueue == "" {
		return "", amqp.Errorf(amqp.NotFound, cls, mth, "no previously declared queue")
	}
	return ch.lastQueue, nil
}

// exclusiveAccess is rabbit_amqqueue:check_exclusive_access: an exclusive
// queue is only for its own connection. With strict (a redeclare), the
// declared exclusive flag must match the queue's too.
func (ch *channel) exclusiveAccess(qe *queueEntity, strict, exclusive bool, cls, mth uint16) error {
	switch {
	case qe.exclusive && qe.owner == ch.c && (!strict || exclusive):
		return nil
	case !qe.exclusive && (!strict || !exclusive):
		return nil
	}
	return resourceLocked(qe.name, ch.c.vhost.name, cls, mth)
}

func (ch *channel) queueDeclare(m *amqp.QueueDeclare) error {
	const cls, mth = amqp.ClassQueue, 10
	ch.c.b.mgmt.queuesDeclared.Add(1)
	v := ch.c.vhost
	name := m.Queue
	if m.Passive {
		if name == "" {
			return notFoundQueue(name, v.name, cls, mth)
		}
		if name == replyToQueue || isReplyName(name) && ch.c.b.reply.lookup(name) != nil {
			// As RabbitMQ: the direct reply-to pseudo-queue exists, and so
			// does a reply name while its consumer does; both are empty.
			if !m.NoWait {
				ch.c.send(ch.id, &amqp.QueueDeclareOk{Queue: name})
			}
			return nil
		}
		qe, err := ch.findQueue(name, cls, mth)
		if err != nil {
			return err
		}
		if qe.home != nil {
			return ch.remoteDeclareOk(m.NoWait, qe)
		}
		// As in RabbitMQ, whose passive declare reads the queue's stats
		// through the queue process, which restarts its expiry timer: a
		// passive declare is a use for x-expires too.
		qe.touch()
		ch.declareOk(m.NoWait, qe)
		return nil
	}
	node := ""
	replicate := quorumArg(m.Arguments) && !nodeLocalQuorum(m.Arguments) || streamArg(m.Arguments) && !nodeLocalStream(m.Arguments)
	if replicate && ch.c.b.replicated() && !m.Exclusive {
		if g := ch.c.b.placeQuorum(v, name, m.Arguments); g != 0 {
			node = groupNode(g)
		}
	}
	if name == "" {
		name = randomName("amq.gen-")
	} else if strings.HasPrefix(name, "amq.") {
		return amqp.Errorf(amqp.AccessRefused, cls, mth, "queue name '%s' contains reserved prefix 'amq.*'", name)
	}
	if err := checkName(name, cls, mth); err != nil {
		return err
	}
	if err := ch.accessQueueDeclare(name, m.Arguments); err != nil {
		return err
	}
	// RabbitMQ: exclusive queues are never durable.
	durable := m.Durable && !m.Exclusive
	// Redeclaring an existing queue changes nothing: it is checked here.
	v.mu.RLock()
	qe := v.queues[name]
	v.mu.RUnlock()
	if qe == nil {
		if err := checkLocatorArgs(name, v.name, m.Arguments); err != nil {
			return err
		}
		args, err := encodeArgs(m.Arguments)
		if err != nil {
			return storeError("queue", err, cls, mth)
		}
		r := ch.c.b.propose(&defCmd{Op: opDeclareQueue, VHost: v.name, VHostID: v.storeID, Name: name,
			Durable: durable, Exclusive: m.Exclusive, AutoDelete: m.AutoDelete, Args: args, Owner: ch.c.id,
			Node: cmp.Or(node, ch.c.b.placeQueue(v, name, m.Arguments, m.Exclusive))})
		if r.err != nil {
			return r.err
		}
		if r.qe != nil && r.qe.repl != nil {
			if err := ch.c.b.createRepl(r.qe, cls, mth); err != nil {
				return err
			}
		}
		if !r.existed {
			if m.Exclusive {
				ch.c.exclusive = append(ch.c.exclusive, r.qe)
			}
			ch.lastQueue = name
			if !m.NoWait {
				ch.c.send(ch.id, &amqp.QueueDeclareOk{Queue: name})
			}
			return nil
		}
		qe = r.qe
	}
	if err := ch.exclusiveAccess(qe, true, m.Exclusive, cls, mth); err != nil {
		return err
	}
	if err := equivalentQueue(qe, durable, m, v.name); err != nil {
		return err
	}
	ch.lastQueue = name
	if qe.home != nil {
		err := ch.remoteDeclareOk(m.NoWait, qe)
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound && ch.c.b.syncDefinitions() && v.queue(name) != qe {
			// Its home node has deleted it, through another node a
			// moment ago, and this node had not applied the deletion:
			// now that it has, declare the queue again.
			return ch.queueDeclare(m)
		}
		return err
	}
	if qe.repl != nil {
		if err := ch.c.b.createRepl(qe, cls, mth); err != nil {
			return err
		}
	}
	qe.touch()
	ch.declareOk(m.NoWait, qe)
	return nil
}

func (ch *channel) declareOk(noWait bool, qe *queueEntity) {
	if noWait {
		return
	}
	if qe.repl != nil {
		msgs, conss := qe.vhost.b.replCounts(qe)
		if node, away := qe.vhost.b.replAway(qe.repl.group); away && qe.stream == nil {
			// No replica here: the counts are a member's (if it answers).
			msgs, conss, _ = qe.vhost.b.statusReplVia(qe, node, amqp.ClassQueue, 10)
		}
		ch.c.send(ch.id, &amqp.QueueDeclareOk{Queue: qe.name, MessageCount: uint32(msgs), ConsumerCount: uint32(conss)})
		return
	}
	qe.mu.Lock()
	msgs, conss := qe.q.Ready(), qe.q.ConsumerCount()
	if qe.stream != nil {
		msgs, conss = qe.streamMessagesLocked(), len(qe.stream.s.Consumers())
	}
	qe.mu.Unlock()
	ch.c.send(ch.id, &amqp.QueueDeclareOk{Queue: qe.name, MessageCount: uint32(msgs), ConsumerCount: uint32(conss)})
}

// queueEquivalenceArgs are the arguments RabbitMQ compares when a classic
// queue is redeclared (rabbit_classic_queue's queue_arguments); others may
// differ.
var queueEquivalenceArgs = []string{
	"x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
	"x-max-length", "x-max-length-bytes", "x-max-priority", "x-overflow", "x-queue-mode",
	"x-queue-version", "x-single-active-consumer", "x-queue-type", "x-queue-master-locator",
	// streams (rabbit_stream_queue's queue_arguments)
	"x-max-age", "x-stream-max-segment-size-bytes",
}

// equivalentQueue is the rest of rabbit_amqqueue:assert_equivalence, after
// the exclusive check.
func equivalentQueue(qe *queueEntity, durable bool, m *amqp.QueueDeclare, vhost string) error {
	const cls, mth = amqp.ClassQueue, 10
	switch {
	case qe.durable != durable:
		return inequivalent("queue", "durable", qe.name, vhost, durable, qe.durable, cls, mth)
	case qe.autoDelete != m.AutoDelete:
		return inequivalent("queue", "auto_delete", qe.name, vhost, m.AutoDelete, qe.autoDelete, cls, mth)
	}
	return equivalentArgs("queue", qe.name, vhost, qe.args, m.Arguments, queueEquivalenceArgs, cls, mth)
}

// queueBind handles queue.bind (bind true) and queue.unbind.
func (ch *channel) queueBind(qname, xname, key string, args amqp.Table, noWait, bind bool) error {
	cls, mth := uint16(amqp.ClassQueue), uint16(20)
	if !bind {
		mth = 50
	}
	v := ch.c.vhost
	// RabbitMQ's order: the name shortcuts (with the empty queue name, an
	// empty key means the queue's name), the default exchange, the
	// exchange, the queue, exclusive access.
	if qname == "" {
		var err error
		if qname, err = ch.expandQueueName(qname, cls, mth); err != nil {
			return err
		}
		if key == "" {
			key = qname
		}
	}
	if err := ch.accessQueueBind(qname, xname, key, cls, mth); err != nil {
		return err
	}
	if xname == "" {
		return accessRefusedDefault(cls, mth)
	}
	if err := ch.c.b.changeBinding(v, xname, qname, false, key, args, bind, ch.c.id, cls, mth); err != nil {
		return err
	}
	if bind && !noWait {
		ch.c.send(ch.id, &amqp.QueueBindOk{})
	} else if !bind {
		ch.c.send(ch.id, &amqp.QueueUnbindOk{})
	}
	return nil
}

// changeBinding proposes binding (bind) or unbinding dest, an exchange
// when toExchange, to source in v, for the connection owner (its id).
func (b *Broker) changeBinding(v *vhost, source, dest string, toExchange bool, key string, args amqp.Table, bind bool, owner uint64, cls, mth uint16) error {
	enc, err := encodeArgs(args)
	if err != nil {
		return storeError("binding", err, cls, mth)
	}
	op := opBind
	if !bind {
		op = opUnbind
	}
	r := b.propose(&defCmd{Op: op, VHost: v.name, VHostID: v.storeID, Source: source, Dest: dest,
		ToExchange: toExchange, Key: key, Args: enc, Owner: owner})
	return r.err
}

func (ch *channel) queuePurge(m *amqp.QueuePurge) error {
	if err := ch.accessQueue(permRead, m.Queue, amqp.ClassQueue, 30); err != nil {
		return err
	}
	qe, err := ch.findQueue(m.Queue, amqp.ClassQueue, 30)
	if err != nil {
		return err
	}
	if qe.stream != nil {
		return streamPurgeError(qe)
	}
	if qe.repl != nil {
		return ch.purgeRepl(qe, m)
	}
	if qe.home != nil {
		return ch.purgeRemote(qe, m)
	}
	qe.mu.Lock()
	n := qe.purgeLocked()
	qe.mu.Unlock()
	if !m.NoWait {
		ch.c.send(ch.id, &amqp.QueuePurgeOk{MessageCount: uint32(n)})
	}
	return nil
}

func (ch *channel) queueDelete(m *amqp.QueueDelete) error {
	const cls, mth = amqp.ClassQueue, 40
	if err := ch.accessQueue(permConfigure, m.Queue, cls, mth); err != nil {
		return err
	}
	v := ch.c.vhost
	name, err := ch.expandQueueName(m.Queue, cls, mth)
	if err != nil {
		return err
	}
	v.mu.RLock()
	qe := v.queues[name]
	v.mu.RUnlock()
	n := 0
	if qe != nil {
		if err := ch.exclusiveAccess(qe, false, false, cls, mth); err != nil {
			return err
		}
		if qe.repl != nil {
			n, err = ch.deleteRepl(qe, m)
		} else if qe.home != nil {
			n, err = ch.deleteRemote(qe, m)
		} else {
			n, err = v.deleteQueue(qe, m.IfUnused, m.IfEmpty)
		}
		if err != nil {
			return err
		}
	}
	if !m.NoWait {
		ch.c.send(ch.id, &amqp.QueueDeleteOk{MessageCount: uint32(n)})
	}
	return nil
}

// deleteQueue proposes the deletion of qe, its bindings and its consumers
// (applyDeleteQueue), refusing with 406 when ifUnused and it has consumers
// or ifEmpty and it has ready messages. It returns the number of ready
// messages dropped.
func (v *vhost) deleteQueue(qe *queueEntity, ifUnused, ifEmpty bool) (int, error) {
	return v.removeQueue(qe, ifUnused, ifEmpty, false)
}

// removeQueue is deleteQueue; with force (the exclusive queue of a
// closed connection), a transient queue goes even if the store fails,
// leaving the auto-delete exchanges its deletion would have taken (and
// their records) in place. The automatic deletions (an exclusive queue's
// connection gone, the last consumer of an auto-delete queue gone,
// x-expires) come here too.
func (v *vhost) removeQueue(qe *queueEntity, ifUnused, ifEmpty, force bool) (int, error) {
	const cls, mth = amqp.ClassQueue, 40
	qe.mu.Lock()
	var err error
	gone := qe.deleted
	switch {
	case gone:
	case ifUnused && qe.q.ConsumerCount() > 0:
		err = amqp.Errorf(amqp.PreconditionFailed, cls, mth, "queue '%s' in vhost '%s' in use", qe.name, v.name)
	case ifEmpty && qe.q.Ready() > 0:
		err = amqp.Errorf(amqp.PreconditionFailed, cls, mth, "queue '%s' in vhost '%s' not empty", qe.name, v.name)
	}
	qe.mu.Unlock()
	if gone || err != nil {
		return 0, err
	}
	r := v.b.propose(&defCmd{Op: opDeleteQueue, VHost: v.name, VHostID: v.storeID, Name: qe.name, ID: qe.id, Force: force})
	return r.dropped, r.err
}

// dropQueueLocked removes qe, whose records are deleted, from memory with
// its bindings, and returns its ready messages and its consumers to
// cancel. Hold b.defMu and v.mu (write).
func (v *vhost) dropQueueLocked(qe *queueEntity, cascade bool) (int, []*consumer) {
	qe.mu.Lock()
	qe.deleted = true
	qe.stopTimersLocked()
	v.b.mgmt.retire(qe.stats)
	n := qe.q.Ready()
	var conss []*consumer
	for _, c := range qe.q.Consumers() {
		conss = append(conss, qe.consumers[c.ID])
	}
	if qe.stream != nil {
		n, conss = qe.streamMessagesLocked(), qe.streamConsumersLocked()
	}
	qe.q.Purge()
	qe.mu.Unlock()
	v.b.dropQueueDedup(qe)
	delete(v.queues, qe.name)
	v.removeDestinationLocked(exchange.Destination{Kind: exchange.DestQueue, Name: qe.name}, cascade)
	return n, conss
}
