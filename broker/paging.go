package broker

import (
	"go.uber.org/zap"

	"github.com/warrenmq/warren/queue"
	"github.com/warrenmq/warren/store"
)

// Paging: memory is bounded by keeping only the head of a deep queue in
// RAM (queue/paging.go has the state machine's side).
//
//   - A queue keeps the bodies of at most Config.QueueMemoryMessages ready
//     messages and Config.QueueMemoryBytes of body bytes in RAM (its
//     window); beyond it, a persistent message of a durable queue —
//     journaled anyway — is paged out as it is published, and costs a
//     24-byte index entry in RAM.
//   - While the process uses more than Config.PagingRatio of the memory
//     high watermark (RabbitMQ's vm_memory_high_watermark_paging_ratio),
//     the windows shrink to a sixteenth, transient messages and those of
//     non-durable queues beyond them are spilled to the store too (records
//     that live only as long as the process), and the resource monitor
//     pages out what queues already hold beyond their windows.
//   - When consumers bring a queue's head below half its window, a pager
//     goroutine (one per queue at most, owned by the broker: Close waits
//     for it) reads the next bodies back from the store in one batch,
//     outside every lock, and dispatches them. basic.get pages in on its
//     own reader.
//
// Without a store nothing is paged.

// pageWindow is the number of messages and bytes a queue keeps in RAM now.
func (b *Broker) pageWindow() (int, int64) {
	n, bytes := b.cfg.QueueMemoryMessages, b.cfg.QueueMemoryBytes
	if b.paging.Load() {
		n, bytes = max(n/16, 16), max(bytes/16, 64<<10)
	}
	return n, bytes
}

// pageOutLocked pages out message seq, just published to qe (journaled
// says the journal holds it), when qe holds more than its window in RAM.
// Hold qe.mu.
func (qe *queueEntity) pageOutLocked(seq uint64, msg *queue.Message, journaled bool) {
	b := qe.vhost.b
	if b.cfg.Store == nil || seq == 0 {
		return
	}
	n, bytes := qe.q.Resident()
	keep, keepBytes := b.pageWindow()
	if n <= keep && bytes <= keepBytes {
		return
	}
	if journaled {
		qe.q.PageOut(seq, msg.Priority, false)
		return
	}
	if b.paging.Load() && qe.q.PageOut(seq, msg.Priority, true) {
		qe.spillLocked(seq, msg)
	}
}

// spillLocked writes msg, message seq of qe, to the store's paging area.
// Hold qe.mu.
func (qe *queueEntity) spillLocked(seq uint64, msg *queue.Message) {
	b := qe.vhost.b
	if qe.pageID == 0 {
		qe.pageID = b.pageIDs.Add(1)
	}
	b.cfg.Store.Spill(qe.pageID, seq, &store.Message{
		Exchange: msg.Exchange, RoutingKey: msg.RoutingKey, Header: msg.Header, Body: msg.Body,
	})
}

// journaled reports whether qe journals msg: a persistent message of a
// durable queue, or any message of a quorum queue, with a store.
func (qe *queueEntity) journaled(msg *queue.Message) bool {
	return qe.durable && (msg.Persistent || qe.quorum) && qe.vhost.b.cfg.Store != nil
}

// pageOutAllLocked pages out what qe holds beyond its window, spilling
// what the journal does not hold. Hold qe.mu.
func (qe *queueEntity) pageOutAllLocked() int {
	if qe.deleted {
		return 0
	}
	keep, keepBytes := qe.vhost.b.pageWindow()
	if n, bytes := qe.q.Resident(); n <= keep && bytes <= keepBytes {
		return 0
	}
	// Bounded per call, so that the queue's lock is not held for long: the
	// monitor comes back at its next sample.
	n := 0
	return qe.q.PageOutEach(keep, keepBytes, func(seq uint64, m *queue.Message) (ok, spilled, more bool) {
		n++
		if qe.journaled(m) {
			return true, false, n < pageOutBatch
		}
		qe.spillLocked(seq, m)
		return true, true, n < pageOutBatch
	})
}

// pageOutBatch is how many messages pageOutAllLocked pages out of a queue
// at most per call.
const pageOutBatch = 16384

// pageOutAll pages out every queue's messages beyond its window: the
// resource monitor's answer to memory pressure.
func (b *Broker) pageOutAll() {
	if b.cfg.Store == nil {
		return
	}
	vhosts := b.allVHosts()
	total := 0
	for _, v := range vhosts {
		v.mu.RLock()
		qs := make([]*queueEntity, 0, len(v.queues))
		for _, qe := range v.queues {
			qs = append(qs, qe)
		}
		v.mu.RUnlock()
		for _, qe := range qs {
			qe.mu.Lock()
			total += qe.pageOutAllLocked()
			qe.mu.Unlock()
		}
	}
	if total > 0 {
		b.log.Info("paged messages out under memory pressure", zap.Int("messages", total))
	}
}

