package broker

import (
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/queue"
	"github.com/warrenmq/warren/store"
)

// Bodies of replicated quorum queues. Every member of a data group holds
// the state of the group's queues; without a bound it would hold every
// body too. With a store, a member keeps the bodies of at most
// Config.QueueMemoryMessages ready messages and Config.QueueMemoryBytes of
// each queue in RAM (the window of classic queues, paging.go); as a
// command enqueues a message beyond it, the body is written to the node's
// store (store.PutReplBody, key 'q' group queue seq) and dropped, leaving
// the queue's 32-byte index slot. This is the node's own business beside
// the replicated state: the queue delivers a paged-out message like any
// other (queue.SetDeliverPaged), so dispatch never depends on what a
// replica holds in RAM.
//
// What the group's commands mean for the bodies is carried out in order
// by one runner goroutine per group (groupBodies.run, started when there
// is work, owned by the broker like the pagers): a delivery to this
// node's consumer of a paged-out message waits for its body, read in one
// batch with the others pending; every delivery to this node's consumers
// after it waits behind it, so a consumer gets its messages in queue
// order; a basic.get of a paged-out message gets its body through the
// command's result; the body of a message settled, dead-lettered,
// delivered with no-ack or purged is deleted (after the reads queued
// before it). A delivery finds its body while the message is held: only
// its settlement deletes it.
//
// Snapshots carry the bodies: QueueGroup.Snapshot flushes the store and
// opens a read view, and the snapshot writes every queue's index, then
// its stored bodies read from that view, streamed. Restore drops the
// group's bodies from the store and writes the snapshot's back, a record
// at a time, so neither side holds a deep queue's bodies in RAM. After a
// restart the group is restored from its latest snapshot (its bodies
// written to the store again) and the log after it replayed.
//
// Queues with priorities or message groups are not paged (a paged-out
// message's lane and group are read from its body).

// groupBodies is the node-local body store of one data group.
type groupBodies struct {
	b         *Broker
	st        *store.Store
	group     uint64
	keep      int
	keepBytes int64

	// mu guards the fields below; a leaf lock, taken under the group's.
	mu   sync.Mutex
	jobs []bodyJob
	// busy is set while the runner holds jobs it took: deliveries wait
	// behind them. running is set while a runner goroutine exists.
	busy, running bool
	// epoch counts restores: jobs of an earlier state are dropped.
	epoch uint64
	// pageIn are the queues with a page-in job queued.
	pageIn map[GroupQueueKey]bool

	// qg is the group's machine, whose lock the runner takes to page in.
	qg *QueueGroup
}

// bodyJob is one thing the runner does, in order.
type bodyJob struct {
	kind  bodyJobKind
	id    uint64 // store.ReplID
	entry queue.Entry
	key   GroupQueueKey       // page in, dead letter
	dl    queue.DeadLetter    // dead letter
	cons  *consumer           // deliver: this node's consumer
	get   chan *queue.Message // get: the waiting basic.get
	del   bool                // deliver, get: delete the body after (no-ack)
}

type bodyJobKind uint8

const (
	jobDeliver bodyJobKind = iota + 1
	jobGet
	jobDelete
	jobDropQueue
	jobPageIn
	// jobDeadLetter: a paged-out message dead-lettered on the group's
	// leader: its body is read and the dead letter handed to deadLoop,
	// then the body deleted.
	jobDeadLetter
)

// newGroupBodies returns group g's body store, nil without a store.
func (b *Broker) newGroupBodies(g uint64) *groupBodies {
	if b.cfg.Store == nil {
		return nil
	}
	return &groupBodies{b: b, st: b.cfg.Store, group: g, keep: b.cfg.QueueMemoryMessages, keepBytes: b.cfg.QueueMemoryBytes,
		pageIn: make(map[GroupQueueKey]bool)}
}

// setBodies makes gb (maybe nil) the body store of g.
func (g *QueueGroup) setBodies(gb *groupBodies) {
	g.bodies = gb
	if gb != nil {
		gb.qg = g
	}
}

