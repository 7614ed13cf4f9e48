package queue

// Commands and effects. Every change of a queue's state can be written as
// a Cmd, a plain value, and applied with Apply, which appends what the
// owner must carry out to a slice the caller owns. Applying the same
// commands, in the same order, to queues in the same state (a new one, or
// one loaded from the same Snapshot) gives the same state and the same
// effects: nothing inside reads a clock, a random source or this node's
// memory, and no map is iterated where its order could show. That is what
// a replicated log needs: the log holds commands, every replica applies
// them, the leader carries out the effects.
//
// The typed methods (Publish, PublishAt, AddConsumer, Dispatch, Settle,
// ...) are the same transitions, called directly by an owner that applies
// commands as they come (a single node); Apply is the one entry a log
// replays through.

// PublisherID names a publisher (a confirming channel) for the
// deduplication of resends; 0 is a publisher that is not tracked.
type PublisherID uint64

// Op is what a command does.
type Op uint8

// The commands.
const (
	// OpEnqueue publishes Msg at Now with per-message TTL TTL (-1 = none).
	// With a Publisher, PubSeq is its sequence number: a sequence not
	// above the highest already enqueued by that publisher is a resend,
	// not enqueued again but confirmed (EffConfirm) again. With
	// ReportEnqueued the outcome is reported whatever the publisher: the
	// message id given to a message kept (EffEnqueued), a refusal by a
	// length limit (EffReject).
	OpEnqueue Op = iota + 1
	// OpAttach adds consumer Consumer with Prefetch, Priority, NoAck and
	// Exclusive.
	OpAttach
	// OpDetach removes consumer Consumer; its unacknowledged deliveries
	// stay held.
	OpDetach
	// OpCheckout hands ready messages to consumers with credit at Now
	// (EffDeliver; expired heads become EffDeadLetter).
	OpCheckout
	// OpGet takes the next ready message for basic.get at Now (EffDeliver
	// with Consumer 0), held unless NoAck: by Consumer when it is set (an
	// id naming the getter's node and process, so that HeldBy finds it
	// when that node is gone; not in a queue with message groups), by no
	// consumer otherwise.
	OpGet
	// OpSettle acknowledges the delivery of message Seq (EffSettled).
	OpSettle
	// OpReturn requeues the delivery of message Seq at Now, or
	// dead-letters it past the delivery limit or its expiry.
	OpReturn
	// OpDiscard rejects the delivery of message Seq without requeue
	// (EffDeadLetter, reason rejected).
	OpDiscard
	// OpPurge drops every ready message (EffSettled for each), or with
	// Max the first Max of them in queue order: an owner that bounds its
	// effect buffer purges in chunks, under one lock, until fewer than Max
	// come back.
	OpPurge
	// OpTick expires messages at the heads at Now (EffDeadLetter), and
	// reports the queue's own expiry (EffExpired) once it is due.
	OpTick
	// OpSetConfig applies Config at Now (a policy was set or cleared).
	OpSetConfig
	// OpForget forgets Publisher's highest sequence (its channel closed).
	OpForget
	// OpTouch records a use of the queue at Now, for Config.Expires (a
	// redeclare).
	OpTouch
	// OpSettleDiscards settles the discards (at-least-once dead letters,
	// discards.go) with ids Seqs, or Seq: their dead-letter targets
	// confirmed them (EffSettled for each). Ids not among the discards
	// are passed over (ErrUnknownMessage, having settled the others).
	OpSettleDiscards
)

// Cmd is one command. Which fields count depends on Op; the others are
// ignored. Now is the time the command was issued at, in unix ms (0 = no
// clock: no TTL applies); it is part of the command so that every replica
// applies the same time.
type Cmd struct {
	Op  Op
	Now int64

	// Enqueue.
	Msg       *Message
	TTL       int64
	Publisher PublisherID
	PubSeq    uint64
	// ReportEnqueued asks for EffEnqueued (and EffReject without a
	// Publisher): the owner stores the message under its id.
	ReportEnqueued bool

	// Attach, detach; Get's and Attach's NoAck.
	Consumer  ConsumerID
	Tag       string
	Prefetch  int
	Priority  int
	NoAck     bool
	Exclusive bool

	// Settle, return, discard: the message id, or with Seqs set the ids
	// of several deliveries, settled (returned, discarded) in that order
	// by one command (an ack with multiple=true). An id that is not held
	// is passed over; Apply then reports ErrUnknownMessage, having applied
	// the others. With Consumer set, only the deliveries held by that
	// consumer count (a settlement that comes after the delivery was
	// returned and handed to another consumer is passed over; one held
	// by no consumer, a basic.get's, counts).
	Seq  uint64
	Seqs []uint64

	// Purge: the most messages to drop (0 = all).
	Max int

	// SetConfig.
	Config Config
}

