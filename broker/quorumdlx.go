package broker

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/queue"
	"github.com/warrenmq/warren/store"
)

// At-least-once dead-lettering of replicated quorum queues
// (x-dead-letter-strategy at-least-once, or the policy key
// dead-letter-strategy, with x-overflow reject-publish and a dead-letter
// exchange: queue.Config.AtLeastOnce; otherwise a queue dead-letters at
// most once, as RabbitMQ falls back to). The queue's state machine keeps
// such a queue's dead letters among its discards (queue/discards.go),
// replicated like the rest of its state, with their bodies (or, paged
// out, their stored copies, which each member keeps until the discard is
// settled). They count against the queue's length limits.
//
// The node that leads the queue's group runs the dead-letter worker
// (dlxLoop): every dlxRetryEvery, and when a command it applies holds
// new dead letters, it takes up to dlxMaxInFlight discards of each queue
// that has some (oldest first), reads the paged-out bodies back from its
// store, routes each to the dead-letter exchange (x-death recorded, as at
// most once) and republishes it to every target queue with a confirm: a
// replicated quorum queue's once its group committed the enqueue (a
// refusal by its length limit is no confirm), a classic queue of this
// node's once journaled (durable, persistent) or enqueued, a queue homed
// on another node once that node's reply says so. Those whose every
// target confirmed within dlxConfirmTimeout are settled together
// (queue.OpSettleDiscards); the others, and those with no route (no such
// exchange, no binding that matches), stay and are tried again at the
// next round. A new leader's worker finds the discards in its replica and
// starts over: a dead letter republished by the old leader but not yet
// settled is republished again (duplicates at the target are possible,
// losses are not). A dead letter that could only close a cycle is
// settled without being republished (RabbitMQ drops it).
//
// Not covered: a stream as target gets the dead letter without a confirm.

const (
	// dlxMaxInFlight bounds the dead letters of one queue the worker
	// republishes at a time.
	dlxMaxInFlight = 256
	// dlxRetryEvery is how often the worker looks at the discards.
	dlxRetryEvery = time.Second
	// dlxConfirmTimeout is how long the worker waits for the targets'
	// confirms of one batch.
	dlxConfirmTimeout = 10 * time.Second
)

// discardCount returns the number and bytes of queue k's discards.
func (g *QueueGroup) discardCount(k GroupQueueKey) (int, int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if q := g.queues[k]; q != nil {
		return q.DiscardCount()
	}
	return 0, 0
}

// discardKeys returns the queues that have discards, sorted.
func (g *QueueGroup) discardKeys() []GroupQueueKey {
	g.mu.Lock()
	defer g.mu.Unlock()
	var keys []GroupQueueKey
	for k := range g.dlx {
		if q := g.queues[k]; q != nil && q.HasDiscards() {
			keys = append(keys, k)
		} else {
			delete(g.dlx, k)
		}
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

// discards returns up to max of queue k's discards, oldest first.
func (g *QueueGroup) discards(k GroupQueueKey, max int) []queue.Discard {
	g.mu.Lock()
	defer g.mu.Unlock()
	if q := g.queues[k]; q != nil {
		return q.Discards(nil, max)
	}
	return nil
}

// kickDLX wakes the dead-letter worker. It does not block.
func (b *Broker) kickDLX() {
	select {
	case b.repl.dlxKick <- struct{}{}:
	default:
	}
}

// dlxLoop is the dead-letter worker: it runs while the broker does and
// republishes the discards of the queues whose groups this node leads.
func (b *Broker) dlxLoop() {
	r := &b.repl
	defer r.wg.Done()
	t := time.NewTicker(dlxRetryEvery)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case <-r.dlxKick:
		case <-t.C:
		}
		r.mu.Lock()
		machines := make(map[uint64]*QueueGroup, len(r.machines))
		for g, m := range r.machines {
			machines[g] = m
		}
		r.mu.Unlock()
		worked := map[GroupQueueKey]bool{}
		for g, m := range machines {
			if !b.cfg.QuorumGroups.Leader(g) {
				continue
			}
			for _, k := range m.discardKeys() {
				if qe := b.replEntity(k); qe != nil {
					worked[k] = true
					b.dlxQueue(m, qe)
				}
			}
		}
		for k := range r.dlxConfirmed {
			if !worked[k] {
				// Settled, deleted, or no longer led here (a leader
				// again starts afresh).
				delete(r.dlxConfirmed, k)
			}
		}
	}
}