func (gb *groupBodies) replID(k GroupQueueKey) uint64 { return store.ReplID(gb.group, k.ID) }

// pageable reports whether q's bodies may be paged out.
func pageable(q *queue.Queue) bool {
	c := q.Config()
	return c.MaxPriority == 0 && c.GroupHeader == ""
}

// after carries out what command cmd (nil for a gone-consumers command)
// applied to queue k came to, r: it pages out an enqueued message beyond
// the window, deletes the bodies of messages that left, and writes (or
// queues) the deliveries to this node's consumers. The group's lock is
// held.
func (gb *groupBodies) after(k GroupQueueKey, q *queue.Queue, cmd *queue.Cmd, r *GroupResult) {
	id := gb.replID(k)
	if cmd != nil && cmd.Op == queue.OpEnqueue && pageable(q) {
		if n, bytes := q.Resident(); n > gb.keep || bytes > gb.keepBytes {
			if seq, m := q.Newest(); m != nil && m == cmd.Msg {
				gb.st.PutReplBody(id, seq, &store.Message{Exchange: m.Exchange, RoutingKey: m.RoutingKey, Header: m.Header, Body: m.Body})
				q.PageOut(seq, 0, true)
			}
		}
	}
	for i := range r.Effects {
		f := &r.Effects[i]
		switch f.Kind {
		case queue.EffDeadLetter:
			if f.Held {
				// Kept among the queue's discards: the stored copy
				// stays until they are settled (EffSettled).
				continue
			}
			if f.Entry.Msg == nil && q.Config().DeadLetter && gb.b.cfg.QuorumGroups.Leader(gb.group) {
				// Republished by this node (Broker.observe leaves it to
				// us): with its body, read first.
				gb.push(bodyJob{kind: jobDeadLetter, id: id, key: k, entry: f.Entry,
					dl: queue.DeadLetter{Entry: f.Entry, Reason: f.Reason}})
			} else if f.Entry.Spilled {
				gb.push(bodyJob{kind: jobDelete, id: id, entry: f.Entry})
			}
		case queue.EffSettled:
			if f.Entry.Spilled {
				gb.push(bodyJob{kind: jobDelete, id: id, entry: f.Entry})
			}
		case queue.EffDeliver:
			gb.delivery(id, q, cmd, r, f)
		}
	}
	if paged, _ := q.Paged(); paged > 0 && q.ConsumerCount() > 0 {
		if n, bytes := q.Resident(); n < gb.keep/2 && bytes < gb.keepBytes/2 {
			gb.mu.Lock()
			queued := gb.pageIn[k]
			gb.pageIn[k] = true
			gb.mu.Unlock()
			if !queued {
				gb.push(bodyJob{kind: jobPageIn, key: k})
			}
		}
	}
}

// pageInQueue reads the next window of queue k's paged-out bodies (those
// its consumers reach next) and gives them back to the queue, in one
// read, outside the group's lock: the classic pager's read-ahead, so that
// most deliveries find their body in RAM. Runner goroutine.
func (gb *groupBodies) pageInQueue(k GroupQueueKey) {
	gb.mu.Lock()
	delete(gb.pageIn, k)
	gb.mu.Unlock()
	g := gb.qg
	g.mu.Lock()
	q := g.queues[k]
	var refs []queue.PageRef
	if q != nil {
		refs = q.Wanted(nil, gb.keep, gb.keep, gb.keepBytes)
	}
	g.mu.Unlock()
	if len(refs) == 0 {
		return
	}
	seqs := make([]uint64, len(refs))
	for i, r := range refs {
		seqs[i] = r.Seq
	}
	slices.Sort(seqs)
	msgs := make(map[uint64]*queue.Message, len(seqs))
	err := gb.st.ReadReplBodies(gb.replID(k), seqs, func(seq uint64, m *store.Message) {
		if m != nil {
			msgs[seq] = replMessage(m)
		}
	})
	if err != nil {
		gb.b.log.Error("paging in a quorum queue", zap.Uint64("group", gb.group), zap.Error(err))
		return
	}
	g.mu.Lock()
	if g.queues[k] == q {
		for seq, m := range msgs {
			q.PageIn(seq, m) // false if it left meanwhile
		}
	}
	g.mu.Unlock()
}