// wantPagesLocked reports whether qe's head should be paged in: it has
// paged-out messages, consumers, and less than half its window in RAM (or
// a paged-out head). Hold qe.mu.
func (qe *queueEntity) wantPagesLocked() bool {
	if n, _ := qe.q.Paged(); n == 0 || qe.deleted || qe.q.ConsumerCount() == 0 {
		return false
	}
	keep, keepBytes := qe.vhost.b.pageWindow()
	n, bytes := qe.q.Resident()
	return n < keep/2 && bytes < keepBytes/2 || qe.q.HeadPaged()
}

// kickPagerLocked starts qe's pager when its head wants paging in and no
// pager runs. Hold qe.mu.
func (qe *queueEntity) kickPagerLocked() {
	// wantPagesLocked first: it reads the queue, which the caller has
	// just used; paging is on a line of qe of its own, a cache miss per
	// queue when a publish goes to thousands of them.
	if !qe.wantPagesLocked() || qe.paging {
		return
	}
	if qe.vhost.b.goPager(qe.pager) {
		qe.paging = true
	}
}

// goPager runs f on a goroutine counted with the pagers, which Close waits
// for, and reports whether it started (not once Close has begun).
func (b *Broker) goPager(f func()) bool {
	b.pagerMu.Lock()
	defer b.pagerMu.Unlock()
	if b.pagersClosed {
		return false
	}
	b.pagers.Add(1)
	go func() {
		defer b.pagers.Done()
		f()
	}()
	return true
}

// pager pages in qe's head, batch by batch, while it wants it. It is the
// queue's pager goroutine; Broker.Close waits for it.
func (qe *queueEntity) pager() {
	qe.mu.Lock()
	defer qe.mu.Unlock()
	for qe.wantPagesLocked() {
		if !qe.pageInLocked(0) {
			break
		}
		qe.dispatchLocked()
	}
	qe.paging = false
}

// pageInLocked reads the paged-out messages at qe's head back from the
// store (up to max of them, 0 = a window's worth) and gives them to the
// queue. It releases qe.mu while it reads. It reports whether it made
// progress. Hold qe.mu.
func (qe *queueEntity) pageInLocked(max int) bool {
	b := qe.vhost.b
	keep, keepBytes := b.pageWindow()
	if max <= 0 {
		max = keep
	}
	refs := qe.q.Wanted(nil, keep, max, keepBytes)
	if len(refs) == 0 {
		return false
	}
	storeID, pageID := qe.storeID, qe.pageID
	qe.mu.Unlock()
	msgs, err := b.readPages(storeID, pageID, refs)
	qe.mu.Lock()
	if err != nil {
		b.log.Error("paging in", zap.String("queue", qe.name), zap.Error(err))
		return false
	}
	if qe.deleted {
		return false
	}
	for i, r := range refs {
		if msgs[i] == nil {
			// The record is gone or corrupt (logged): the message is lost.
			if qe.q.DropPaged(r.Seq) {
				b.unjournal(qe, queue.Entry{Seq: r.Seq, Spilled: r.Spilled})
			}
			continue
		}
		qe.q.PageIn(r.Seq, msgs[i])
	}
	return true
}

// readPages reads the messages refs name: from the journal of durable
// queue storeID, or spilled under pageID. A message that cannot be read
// is nil.
func (b *Broker) readPages(storeID, pageID uint64, refs []queue.PageRef) ([]*queue.Message, error) {
	msgs := make([]*queue.Message, len(refs))
	for _, spilled := range []bool{false, true} {
		var seqs []uint64
		var idx []int
		for i, r := range refs {
			if r.Spilled == spilled {
				seqs = append(seqs, r.Seq)
				idx = append(idx, i)
			}
		}
		if len(seqs) == 0 {
			continue
		}
		id := storeID
		if spilled {
			id = pageID
		}
		j := 0
		err := b.cfg.Store.ReadMessages(id, spilled, seqs, func(seq uint64, m *store.Message) {
			i := idx[j]
			j++
			if m == nil {
				return
			}
			mode, prio := peekModePriority(m.Header)
			msgs[i] = &queue.Message{
				Exchange: m.Exchange, RoutingKey: m.RoutingKey, Header: m.Header, Body: m.Body,
				Persistent: mode == 2, Priority: prio,
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

// getPagedLocked is getLocked that pages the head in when it is paged
// out. It may release qe.mu while it reads. Hold qe.mu.
func (qe *queueEntity) getPagedLocked(noAck bool) (e queue.Entry, ok, dead bool) {
	e, ok, dead = qe.getLocked(noAck)
	for tries := 0; !ok && tries < 8 && !qe.deleted && qe.q.HeadPaged(); tries++ {
		if !qe.pageInLocked(64) || qe.deleted {
			break
		}
		var d bool
		e, ok, d = qe.getLocked(noAck)
		dead = dead || d
	}
	return e, ok, dead
}