// EffectKind is what an effect asks of the owner.
type EffectKind uint8

// The effects.
const (
	// EffDeliver: send Entry to consumer Consumer (0: the basic.get that
	// asked).
	EffDeliver EffectKind = iota + 1
	// EffDeadLetter: Entry left the queue unacknowledged for Reason:
	// delete its durable record and, with a dead-letter exchange,
	// republish it there (queue.DeadLetter).
	EffDeadLetter
	// EffSettled: Entry left the queue acknowledged or purged: delete its
	// durable record or spilled copy.
	EffSettled
	// EffConfirm: confirm Publisher's publish PubSeq (basic.ack).
	EffConfirm
	// EffReject: Publisher's publish PubSeq was refused by a length limit
	// (basic.nack).
	EffReject
	// EffExpired: the queue went unused for Config.Expires: delete it.
	EffExpired
	// EffEnqueued: the enqueued message Entry.Msg was kept with id
	// Entry.Seq (OpEnqueue with ReportEnqueued): store it under that id.
	// A message accepted but not kept (a TTL of 0 with no consumer ready,
	// or dropped at once by a length limit) has no EffEnqueued; it is
	// among the EffDeadLetter effects before.
	EffEnqueued
)

// Effect is one thing the owner must do after Apply.
type Effect struct {
	Kind EffectKind
	// Held marks an EffDeadLetter the queue keeps among its discards
	// (Config.AtLeastOnce): the owner republishes it and settles it with
	// OpSettleDiscards, and keeps its stored copy until then.
	Held      bool
	Consumer  ConsumerID
	Publisher PublisherID
	PubSeq    uint64
	// Reason is the dead-letter reason of EffDeadLetter.
	Reason string
	Entry  Entry
}

// Apply applies cmd and appends its effects to out. It returns an error,
// having changed nothing, for a command the state refuses:
// ErrExclusiveConsumer (attach), ErrUnknownConsumer (detach),
// ErrUnknownMessage (settle, return, discard). Refusals are deterministic
// too: every replica refuses the same command.
//
// In a queue configured to dead-letter at least once
// (Config.AtLeastOnce), the dead letters the command reports are kept
// among the discards and marked Held (discards.go).
func (q *Queue) Apply(cmd *Cmd, out []Effect) ([]Effect, error) {
	if !q.cfg.AtLeastOnce() && len(q.discards.list) == 0 {
		return q.apply(cmd, out)
	}
	switch cmd.Op {
	case OpSettleDiscards:
		seqs := cmd.Seqs
		if seqs == nil {
			seqs = []uint64{cmd.Seq}
		}
		out, all := q.settleDiscards(seqs, out)
		if !all {
			return out, ErrUnknownMessage
		}
		return out, nil
	case OpSetConfig:
		if !cmd.Config.AtLeastOnce() {
			out = q.releaseDiscards(out)
		}
	}
	n := len(out)
	out, err := q.apply(cmd, out)
	if q.cfg.AtLeastOnce() {
		q.holdDiscards(out[n:])
	}
	return out, err
}

