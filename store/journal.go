package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
)

type opKind uint8

const (
	opAppend     opKind = iota + 1 // set buf[:msgKeyLen] → buf[msgKeyLen:] (with n, large.go)
	opMark                         // set buf[:markKeyLen] → buf[markKeyLen:]
	opRemove                       // delete buf (a message or stream key) and its n chunks
	opRemoveBoth                   // delete buf[:msgKeyLen], its n chunks and buf (a mark key)
	opFlush                        // done(first error of the batch so far)
	opSet                          // set buf[1:1+buf[0]] → the rest (stream records, stream.go; with n)
	opDelete                       // delete buf (a log key, logs.go); done(err) once durable
)

// op is one submission to the journal writer; buf (key, then value) is owned by it.
type op struct {
	buf  []byte
	done func(error) // opAppend (may be nil), opFlush
	kind opKind
	// skip is set by cancelSettled on an append removed in the same batch
	// (and on its mark and removal): nothing of it is written.
	skip bool
	// withNext ties the op to the next one (a stream chunk's data and
	// header): they are written, and fail, together.
	withNext bool
	// n is, for an append of a large body or a set of a large stream
	// chunk, the length of the record, which its chunk records follow in
	// buf; for a removal, the number of chunk records to delete (large.go).
	n uint32
}

// opOverhead is what the backlog charges an append beyond its buffer.
const opOverhead = int64(unsafe.Sizeof(op{}))

// maxFreeBlocks is how many op blocks the writer keeps for reuse.
const maxFreeBlocks = 2

// msgRef names a message.
type msgRef struct{ queueID, seq uint64 }

// Append journals message seq of durable queue queueID (m must not be nil; a later
// Append of the same seq overwrites it). It encodes m before it returns,
// so the caller may reuse m and its slices at once. done, if not nil, runs exactly once:
// on the writer goroutine after the group commit holding the message is durable (fsynced
// unless Config.NoSync) with nil, or with the write error; or on the caller's goroutine
// with ErrClosed after Close. done must be quick and must not call Append or Flush: the
// writer waits for it.
//
// Append blocks while the journal backlog (appends submitted but not completed) is over
// its cap (64 MiB), until the writer drains it: that is the journal's backpressure.
//
// A body over bodyChunkLen is stored in chunk records (large.go), so any body up to
// what memory holds is stored; a record Badger would still refuse fails alone with
// ErrTooLarge.
func (s *Store) Append(queueID, seq uint64, m *Message, done func(error)) {
	var key [msgKeyLen]byte
	putMsgKey(key[:], queueID, seq)
	s.submitAppend(key[:], m, done, true)
}

// submitAppend queues an append of m under key (a message or spill key), waiting
// while the backlog is over its cap. An urgent one has the writer commit without
// waiting for company.
func (s *Store) submitAppend(key []byte, m *Message, done func(error), urgent bool) {
	buf, n := encodeAppend(key, m)
	s.submit([]op{{kind: opAppend, buf: buf, done: done, n: n}}, true, urgent, done)
}

// submit queues ops for the writer in order. Their appends and stream sets count in
// the backlog; with wait the caller first waits while the backlog is over its cap;
// urgent ones wake the writer to commit without waiting for company. done, if not
// nil, is called with ErrClosed after Close, or with ErrTooLarge, before anything is
// queued, if one of ops is a record Badger would refuse (checkOps): the ops of one
// call stand or fall together, and alone.
func (s *Store) submit(ops []op, wait, urgent bool, done func(error)) {
	if err := checkOps(ops); err != nil {
		s.log.Error("journal record refused", zap.Error(err))
		if done != nil {
			done(err)
		}
		return
	}
	var size int64
	for i := range ops {
		if k := ops[i].kind; k == opAppend || k == opSet {
			size += appendCost(ops[i].buf)
		}
	}
	s.mu.Lock()
	if wait {
		s.waitBacklogLocked(size)
	}
	if s.stopping {
		s.mu.Unlock()
		if done != nil {
			done(ErrClosed)
		}
		return
	}
	s.backlog += size
	wake := false
	if n := len(ops); n > 1 && n <= s.maxBatch && ops[n-2].withNext {
		// A tied group goes into one block, one group commit, when it
		// fits: a crash then writes all of it or none.
		if b := len(s.pending); b > 0 && cap(s.pending[b-1])-len(s.pending[b-1]) < n {
			s.pending = append(s.pending, s.blockLocked())
		}
	}
	for _, o := range ops {
		switch {
		case o.n == 0:
		case o.kind == opAppend:
			s.noteChunksLocked(o.buf[:msgKeyLen], chunkCount(o.buf[msgKeyLen:], o.n))
		case o.kind == opSet:
			k := 1 + int(o.buf[0])
			s.noteChunksLocked(o.buf[1:k], chunkCount(o.buf[k:], o.n))
		}
		wake = s.pushLocked(o) || wake
	}
	if urgent {
		s.urgent++
		wake = wake || s.urgent == 1
	}
	s.mu.Unlock()
	if wake {
		s.signal()
	}
}

