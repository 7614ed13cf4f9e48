package broker

import "github.com/warrenmq/warren/queue"

// The queue-effects executor. A queue's state machine (package queue)
// changes through commands and answers with effects; the broker carries
// the effects out here:
//
//   - queue.EffSettled: the message was acknowledged (or purged): its
//     journal record or spilled copy is deleted (Broker.unjournal).
//   - queue.EffDeadLetter: the message left unacknowledged: its record is
//     deleted and, with a dead-letter exchange, it waits in
//     queueFeatures.dead for flushDead, which routes it once the queue's
//     lock is released (deadletter.go).
//   - queue.EffDeliver: getLocked (expiry.go) hands basic.get its entry.
//     Dispatch takes OpCheckout's typed form (Queue.Checkout, the same
//     transition): dispatchLocked (consume.go) gets (consumer record,
//     entry) pairs and writes basic.deliver to the consumer the record's
//     gate is (queueEntity.consumerOf), with no effect value and no
//     lookup by id.
//   - queue.EffExpired: a tick found the queue unused for its x-expires:
//     expireQueue deletes it through the definitions log once the lock is
//     released (tickLocked, expiry.go).
//   - queue.EffConfirm, queue.EffReject: not produced on a single node,
//     whose publishes carry no publisher id (confirms follow the journal,
//     confirm.go).
//
// Through Apply go: consumers attaching and detaching (OpAttach, OpDetach;
// consume.go), basic.get (OpGet), acks, requeues and
// rejects — a run of one queue's deliveries as one command with Cmd.Seqs
// (OpSettle, OpReturn, OpDiscard; settleRunLocked, from consume.go,
// deadletter.go, manage.go) —, purges (OpPurge in chunks of purgeChunk,
// purgeLocked), policy changes (OpSetConfig, setConfigLocked), the
// timers' ticks (OpTick: message expiry and x-expires) and the uses that
// keep a queue with x-expires alive (OpTouch: a redeclare, a consume, a
// basic.get, the last consumer leaving). Publishes (publish.go, batch.go, deadletter.go,
// expiry.go), dispatch (Checkout), recovery (Restore), paging and a
// deleted queue's drop still call the state machine's typed methods,
// which are the same transitions.
//
// Publishes stay typed (Publish, PublishAt) for cost, not for want of an
// effect: OpEnqueue with Cmd.ReportEnqueued reports the id a kept message
// got (EffEnqueued, to journal it under) and a refusal (EffReject), which
// is all this path needs. Through Apply, though, one enqueue writes a
// command and an effect value of some 200 and 100 bytes and reads them
// back, about twice the enqueue itself (queue's BenchmarkEnqueue: typed
// vs apply), paid per queue of a fanout: BenchmarkFanout/queues=1000 ran
// about twice as slow with publish.go's, deadletter.go's and
// linkserve.go's enqueues through Apply. A replicated queue applies
// OpEnqueue anyway — the command is what its log carries, with the
// publisher id and sequence for resends (Cmd.Publisher, PubSeq) — and
// takes the confirm from EffConfirm once the entry is committed, not from
// the local journal; a single node gains nothing from the command and
// keeps the typed call, the same transition. Each consumer's gate (consumer.Acquire) is set
// with Queue.SetGate: this node's limit, asked during dispatch (why it is
// not credit in the state: queue/doc.go).
//
// The channel keeps, per delivery tag, only what it needs itself: the
// queue and message id, the consumer (channel-wide prefetch, consumer
// timeouts) and the delivery time (unackedList, unacked.go); the delivery
// itself — message, delivery count, redelivered flag — is held once, by
// the queue, and an ack finds it there with one lookup.

// applyLocked applies cmd to qe's state machine and carries out its
// effects. It reports whether dead letters await flushDead. A command the
// state refuses (an id that is no longer held: the queue was purged or
// recreated) changes nothing. Hold qe.mu.
func (qe *queueEntity) applyLocked(cmd *queue.Cmd) bool {
	// A refused command changed nothing and has no effects; a settle of
	// several ids may have applied some: their effects are carried out.
	effs, _ := qe.q.Apply(cmd, qe.effects[:0])
	dead := qe.executeLocked(effs)
	qe.doneEffectsLocked(effs)
	return dead
}

// doneEffectsLocked hands the effect buffer back for the next command,
// keeping it unless a large command (a purge) grew it. Hold qe.mu.
func (qe *queueEntity) doneEffectsLocked(effs []queue.Effect) {
	clear(effs)
	if cap(effs) > maxKeptEffects {
		effs = nil
	}
	qe.effects = effs[:0]
}