// delivery handles delivery f of queue id. The group's lock is held.
func (gb *groupBodies) delivery(id uint64, q *queue.Queue, cmd *queue.Cmd, r *GroupResult, f *queue.Effect) {
	paged := f.Entry.Msg == nil
	if f.Consumer == 0 {
		if paged {
			r.body = make(chan *queue.Message, 1)
			gb.push(bodyJob{kind: jobGet, id: id, entry: f.Entry, get: r.body, del: cmd != nil && cmd.NoAck})
		}
		return
	}
	rs := &gb.b.repl
	rs.mu.Lock()
	cons := rs.consumers[f.Consumer]
	rs.mu.Unlock()
	if cons == nil {
		if paged && consumerNoAck(q, f.Consumer) {
			gb.push(bodyJob{kind: jobDelete, id: id, entry: f.Entry})
		} else if uint64(f.Consumer&replProcMask) == rs.prefix {
			// A consumer of this process gone here: returned.
			gb.b.returnOrphan(r.Key, f.Entry.Seq, f.Consumer)
		}
		return
	}
	if r.Now != 0 && nowMs()-r.Now > replLateMs {
		// Decided while this node was cut off (Broker.observe): returned
		// rather than written, if cons holds it.
		if !cons.NoAck {
			gb.b.returnOrphan(r.Key, f.Entry.Seq, f.Consumer)
		} else if paged {
			gb.push(bodyJob{kind: jobDelete, id: id, entry: f.Entry})
		}
		return
	}
	gb.mu.Lock()
	if !paged && len(gb.jobs) == 0 && !gb.busy {
		gb.mu.Unlock()
		cons.deliverRepl(&f.Entry)
		return
	}
	gb.mu.Unlock()
	gb.push(bodyJob{kind: jobDeliver, id: id, entry: f.Entry, cons: cons, del: paged && cons.NoAck})
}

// consumerNoAck reports whether q's consumer id takes deliveries without
// acknowledgements.
func consumerNoAck(q *queue.Queue, id queue.ConsumerID) bool {
	for _, c := range q.Consumers() {
		if c.ID == id {
			return c.NoAck
		}
	}
	return false
}

// dropQueue deletes the bodies of deleted queue k, after the jobs before.
func (gb *groupBodies) dropQueue(k GroupQueueKey) {
	gb.push(bodyJob{kind: jobDropQueue, id: gb.replID(k)})
}

// push queues j, or does it at once when it is a deletion and nothing
// waits (the store batches deletions anyway).
func (gb *groupBodies) push(j bodyJob) {
	gb.mu.Lock()
	if j.kind == jobDelete && len(gb.jobs) == 0 && !gb.busy {
		gb.mu.Unlock()
		gb.st.RemoveReplBody(j.id, j.entry.Seq)
		return
	}
	gb.jobs = append(gb.jobs, j)
	start := !gb.running
	gb.running = true
	gb.mu.Unlock()
	if start && !gb.b.goPager(gb.run) {
		// The broker is closing: nothing more is delivered.
		gb.mu.Lock()
		jobs := gb.jobs
		gb.jobs, gb.running = nil, false
		gb.mu.Unlock()
		failJobs(jobs)
	}
}

// failJobs answers the basic.gets among jobs with no body.
func failJobs(jobs []bodyJob) {
	for _, j := range jobs {
		if j.kind == jobGet {
			j.get <- nil
		}
	}
}

// reset drops the jobs of the state a restore replaces.
func (gb *groupBodies) reset() {
	gb.mu.Lock()
	jobs := gb.jobs
	gb.jobs = nil
	gb.epoch++
	clear(gb.pageIn)
	gb.mu.Unlock()
	failJobs(jobs)
}