func (q *Queue) apply(cmd *Cmd, out []Effect) ([]Effect, error) {
	switch cmd.Op {
	case OpEnqueue:
		if q.dedup != nil {
			return q.enqueueDedup(cmd, out), nil
		}
		return q.applyEnqueue(cmd, out), nil
	case OpAttach:
		q.touch(cmd.Now)
		if q.consumer(cmd.Consumer) != nil {
			// Attached already: a node that attaches its consumers again
			// after restoring a snapshot may race its own first attach.
			return out, nil
		}
		c := &Consumer{ID: cmd.Consumer, Tag: cmd.Tag, NoAck: cmd.NoAck, Exclusive: cmd.Exclusive,
			Prefetch: cmd.Prefetch, Priority: cmd.Priority}
		return out, q.AddConsumer(c)
	case OpDetach:
		c := q.consumer(cmd.Consumer)
		if c == nil {
			return out, ErrUnknownConsumer
		}
		q.RemoveConsumer(c)
		q.touch(cmd.Now)
		return out, nil
	case OpCheckout:
		return q.applyCheckout(cmd.Now, out), nil
	case OpGet:
		q.touch(cmd.Now)
		var dls []DeadLetter
		if cmd.Now != 0 {
			q.expireNext(cmd.Now, &dls)
		}
		out = appendDeadLetters(out, dls)
		if e, ok := q.getBy(cmd.NoAck, cmd.Consumer); ok {
			out = append(out, Effect{Kind: EffDeliver, Entry: e})
		}
		return out, nil
	case OpSettle, OpReturn, OpDiscard:
		if cmd.Seqs == nil {
			if cmd.Consumer != 0 && !q.heldBy(cmd.Seq, cmd.Consumer) {
				return out, ErrUnknownMessage
			}
			return q.applySettle(cmd.Op, cmd.Seq, cmd.Now, out)
		}
		var err error
		for _, seq := range cmd.Seqs {
			var e error
			if cmd.Consumer != 0 && !q.heldBy(seq, cmd.Consumer) {
				err = ErrUnknownMessage
				continue
			}
			if out, e = q.applySettle(cmd.Op, seq, cmd.Now, out); e != nil {
				err = e
			}
		}
		return out, err
	case OpPurge:
		if cmd.Max > 0 {
			return q.purgeSome(cmd.Max, out), nil
		}
		q.PurgeEach(func(e Entry) { out = append(out, Effect{Kind: EffSettled, Entry: e}) })
		return out, nil
	case OpTick:
		var dls []DeadLetter
		if cmd.Now != 0 {
			q.expire(cmd.Now, &dls)
		}
		out = appendDeadLetters(out, dls)
		if q.expiryDue(cmd.Now) {
			q.expired = true
			out = append(out, Effect{Kind: EffExpired})
		}
		return out, nil
	case OpSetConfig:
		return appendDeadLetters(out, q.SetConfig(cmd.Config, cmd.Now)), nil
	case OpForget:
		q.Forget(cmd.Publisher)
		return out, nil
	case OpTouch:
		q.touch(cmd.Now)
		return out, nil
	case OpSettleDiscards:
		return out, ErrUnknownMessage // no discards
	}
	return out, ErrUnknownCommand
}

// heldBy reports whether delivery seq is held by consumer id, or by no
// consumer (a basic.get whose holder is not recorded).
func (q *Queue) heldBy(seq uint64, id ConsumerID) bool {
	h, ok := q.held.get(seq)
	return ok && (h.c == nil || h.c.ID == id)
}

// applySettle settles, returns or discards the delivery of message seq,
// looked up once.
func (q *Queue) applySettle(op Op, seq uint64, now int64, out []Effect) ([]Effect, error) {
	switch op {
	case OpSettle:
		var h held
		if !q.release(seq, &h) {
			return out, ErrUnknownMessage
		}
		out = grow(out)
		f := &out[len(out)-1]
		f.Kind = EffSettled
		h.s.fill(&f.Entry)
		return out, nil
	case OpReturn:
		dl, dead, ok := q.returnAt(seq, now)
		if !ok {
			return out, ErrUnknownMessage
		}
		if dead {
			out = append(out, Effect{Kind: EffDeadLetter, Reason: dl.Reason, Entry: dl.Entry})
		}
		return out, nil
	}
	dl, ok := q.Discard(seq)
	if !ok {
		return out, ErrUnknownMessage
	}
	return append(out, Effect{Kind: EffDeadLetter, Reason: dl.Reason, Entry: dl.Entry}), nil
}

// purgeSome drops up to max ready messages in queue order, appending
// EffSettled for each.
func (q *Queue) purgeSome(max int, out []Effect) []Effect {
	for i := 0; i < max && q.Ready() > 0; i++ {
		s := q.remove(q.next())
		out = grow(out)
		f := &out[len(out)-1]
		f.Kind = EffSettled
		s.fill(&f.Entry)
	}
	return out
}

// grow appends a zero effect to out, to be filled in place.
func grow(out []Effect) []Effect {
	if len(out) < cap(out) {
		out = out[:len(out)+1]
		out[len(out)-1] = Effect{}
		return out
	}
	return append(out, Effect{})
}

func (q *Queue) applyEnqueue(cmd *Cmd, out []Effect) []Effect {
	if cmd.Publisher != 0 && !q.firstSend(cmd.Publisher, cmd.PubSeq) {
		return append(out, Effect{Kind: EffConfirm, Publisher: cmd.Publisher, PubSeq: cmd.PubSeq})
	}
	var (
		seq      uint64
		accepted = true
		kept     = true
		dls      []DeadLetter
	)
	if cmd.Now == 0 && cmd.TTL < 0 && (q.cfg.plain() || !cmd.ReportEnqueued) {
		// Publish drops without a trace what limits drop: reported
		// enqueues with limits go through PublishAt.
		seq = q.Publish(cmd.Msg)
		accepted = seq != 0
	} else {
		seq, accepted, dls = q.PublishAt(cmd.Msg, cmd.Now, cmd.TTL)
		for i := range dls {
			if dls[i].Entry.Msg == cmd.Msg {
				kept = false
			}
		}
	}
	out = appendDeadLetters(out, dls)
	if cmd.ReportEnqueued {
		if accepted && kept {
			out = grow(out)
			f := &out[len(out)-1]
			f.Kind = EffEnqueued
			f.Entry.Msg = cmd.Msg
			f.Entry.Seq = seq
			f.Entry.Size = cmd.Msg.Size()
		} else if !accepted && cmd.Publisher == 0 {
			return append(out, Effect{Kind: EffReject})
		}
	}
	if cmd.Publisher != 0 {
		k := EffConfirm
		if !accepted {
			k = EffReject
		}
		out = append(out, Effect{Kind: k, Publisher: cmd.Publisher, PubSeq: cmd.PubSeq})
	}
	return out
}

