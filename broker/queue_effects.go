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
//   - queue.EffDeliver: dispatchLocked (consume.go) writes basic.deliver
//     to the consumer the effect names (queueEntity.consumers maps ids to
//     consumers); getLocked (expiry.go) hands basic.get its entry.
//   - queue.EffConfirm, queue.EffReject, queue.EffExpired: not produced on
//     a single node, whose publishes carry no publisher id (confirms follow
//     the journal, confirm.go) and whose x-expires is the queue's timer
//     (expiry.go).
//
// Through Apply go: consumers attaching and detaching (OpAttach, OpDetach;
// consume.go), dispatch (OpCheckout), basic.get (OpGet), acks, requeues and
// rejects (OpSettle, OpReturn, OpDiscard; consume.go, deadletter.go,
// manage.go) and the expiry timer (OpTick). Publishes (publish.go,
// expiry.go), policy changes (SetConfig), purges, recovery (Restore) and
// paging still call the state machine's typed methods, which are the same
// transitions. Each consumer's gate (consumer.Acquire) is set with
// Queue.SetGate: this node's limit, asked during dispatch.

// applyLocked applies cmd to qe's state machine and carries out its
// effects. It reports whether dead letters await flushDead. A command the
// state refuses (an id that is no longer held: the queue was purged or
// recreated) changes nothing. Hold qe.mu.
func (qe *queueEntity) applyLocked(cmd *queue.Cmd) bool {
	effs, err := qe.q.Apply(cmd, qe.effects[:0])
	if err != nil {
		return false
	}
	dead := qe.executeLocked(effs)
	clear(effs)
	qe.effects = effs[:0]
	return dead
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

// discardLocked rejects the delivery of message seq without requeue. It
// reports whether dead letters await flushDead. Hold qe.mu.
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