// run carries out the jobs, batch by batch, until none is left: it reads
// the bodies a batch needs in one read per queue, then does its jobs in
// order. It is the group's runner goroutine.
func (gb *groupBodies) run() {
	for {
		gb.mu.Lock()
		jobs := gb.jobs
		epoch := gb.epoch
		gb.jobs = nil
		if len(jobs) == 0 {
			gb.busy, gb.running = false, false
			gb.mu.Unlock()
			return
		}
		gb.busy = true
		gb.mu.Unlock()
		bodies := gb.read(jobs)
		gb.mu.Lock()
		stale := gb.epoch != epoch
		gb.mu.Unlock()
		if stale {
			failJobs(jobs)
			continue
		}
		for i := range jobs {
			j := &jobs[i]
			switch j.kind {
			case jobDelete:
				gb.st.RemoveReplBody(j.id, j.entry.Seq)
			case jobPageIn:
				gb.pageInQueue(j.key)
			case jobDropQueue:
				if err := gb.st.RemoveReplBodies(j.id); err != nil {
					gb.b.log.Warn("dropping the bodies of a deleted quorum queue", zap.Uint64("group", gb.group), zap.Error(err))
				}
			case jobDeadLetter:
				if m := bodies[bodyRef{j.id, j.entry.Seq}]; m != nil {
					j.dl.Entry.Msg = m
					gb.b.queueDead(replDead{key: j.key, dl: j.dl})
				} else {
					gb.b.log.Error("the body of a dead-lettered quorum queue message is missing from the store: not republished",
						zap.Uint64("group", gb.group), zap.Uint64("message", j.entry.Seq))
				}
				gb.st.RemoveReplBody(j.id, j.entry.Seq)
			case jobGet, jobDeliver:
				if j.entry.Msg == nil {
					j.entry.Msg = bodies[bodyRef{j.id, j.entry.Seq}]
				}
				if j.kind == jobGet {
					j.get <- j.entry.Msg
				} else if j.entry.Msg != nil {
					j.cons.deliverRepl(&j.entry)
				} else {
					gb.b.log.Error("the body of a quorum queue's message is missing from the store: not delivered",
						zap.Uint64("group", gb.group), zap.String("queue", j.cons.qe.name), zap.Uint64("message", j.entry.Seq))
				}
				if j.del {
					gb.st.RemoveReplBody(j.id, j.entry.Seq)
				}
			}
		}
	}
}

type bodyRef struct{ id, seq uint64 }

// read reads the bodies the deliveries and gets of jobs need.
func (gb *groupBodies) read(jobs []bodyJob) map[bodyRef]*queue.Message {
	want := map[uint64][]uint64{}
	for i := range jobs {
		if j := &jobs[i]; (j.kind == jobDeliver || j.kind == jobGet || j.kind == jobDeadLetter) && j.entry.Msg == nil {
			want[j.id] = append(want[j.id], j.entry.Seq)
		}
	}
	if len(want) == 0 {
		return nil
	}
	out := make(map[bodyRef]*queue.Message, len(jobs))
	for id, seqs := range want {
		slices.Sort(seqs)
		seqs = slices.Compact(seqs)
		err := gb.st.ReadReplBodies(id, seqs, func(seq uint64, m *store.Message) {
			if m != nil {
				out[bodyRef{id, seq}] = replMessage(m)
			}
		})
		if err != nil {
			gb.b.log.Error("reading the bodies of a quorum queue", zap.Uint64("group", gb.group), zap.Error(err))
		}
	}
	return out
}

// replMessage is the queue message of a stored body.
func replMessage(m *store.Message) *queue.Message {
	mode, prio := peekModePriority(m.Header)
	return &queue.Message{Exchange: m.Exchange, RoutingKey: m.RoutingKey, Header: m.Header, Body: m.Body,
		Persistent: mode == 2, Priority: prio}
}

// bytes returns the body bytes of queue k's ready messages on this
// replica, and how many of them (and their bytes) are paged out.
func (g *QueueGroup) bytes(k GroupQueueKey) (ready int64, paged int, pagedBytes, unacked int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.queues[k]
	if q == nil {
		return 0, 0, 0, 0
	}
	paged, pagedBytes = q.Paged()
	return q.ReadyBytes(), paged, pagedBytes, q.UnackedBytes()
}