// dlxQueue republishes up to dlxMaxInFlight discards of qe and settles
// those its targets confirmed. Worker goroutine; no lock held.
func (b *Broker) dlxQueue(m *QueueGroup, qe *queueEntity) {
	k := qe.repl.key
	ds := m.discards(k, dlxMaxInFlight)
	if len(ds) == 0 {
		return
	}
	b.loadDiscards(m, k, ds)
	qe.mu.Lock()
	set := qe.fx.set
	qe.mu.Unlock()
	if !set.hasDLX {
		return // its policy changed: the group lets them go at most once
	}
	var (
		mu      sync.Mutex
		settled []uint64
		got     []dlxConfirm // targets that confirmed, this round
		closed  bool
		wg      sync.WaitGroup
		buf     [8]*queueEntity
	)
	confirm := func(seq uint64) {
		mu.Lock()
		if !closed {
			settled = append(settled, seq)
		}
		mu.Unlock()
	}
	// confirmed are the targets that confirmed each dead letter in
	// earlier rounds: not sent to again.
	confirmed := b.repl.dlxConfirmed[k]
	now := time.Now()
	for i := range ds {
		d := &ds[i]
		if d.Entry.Msg == nil {
			continue // its body could not be read: next round
		}
		dl := queue.DeadLetter{Entry: d.Entry, Reason: d.Reason}
		msg, targets, routed := qe.vhost.deadLetterTargets(qe.name, &set, &dl, now, buf[:0])
		if !routed {
			continue // no route (yet): next round
		}
		seq := d.Entry.Seq
		if done := confirmed[seq]; done != nil {
			targets = slices.DeleteFunc(targets, func(t *queueEntity) bool { return done[t] })
		}
		if len(targets) == 0 {
			confirm(seq) // only cycles (dropped), or all confirmed before
			continue
		}
		p := &dlxPending{seq: seq}
		p.left.Store(int32(len(targets)))
		wg.Add(1)
		for _, t := range targets {
			t.enqueueConfirmed(msg, func(ok bool) {
				if ok {
					mu.Lock()
					if !closed {
						got = append(got, dlxConfirm{seq, t})
					}
					mu.Unlock()
				} else {
					p.failed.Store(true)
				}
				if p.left.Add(-1) == 0 {
					if !p.failed.Load() {
						confirm(p.seq)
					}
					wg.Done()
				}
			})
		}
	}
	all := make(chan struct{})
	go func() {
		wg.Wait()
		close(all)
	}()
	timer := time.NewTimer(dlxConfirmTimeout)
	select {
	case <-all:
	case <-timer.C:
	case <-b.repl.done:
	}
	timer.Stop()
	mu.Lock()
	closed = true
	seqs := settled
	mu.Unlock()
	b.noteConfirmed(k, ds, got, seqs)
	if len(seqs) == 0 {
		return
	}
	slices.Sort(seqs)
	p := b.proposer(qe.repl.group)
	if p == nil {
		return
	}
	c := queue.Cmd{Op: queue.OpSettleDiscards, Now: nowMs(), Seqs: seqs}
	res := make(chan struct{})
	p.submit(qe.queueCmd(&c), func(*GroupResult, error) { close(res) })
	select {
	case <-res:
	case <-b.repl.done:
	}
}

// dlxConfirm is a target's confirm of dead letter seq.
type dlxConfirm struct {
	seq    uint64
	target *queueEntity
}

// noteConfirmed records which targets confirmed which of the dead
// letters ds of queue k this round (got), so that the next round sends
// only to the others, and forgets those being settled and those no
// longer among the discards. Worker goroutine.
func (b *Broker) noteConfirmed(k GroupQueueKey, ds []queue.Discard, got []dlxConfirm, settled []uint64) {
	r := &b.repl
	m := r.dlxConfirmed[k]
	if m == nil && len(got) == 0 {
		return
	}
	if m == nil {
		m = map[uint64]map[*queueEntity]bool{}
		r.dlxConfirmed[k] = m
	}
	for _, c := range got {
		if m[c.seq] == nil {
			m[c.seq] = map[*queueEntity]bool{}
		}
		m[c.seq][c.target] = true
	}
	keep := make(map[uint64]bool, len(ds))
	for i := range ds {
		keep[ds[i].Entry.Seq] = true
	}
	for _, seq := range settled {
		delete(keep, seq)
	}
	for seq := range m {
		if !keep[seq] {
			delete(m, seq)
		}
	}
	if len(m) == 0 {
		delete(r.dlxConfirmed, k)
	}
}