func (q *Queue) applyCheckout(now int64, out []Effect) []Effect {
	var dls []DeadLetter
	ds := q.Checkout(now, q.scratch[:0], &dls)
	out = appendDeadLetters(out, dls)
	for i := range ds {
		out = append(out, Effect{Kind: EffDeliver, Consumer: ds[i].Consumer.ID, Entry: ds[i].Entry})
		ds[i] = Delivery{}
	}
	q.scratch = ds[:0]
	return out
}

// Checkout is OpCheckout without the Cmd and Effect values, for an owner
// that applies commands as they come (a single node's dispatch): the same
// transition, at now (unix ms; 0 = no clock: no expiry is checked). It
// appends the deliveries to out, each naming the consumer's record (whose
// Gate the owner set, so it finds its own consumer without a lookup), and
// the expired heads it dropped to *dls; OpCheckout's effects are those
// dead letters (EffDeadLetter) followed by those deliveries (EffDeliver)
// in the same order. Apply's OpCheckout is built on it.
func (q *Queue) Checkout(now int64, out []Delivery, dls *[]DeadLetter) []Delivery {
	if now == 0 {
		return q.Dispatch(out)
	}
	return q.dispatch(out, now, dls)
}

func appendDeadLetters(out []Effect, dls []DeadLetter) []Effect {
	for i := range dls {
		out = append(out, Effect{Kind: EffDeadLetter, Reason: dls[i].Reason, Entry: dls[i].Entry})
	}
	return out
}

// SetGate makes g the gate of consumer id (Consumer.Gate), a limit of this
// node's that is not part of the state, and reports whether the queue has
// that consumer.
func (q *Queue) SetGate(id ConsumerID, g Gate) bool {
	c := q.consumer(id)
	if c == nil {
		return false
	}
	c.Gate = g
	return true
}

// consumer returns the registered consumer id, or nil. It looks from the
// newest: SetGate follows OpAttach.
func (q *Queue) consumer(id ConsumerID) *Consumer {
	for i := len(q.consumers) - 1; i >= 0; i-- {
		if c := q.consumers[i]; c.ID == id {
			return c
		}
	}
	return nil
}

// touch records a use at now (unix ms; 0 = no clock) for Config.Expires.
// A use after the expiry was reported takes the report back: the queue
// is in use again (its owner had not deleted it yet).
func (q *Queue) touch(now int64) {
	if now == 0 {
		return
	}
	if now > q.lastUsed {
		q.lastUsed = now
	}
	q.expired = false
}

// expiryDue reports whether the queue, unused since lastUsed, has expired
// at now (Config.Expires), once. Consumers keep it in use: a tick that
// finds one counts as a use (as RabbitMQ restarts the expiry timer while a
// queue has consumers).
func (q *Queue) expiryDue(now int64) bool {
	if q.cfg.Expires <= 0 || q.expired || now == 0 {
		return false
	}
	if len(q.consumers) > 0 || q.lastUsed == 0 {
		q.touch(now)
		return false
	}
	return now >= q.lastUsed+q.cfg.Expires
}

// ExpiresAt is when (unix ms) the queue expires if nothing uses it from
// now on: Config.Expires after its last use. It is 0 when it has no
// Config.Expires, has consumers (they keep it in use; tick again within
// Config.Expires), no use recorded yet, or its expiry was reported. The
// owner ticks (OpTick) then.
func (q *Queue) ExpiresAt() int64 {
	if q.cfg.Expires <= 0 || q.expired || len(q.consumers) > 0 || q.lastUsed == 0 {
		return 0
	}
	return q.lastUsed + q.cfg.Expires
}

// Expired reports whether OpTick has reported the queue's expiry
// (EffExpired) and no use has come since: an owner whose deletion of the
// queue failed tries again while this holds.
func (q *Queue) Expired() bool { return q.expired }