// Remove deletes message seq of queueID (and its delivery mark) from the journal. It does
// not wait and has no fsync of its own: it is written with the next group commit, or on
// its own after at most ~200 ms when no append comes along. A crash before then
// redelivers the message. Dropped after Close.
func (s *Store) Remove(queueID, seq uint64) {
	key := make([]byte, markKeyLen)
	putMarkKey(key, queueID, seq)
	ref := msgRef{queueID, seq}

	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	o := op{kind: opRemove, buf: key[:msgKeyLen], n: s.takeChunksLocked(key[:msgKeyLen])}
	if _, ok := s.marked[ref]; ok {
		delete(s.marked, ref)
		o.kind, o.buf = opRemoveBoth, key
	} else {
		s.dropLateMarkLocked(ref)
	}
	wake := s.pushLocked(o)
	s.mu.Unlock()
	if wake {
		s.signal()
	}
}

// MarkDelivered records that message seq of queueID has been delivered deliveries times,
// in a small record beside the message (the body is not rewritten). Batched like Remove,
// with no fsync of its own; ScanQueue and ReadMessage report it. It must not follow the
// message's Remove. Dropped after Close.
func (s *Store) MarkDelivered(queueID, seq uint64, deliveries uint32) {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	ref := msgRef{queueID, seq}
	if _, ok := s.marked[ref]; ok {
		wake := s.pushMarkLocked(ref, deliveries)
		s.mu.Unlock()
		if wake {
			s.signal()
		}
		return
	}
	// The first mark waits: most deliveries are acknowledged sooner, and
	// then it is never written (late marks, below). A later one waiting
	// replaces it.
	for _, m := range s.lateMarks {
		if _, ok := m[ref]; ok {
			m[ref] = deliveries
			s.mu.Unlock()
			return
		}
	}
	s.lateMarks[0][ref] = deliveries
	s.late++
	wake := s.late == 1 && s.npending == 0
	s.mu.Unlock()
	if wake {
		s.signal()
	}
}

// Late marks. A delivery mark is kept aside for one to two removeDelay periods before
// it is queued for the writer: a message acknowledged meanwhile (the common case) is
// removed with no mark ever written, which halves the journal's work per message.
// lateMarks[0] gathers new marks; each removeDelay tick the writer queues lateMarks[1]
// and ages lateMarks[0] into it. Flush and Close queue them all at once. A crash loses
// at most the late marks — the same window as removals — and a message delivered
// in it comes back with redelivered=false, which AMQP allows.

// pushMarkLocked queues the mark record of ref. Hold mu.
func (s *Store) pushMarkLocked(ref msgRef, deliveries uint32) bool {
	buf := make([]byte, markKeyLen, markKeyLen+recordHeaderLen+binary.MaxVarintLen32)
	putMarkKey(buf, ref.queueID, ref.seq)
	buf = binary.AppendUvarint(beginRecord(buf), uint64(deliveries))
	sealRecord(buf[markKeyLen:])
	s.marked[ref] = struct{}{}
	return s.pushLocked(op{kind: opMark, buf: buf})
}

// dropLateMarkLocked forgets the late mark of ref, if any. Hold mu.
func (s *Store) dropLateMarkLocked(ref msgRef) {
	for _, m := range s.lateMarks {
		if _, ok := m[ref]; ok {
			delete(m, ref)
			s.late--
			return
		}
	}
}

// ageMarksLocked queues the older late marks and ages the newer ones; with all, it
// queues both generations. Hold mu.
func (s *Store) ageMarksLocked(all bool) {
	if s.late == 0 {
		return
	}
	for i := 1; i >= 0; i-- {
		if i == 0 && !all {
			break
		}
		for ref, n := range s.lateMarks[i] {
			s.pushMarkLocked(ref, n)
		}
		s.late -= len(s.lateMarks[i])
		clear(s.lateMarks[i])
	}
	s.lateMarks[0], s.lateMarks[1] = s.lateMarks[1], s.lateMarks[0]
}