// dlxPending is one dead letter waiting for its targets' confirms.
type dlxPending struct {
	seq    uint64
	left   atomic.Int32
	failed atomic.Bool
}

// loadDiscards reads the bodies of the paged-out discards among ds from
// this node's store. No lock held.
func (b *Broker) loadDiscards(m *QueueGroup, k GroupQueueKey, ds []queue.Discard) {
	gb := m.bodies
	if gb == nil {
		return
	}
	var seqs []uint64
	for i := range ds {
		if ds[i].Entry.Msg == nil {
			seqs = append(seqs, ds[i].Entry.Seq)
		}
	}
	if len(seqs) == 0 {
		return
	}
	slices.Sort(seqs)
	got := make(map[uint64]*queue.Message, len(seqs))
	err := gb.st.ReadReplBodies(gb.replID(k), seqs, func(seq uint64, sm *store.Message) {
		if sm != nil {
			got[seq] = replMessage(sm)
		}
	})
	if err != nil {
		b.log.Error("reading the bodies of dead letters", zap.String("queue", k.Name), zap.Error(err))
		return
	}
	for i := range ds {
		if ds[i].Entry.Msg == nil {
			ds[i].Entry.Msg = got[ds[i].Entry.Seq]
		}
	}
}

// enqueueConfirmed publishes a dead letter to qe and calls done once qe
// has it safe (ok) or did not take it. done may run on any goroutine,
// before enqueueConfirmed returns or after; it must not block. No lock
// held.
func (qe *queueEntity) enqueueConfirmed(msg *queue.Message, done func(ok bool)) {
	b := qe.vhost.b
	switch {
	case qe.repl != nil && qe.stream == nil:
		p := b.proposer(qe.repl.group)
		if p == nil {
			done(false)
			return
		}
		c := queue.Cmd{Op: queue.OpEnqueue, Now: nowMs(), TTL: messageTTL(msg.Header), Msg: msg, ReportEnqueued: true}
		qe.mu.Lock()
		qe.stats.publish++
		qe.mu.Unlock()
		p.submit(qe.queueCmd(&c), func(r *GroupResult, err error) {
			ok := err == nil && r.Err == nil
			if ok {
				for i := range r.Effects {
					if r.Effects[i].Kind == queue.EffReject {
						ok = false
					}
				}
			}
			done(ok)
		})
		return
	case qe.repl != nil:
		qe.enqueue(msg, 1) // a stream: no confirm
		done(true)
		return
	case qe.home != nil:
		qe.forwardConfirmed(msg, done)
		return
	}
	qe.mu.Lock()
	if qe.deleted {
		qe.mu.Unlock()
		done(false)
		return
	}
	var (
		seq                  uint64
		accepted, kept, dead = true, true, false
		now                  int64
		journaled            bool
	)
	if !qe.at {
		seq = qe.q.Publish(msg)
		accepted = seq != 0
		kept = accepted
		qe.stats.publish++
	} else {
		now = nowMs()
		seq, accepted, kept, dead = qe.enqueueAtLocked(msg, -1, now)
	}
	if accepted && kept {
		journaled = b.journal(qe, seq, msg, 0, func(err error) { done(err == nil) })
		qe.pageOutLocked(seq, msg, journaled)
	}
	if !qe.at {
		qe.dispatchLocked()
	} else if accepted {
		qe.afterPublishLocked(now)
	}
	qe.mu.Unlock()
	if dead {
		qe.flushDeadDepth(1)
	}
	if !journaled {
		done(accepted)
	}
}

// forwardConfirmed publishes a dead letter to qe, homed on another node,
// over the node link, and calls done with the home node's answer (false
// when the link is down). No lock held.
func (qe *queueEntity) forwardConfirmed(msg *queue.Message, done func(ok bool)) {
	p := qe.home.peer
	p.mu.Lock()
	w := p.w
	if w == nil {
		p.mu.Unlock()
		done(false)
		return
	}
	p.next++
	id := p.next
	p.waiters[id] = &linkWaiter{done: func(err error) { done(err == nil) }}
	p.mu.Unlock()
	start, ok := w.begin(lkPublish)
	if !ok {
		p.mu.Lock()
		wt := p.waiters[id]
		delete(p.waiters, id)
		p.mu.Unlock()
		if wt != nil {
			done(false)
		}
		return
	}
	w.buf = appendU(w.buf, id)
	w.buf = appendQueueRef(w.buf, qe)
	w.buf = appendLinkMessage(w.buf, msg)
	w.end(start)
	qe.mu.Lock()
	qe.stats.publish++
	qe.mu.Unlock()
}