// maxKeptEffects is the largest effect buffer a queue keeps between
// commands (a dispatch of more deliveries at once allocates, amortised
// over them); purgeChunk the most messages one purge command drops, so
// that its effects fit.
const (
	maxKeptEffects = 1024
	purgeChunk     = maxKeptEffects
)

// purgeLocked drops every ready message of qe through OpPurge, in chunks
// of purgeChunk (the effect buffer stays bounded), and returns how many.
// The journal records of the purged messages go (EffSettled). Hold qe.mu.
func (qe *queueEntity) purgeLocked() int {
	n := 0
	for {
		cmd := queue.Cmd{Op: queue.OpPurge, Max: purgeChunk}
		effs, _ := qe.q.Apply(&cmd, qe.effects[:0])
		n += len(effs)
		qe.executeLocked(effs)
		qe.doneEffectsLocked(effs)
		if len(effs) < purgeChunk {
			return n
		}
	}
}

// setConfigLocked applies a policy change to qe's state machine at now
// (OpSetConfig): messages the new limits or TTL drop are dead-lettered.
// It reports whether dead letters await flushDead. Hold qe.mu.
func (qe *queueEntity) setConfigLocked(cfg queue.Config, now int64) bool {
	cfg.DeadLetterAtLeastOnce = false // replicated quorum queues only (quorumdlx.go)
	cmd := queue.Cmd{Op: queue.OpSetConfig, Now: now, Config: cfg}
	return qe.applyLocked(&cmd)
}

// executeLocked carries out effects of qe's state machine. It reports
// whether dead letters await flushDead. Hold qe.mu.
func (qe *queueEntity) executeLocked(effs []queue.Effect) bool {
	b := qe.vhost.b
	dead := false
	for i := range effs {
		f := &effs[i]
		switch f.Kind {
		case queue.EffSettled:
			b.unjournal(qe, f.Entry)
		case queue.EffDeadLetter:
			dls := [1]queue.DeadLetter{{Entry: f.Entry, Reason: f.Reason}}
			dead = qe.deadLocked(dls[:], nil) || dead
		}
	}
	return dead
}

// settleLocked acknowledges the delivery of message seq. Hold qe.mu.
func (qe *queueEntity) settleLocked(seq uint64) {
	cmd := queue.Cmd{Op: queue.OpSettle, Seq: seq}
	qe.applyLocked(&cmd)
}

// settleRunLocked applies op (OpSettle, OpReturn or OpDiscard) to the
// deliveries ps, all of qe, as one command: an ack with multiple=true
// settles its run of a queue with one Apply. It reports whether dead
// letters await flushDead. Hold qe.mu.
func (qe *queueEntity) settleRunLocked(op queue.Op, ps []pending) bool {
	cmd := queue.Cmd{Op: op}
	if op == queue.OpReturn && qe.at {
		cmd.Now = nowMs()
	}
	if len(ps) == 1 {
		cmd.Seq = ps[0].seq
	} else {
		seqs := qe.seqs[:0]
		for i := range ps {
			seqs = append(seqs, ps[i].seq)
		}
		cmd.Seqs = seqs
		if cap(seqs) <= 4096 {
			qe.seqs = seqs[:0]
		}
	}
	dead := qe.applyLocked(&cmd)
	if op == queue.OpReturn && qe.at {
		// Requeued messages may expire before the next timer.
		qe.armExpiryLocked()
	}
	return dead
}

// discardLocked rejects the delivery of message seq without requeue
// (dead-lettered when the queue has a dead-letter exchange). It reports
// whether flushDead has work. Hold qe.mu.
func (qe *queueEntity) discardLocked(seq uint64) bool {
	cmd := queue.Cmd{Op: queue.OpDiscard, Seq: seq}
	return qe.applyLocked(&cmd)
}

// returnLocked puts the delivery of message seq back, or dead-letters it
// when it has expired or passed the delivery limit. It reports whether
// flushDead has work. Hold qe.mu.
func (qe *queueEntity) returnLocked(seq uint64) bool {
	cmd := queue.Cmd{Op: queue.OpReturn, Seq: seq}
	if qe.at {
		cmd.Now = nowMs()
	}
	if qe.applyLocked(&cmd) {
		return true
	}
	if qe.at {
		qe.armExpiryLocked()
	}
	return false
}