// Flush waits until everything submitted before it (appends, removals, marks) is
// written and durable. It returns the first write error of the group commits that
// carried them, if any (appends also report theirs to done).
func (s *Store) Flush() error {
	ch := make(chan error, 1)
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return ErrClosed
	}
	s.ageMarksLocked(true)
	s.pushLocked(op{kind: opFlush, done: func(err error) { ch <- err }})
	s.urgent++
	wake := s.urgent == 1
	s.mu.Unlock()
	if wake {
		s.signal()
	}
	return <-ch
}

// waitBacklogLocked waits while adding size bytes would take the backlog over its cap
// (and something is in it), or until the store stops. Hold mu.
func (s *Store) waitBacklogLocked(size int64) {
	for !s.stopping && s.backlog > 0 && s.backlog+size > s.maxBacklog {
		s.waiters++
		s.cond.Wait()
		s.waiters--
	}
}

// appendCost is what an append of buf counts in the backlog.
func appendCost(buf []byte) int64 { return int64(cap(buf)) + opOverhead }

// pushLocked queues o in the last block of pending, starting a block when it is full.
// It reports whether the writer should be woken for a removal or a mark: the first op
// (to start the removal timer) or a full block.
func (s *Store) pushLocked(o op) bool {
	n := len(s.pending)
	if n == 0 || len(s.pending[n-1]) == cap(s.pending[n-1]) {
		s.pending = append(s.pending, s.blockLocked())
		n++
	}
	s.pending[n-1] = append(s.pending[n-1], o)
	s.npending++
	return s.npending == 1 || len(s.pending[n-1]) == cap(s.pending[n-1])
}

// blockLocked returns an empty block of ops, from the free list if it has
// one. Hold mu.
func (s *Store) blockLocked() []op {
	if f := len(s.free); f > 0 {
		b := s.free[f-1]
		s.free = s.free[:f-1]
		return b
	}
	return make([]op, 0, s.maxBatch)
}

func (s *Store) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// writeLoop is the journal writer, the only goroutine that writes journal entries. It
// takes everything pending at once and writes it block by block, each block (at most
// MaxBatch ops) one group commit: while one commit syncs, the next batch gathers.
// Removals and marks alone wait up to removeDelay for company. On stop it drains what
// is pending and returns.
func (s *Store) writeLoop() {
	defer s.wg.Done()
	timer := time.NewTimer(removeDelay)
	timer.Stop()
	defer timer.Stop()
	armed := false
	var spare [][]op
	for {
		timeout := false
		select {
		case <-s.wake:
		case <-timer.C:
			armed, timeout = false, true
		case <-s.stop:
		}
		s.mu.Lock()
		stopping := s.stopping
		if timeout || stopping {
			s.ageMarksLocked(stopping)
		}
		n := s.npending
		if n == 0 || (!timeout && !stopping && s.urgent == 0 && n < s.maxBatch) {
			late := s.late
			s.mu.Unlock()
			if n == 0 && stopping {
				return
			}
			if (n > 0 || late > 0) && !armed {
				timer.Reset(removeDelay)
				armed = true
			}
			continue
		}
		blocks := s.pending
		s.pending = spare[:0]
		s.npending, s.urgent = 0, 0
		late := s.late
		s.mu.Unlock()
		if armed && late == 0 {
			timer.Stop()
			armed = false
		}

		s.cancelSettled(blocks)
		start := time.Now()
		s.writeBatch(blocks)
		s.commitNs.Store(int64(time.Since(start)))
		if late > 0 && !armed {
			timer.Reset(removeDelay)
			armed = true
		}

		clear(blocks)
		spare = blocks[:0]
	}
}

// pendingMsg is a message's append in the batch being written, and its delivery
// mark if the batch has one (cancelSettled).
type pendingMsg struct{ append, mark *op }

