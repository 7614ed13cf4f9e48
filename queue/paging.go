package queue

import "sort"

// Paging. A deep queue keeps a compact index in RAM — one 24-byte cell per
// ready message (ring.go), with its sequence number, size, delivery count and expiry — and
// holds message bodies only for the part of the ready list its owner
// chooses (the head, which consumers reach first). The owner pages a
// message out with PageOut once a copy is in its store (the journal of a
// durable queue already holds persistent messages; others are written
// first, and marked spilled), and pages bodies back in with PageIn as
// consumers approach them: Wanted says which. A paged-out message keeps
// its place, counts in Ready and ReadyBytes and in length limits, and can
// expire or be dropped from the head (as a dead letter with a nil Msg);
// it is never delivered: Dispatch and Get stop at a paged-out head
// (HeadPaged) until it is paged in.

// SetDeliverPaged sets whether dispatch and Get hand out a paged-out
// message (with a nil Entry.Msg; the owner reads its body before it
// writes the delivery) rather than stop at it. A replicated queue needs
// it: which bodies a replica holds in RAM is its own business, and must
// not change what the queue decides. The setting is the owner's, not
// state: a snapshot does not record it. Only queues without priorities
// and message groups should page out with it (a paged-out message's lane
// is known by its body).
func (q *Queue) SetDeliverPaged(on bool) { q.deliverPaged = on }

// Newest returns the newest ready message of a queue without priorities
// (the tail of its ready list) and its id, or a nil message.
func (q *Queue) Newest() (uint64, *Message) {
	if q.base.ready.n == 0 {
		return 0, nil
	}
	r := &q.base.ready
	return r.seqAt(r.n - 1), r.at(r.n - 1).msg
}

// PageRef names a paged-out message for the owner to read back.
type PageRef struct {
	Seq uint64
	// Spilled reports that the copy is the owner's spilled one (not the
	// journal's).
	Spilled bool
}

// Paged is the number of ready messages paged out, and their body bytes.
func (q *Queue) Paged() (n int, bytes int64) { return q.paged, q.pagedLen }

// Resident is the number of ready messages whose bodies are in RAM, and
// their body bytes.
func (q *Queue) Resident() (n int, bytes int64) {
	return q.Ready() - q.paged, q.readyLen - q.pagedLen
}

// HeadPaged reports whether the next message to deliver is paged out.
func (q *Queue) HeadPaged() bool {
	return q.paged > 0 && q.Ready() > 0 && q.headMsg() == nil
}

// PageOut drops the body of ready message seq, of priority prio (its
// Message.Priority), from RAM; spilled says the owner wrote it to its
// paging store (Entry.Spilled then reports it until it is settled). It
// reports whether seq was found ready and in RAM. The queue forgets its
// *Message: the owner must have a copy to page in.
func (q *Queue) PageOut(seq uint64, prio uint8, spilled bool) bool {
	if q.mg != nil {
		return false // a group's messages are found by their headers
	}
	s := q.find(seq, q.prioIndex(prio))
	if s == nil || s.msg == nil {
		return false
	}
	q.persistPagedOut(s.msg, spilled, s.size)
	s.msg = nil
	if spilled {
		s.setSpilled()
	}
	q.paged++
	q.pagedLen += int64(s.size)
	return true
}

// PageOutEach offers the owner every message in RAM in the ready lists
// beyond the first keep messages (and keepBytes bytes) of each lane, from
// the lane's tail backwards, until page returns false; page is given the
// message and reports whether it has a copy (spilled: one it wrote for
// this) so that the message can be paged out. It returns how many were.
// Requeued messages stay in RAM.
func (q *Queue) PageOutEach(keep int, keepBytes int64, page func(seq uint64, m *Message) (ok, spilled, more bool)) int {
	if q.mg != nil {
		return 0
	}
	n := 0
	stop := false
	q.lanes(func(l *lane) {
		if stop {
			return
		}
		// Find where the kept head ends.
		r := &l.ready
		i, kept, keptBytes := 0, len(l.requeued), int64(0)
		for _, s := range l.requeued {
			keptBytes += int64(s.size)
		}
		for ; i < r.len() && kept < keep && keptBytes < keepBytes; i++ {
			if s := r.at(i); s.msg != nil {
				kept++
				keptBytes += int64(s.size)
			}
		}
		for j := r.len() - 1; j >= i; j-- {
			s := r.at(j)
			if s.msg == nil {
				continue
			}
			ok, spilled, more := page(r.seqAt(j), s.msg)
			if ok {
				q.persistPagedOut(s.msg, spilled, s.size)
				s.msg = nil
				if spilled {
					s.setSpilled()
				}
				q.paged++
				q.pagedLen += int64(s.size)
				n++
			}
			if !more {
				stop = true
				return
			}
		}
	})
	return n
}