// cancelSettled marks the appends of blocks that a later removal in blocks deletes
// again — a message acknowledged before its group commit — to be skipped with their
// delivery marks and that removal: neither the message nor its deletion reaches Badger
// (RabbitMQ's message store skips such writes too). Their done callbacks still run after
// the commit of the block they are in, as if they were written; the message they
// confirm has been consumed. Writer goroutine.
func (s *Store) cancelSettled(blocks [][]op) {
	removes := 0
	for _, ops := range blocks {
		for i := range ops {
			if k := ops[i].kind; k == opRemove || k == opRemoveBoth {
				removes++
			}
		}
	}
	if removes == 0 {
		return
	}
	live := s.settling
	if live == nil {
		live = make(map[[msgKeyLen]byte]pendingMsg)
		s.settling = live
	}
	appends := 0
	defer func() {
		if appends > 4096 {
			s.settling = nil // a map does not shrink: let a big one go
		} else {
			clear(live)
		}
	}()
	for _, ops := range blocks {
		for i := range ops {
			o := &ops[i]
			switch o.kind {
			case opAppend:
				appends++
				live[[msgKeyLen]byte(o.buf[:msgKeyLen])] = pendingMsg{append: o}
			case opMark:
				k := [msgKeyLen]byte(o.buf[:msgKeyLen])
				if p, ok := live[k]; ok {
					p.mark = o
					live[k] = p
				}
			case opRemove, opRemoveBoth:
				if len(o.buf) < msgKeyLen {
					continue
				}
				k := [msgKeyLen]byte(o.buf[:msgKeyLen])
				p, ok := live[k]
				if !ok {
					continue
				}
				delete(live, k)
				p.append.skip = true
				if p.mark != nil {
					p.mark.skip = true
				}
				if o.kind == opRemove || p.mark != nil {
					// Nothing of the message is on disk: no deletion either.
					o.skip = true
				}
				s.cancelled.Add(1)
			}
		}
	}
}

// writeBatch writes blocks in order, one group commit each, and completes each commit's
// appends and flushes when it is durable. It hands the blocks back to the free list.
//
// A commit that fails is done again op by op, each alone, so that only the ops that
// fail on their own report an error (and a removal or a mark is not lost because a
// neighbour failed). The ops of the failed commit that did reach Badger are written
// again, which sets or deletes the same keys to the same values.
func (s *Store) writeBatch(blocks [][]op) {
	var firstErr error
	var errs []error
	var carry error // the failure of a group that goes on in the next block
	for _, ops := range blocks {
		errs = errs[:0]
		carried := 0
		if carry != nil {
			// The group's first ops failed in the previous block: the rest
			// is not written either.
			for carried < len(ops) {
				ops[carried].skip = true
				carried++
				if !ops[carried-1].withNext {
					break
				}
			}
		}
		if err := s.commit(ops); err != nil {
			s.log.Error("journal write failed, writing its entries one by one", zap.Int("entries", len(ops)), zap.Error(err))
			errs = s.commitEach(ops, errs)
		}
		if carried > 0 {
			if len(errs) == 0 {
				errs = append(errs, make([]error, len(ops))...)
			}
			for i := range carried {
				errs[i] = carry
			}
		}
		carry = nil
		if n := len(ops); n > 0 && ops[n-1].withNext && len(errs) > 0 && errs[n-1] != nil {
			carry = errs[n-1]
		}
		var done int64
		for i := range ops {
			o := &ops[i]
			var err error
			if len(errs) > 0 {
				err = errs[i]
				if err != nil && firstErr == nil {
					firstErr = err
				}
			}
			switch o.kind {
			case opAppend, opSet:
				if o.done != nil {
					o.done(err)
				}
				if err != nil && o.kind == opAppend && o.buf[0] == prefixMsg {
					if f := s.appendFailed.Load(); f != nil {
						(*f)(binary.BigEndian.Uint64(o.buf[1:9]), binary.BigEndian.Uint64(o.buf[9:17]), err)
					}
				}
				done += appendCost(o.buf)
			case opFlush:
				o.done(firstErr)
			case opDelete:
				if o.done != nil {
					o.done(err)
				}
			}
		}
		clear(ops)
		s.mu.Lock()
		s.backlog -= done
		if done > 0 && s.waiters > 0 {
			s.cond.Broadcast()
		}
		if len(s.free) < maxFreeBlocks {
			s.free = append(s.free, ops[:0])
		}
		s.mu.Unlock()
	}
}

// commitEach commits each op of ops alone (ops tied with withNext together) and
// appends its error (nil for one that needs no write) to errs, which it returns.
func (s *Store) commitEach(ops []op, errs []error) []error {
	for i := 0; i < len(ops); {
		j := i + 1
		for j < len(ops) && ops[j-1].withNext {
			j++
		}
		var err error
		if k := ops[i].kind; k != opFlush {
			if err = s.commit(ops[i:j]); err != nil {
				s.log.Error("journal entry not written", zap.Stringer("kind", k), zap.Binary("key", ops[i].key()), zap.Error(err))
			}
		}
		for ; i < j; i++ {
			errs = append(errs, err)
		}
	}
	return errs
}

// key is the (first) key o writes or deletes, for logs.
func (o *op) key() []byte {
	switch o.kind {
	case opAppend, opRemove:
		return o.buf[:min(len(o.buf), msgKeyLen)]
	case opDelete:
		return o.buf
	case opMark, opRemoveBoth:
		return o.buf[:min(len(o.buf), markKeyLen)]
	case opSet:
		return o.buf[1 : 1+int(o.buf[0])]
	}
	return nil
}

func (k opKind) String() string {
	switch k {
	case opAppend:
		return "append"
	case opMark:
		return "mark"
	case opRemove, opRemoveBoth:
		return "remove"
	case opFlush:
		return "flush"
	case opSet:
		return "set"
	case opDelete:
		return "delete"
	}
	return fmt.Sprintf("op%d", uint8(k))
}

// commit writes ops in one Badger transaction, or several when they exceed Badger's batch
// limits. With SyncWrites each commit is one write and one sync.
func (s *Store) commit(ops []op) error {
	s.commits.Add(1)
	s.activity.Add(1)
	w := batchWriter{db: s.db, txn: s.db.NewTransaction(true)}
	if f := s.journalFault.Load(); f != nil {
		w.fault = *f
	}
	defer func() { w.txn.Discard() }()
	for i := range ops {
		o := &ops[i]
		if o.skip {
			continue
		}
		var err error
		switch o.kind {
		case opAppend:
			err = w.writeAppend(o)
		case opMark:
			err = w.set(o.buf[:markKeyLen:markKeyLen], o.buf[markKeyLen:])
		case opSet:
			k := 1 + int(o.buf[0])
			err = w.writeChunked(o.buf[1:k:k], o.buf[k:], o.n)
		case opRemove:
			if err = w.del(o.buf); err == nil {
				err = w.deleteChunks(o.buf, o.n)
			}
		case opRemoveBoth:
			if err = w.del(o.buf[:msgKeyLen:msgKeyLen]); err == nil {
				if err = w.deleteChunks(o.buf[:msgKeyLen], o.n); err == nil {
					err = w.del(o.buf)
				}
			}
		case opDelete:
			err = w.del(o.buf)
		}
		if err != nil {
			return fmt.Errorf("store: journal: %w", err)
		}
	}
	if err := w.txn.Commit(); err != nil {
		return fmt.Errorf("store: journal commit: %w", err)
	}
	return nil
}

// batchWriter fills a transaction and, when Badger says it is full, commits it and
// starts another.
type batchWriter struct {
	db  *badger.DB
	txn *badger.Txn
	// fault, if set, is asked first about each key (SetJournalFault).
	fault func(key []byte) error
}

func (w *batchWriter) set(k, v []byte) error {
	if w.fault != nil {
		if err := w.fault(k); err != nil {
			return err
		}
	}
	err := w.txn.Set(k, v)
	if errors.Is(err, badger.ErrTxnTooBig) {
		if err := w.next(); err != nil {
			return err
		}
		err = w.txn.Set(k, v)
	}
	return err
}

func (w *batchWriter) del(k []byte) error {
	if w.fault != nil {
		if err := w.fault(k); err != nil {
			return err
		}
	}
	err := w.txn.Delete(k)
	if errors.Is(err, badger.ErrTxnTooBig) {
		if err := w.next(); err != nil {
			return err
		}
		err = w.txn.Delete(k)
	}
	return err
}

func (w *batchWriter) next() error {
	if err := w.txn.Commit(); err != nil {
		return err
	}
	w.txn = w.db.NewTransaction(true)
	return nil
}

// Cancelled is how many appended messages were removed before their group commit and
// so were never written.
func (s *Store) Cancelled() int64 { return s.cancelled.Load() }

// SetJournalFault is for tests: f, if not nil, is called by the journal writer with
// each key it is about to set or delete (message, chunk, mark and stream records), and
// an error from it fails that write as an error from Badger would. nil removes it.
func (s *Store) SetJournalFault(f func(key []byte) error) {
	if f == nil {
		s.journalFault.Store(nil)
		return
	}
	s.journalFault.Store(&f)
}

// OnAppendFailure sets f to be called on the journal writer for each Append whose
// write failed, after its done: message seq of queueID is not in the journal, and
// whoever holds it in memory should let it go so that memory agrees with the store.
// f must be quick and must not call the store. nil removes it.
func (s *Store) OnAppendFailure(f func(queueID, seq uint64, err error)) {
	if f == nil {
		s.appendFailed.Store(nil)
		return
	}
	s.appendFailed.Store(&f)
}

// CommitLatency is how long the last group commit took to write and sync
// its batch: what an entry waits for once its batch is taken (0 before
// the first commit).
func (s *Store) CommitLatency() time.Duration { return time.Duration(s.commitNs.Load()) }