// Wanted appends to refs the paged-out messages among the first window
// ready messages of each lane (highest priority first), at most max of
// them and about maxBytes of bodies: what the owner should page in so
// that consumers find bodies in RAM.
func (q *Queue) Wanted(refs []PageRef, window, max int, maxBytes int64) []PageRef {
	if q.paged == 0 {
		return refs
	}
	var bytes int64
	q.lanes(func(l *lane) {
		r := &l.ready
		for i := 0; i < r.len() && i < window && len(refs) < max && bytes < maxBytes; i++ {
			if s := r.at(i); s.msg == nil {
				refs = append(refs, PageRef{Seq: r.seqAt(i), Spilled: s.spilled()})
				bytes += int64(s.size)
			}
		}
	})
	return refs
}

// PageIn gives paged-out message seq its body back; m must be the message
// paged out (its Priority decides the lane). It reports whether seq was
// still ready and paged out (it may have expired or been dropped or
// purged meanwhile).
func (q *Queue) PageIn(seq uint64, m *Message) bool {
	s := q.find(seq, q.priority(m))
	if s == nil {
		return q.pageInDiscard(seq, m)
	}
	if s.msg != nil {
		return false
	}
	q.persistPagedIn(m, s.spilled(), s.size)
	s.msg = m
	q.paged--
	q.pagedLen -= int64(s.size)
	return true
}

// DropPaged removes paged-out message seq, whose copy is lost (the
// owner's store no longer has it), from the ready list, and reports
// whether it was there. It is slow (it moves the rest of the lane) and
// meant for that failure only.
func (q *Queue) DropPaged(seq uint64) bool {
	return q.dropReady(seq, true)
}

// DropReady removes ready message seq (resident or paged out, not
// requeued), which its owner could not store, and reports whether it was
// there. It is slow (it moves the rest of the lane) and meant for that
// failure only.
func (q *Queue) DropReady(seq uint64) bool {
	return q.dropReady(seq, false)
}

// dropReady removes ready message seq, only if paged out with pagedOnly.
func (q *Queue) dropReady(seq uint64, pagedOnly bool) bool {
	found := false
	q.lanes(func(l *lane) {
		if found {
			return
		}
		r := &l.ready
		i := r.search(seq)
		if i == r.len() || r.seqAt(i) != seq || r.at(i).taken() || (pagedOnly && r.at(i).msg != nil) {
			return
		}
		s := r.removeAt(i)
		found = true
		if l != &q.base {
			q.hiReady--
		}
		q.readyLen -= int64(s.size)
		q.persistReady(s.msg, s.flags&flagSpilled != 0, s.size, -1)
		if s.msg == nil {
			q.paged--
			q.pagedLen -= int64(s.size)
		}
		if q.mg != nil {
			q.removedReady(&s)
		}
	})
	return found
}

// RestorePaged is Restore for a recovered message left on disk: it takes
// its place with only its index in RAM (size bytes of body, priority prio,
// the rest from e, whose Msg is nil) and must be paged in before delivery.
func (q *Queue) RestorePaged(e Entry, prio uint8) {
	s := toSlot(e)
	s.msg = nil
	q.pushPrio(s, q.prioIndex(prio))
	if e.Seq > q.nextSeq {
		q.nextSeq = e.Seq
	}
}

// prioIndex is the lane index of priority p.
func (q *Queue) prioIndex(p uint8) int {
	if q.hi == nil {
		return 0
	}
	return int(min(p, q.cfg.MaxPriority))
}

// find returns the ready (not requeued) slot seq of the lane of priority
// p, or nil.
func (q *Queue) find(seq uint64, p int) *cell {
	l := &q.base
	if p > 0 {
		l = &q.hi[p-1]
	}
	r := &l.ready
	if r.n == 0 {
		return nil
	}
	if r.seqAt(r.n-1) == seq {
		return r.at(r.n - 1)
	}
	i := r.search(seq)
	if i == r.n || r.seqAt(i) != seq {
		return nil
	}
	return r.at(i)
}

// search is the index of the first slot with a seq >= seq (the ready list
// is in seq order).
func (r *ring) search(seq uint64) int {
	return sort.Search(r.n, func(i int) bool { return r.seqAt(i) >= seq })
}
