package queue

// Restore puts a recovered entry back in the ready list (in its priority's
// lane). Entries must be restored in Seq order, before any Publish; later
// publishes continue after the highest Seq restored. The entry keeps its
// Expires.
func (q *Queue) Restore(e Entry) {
	q.push(toSlot(e))
	if e.Seq > q.nextSeq {
		q.nextSeq = e.Seq
	}
}

// PurgeEach drops every ready message like Purge, calling fn with each
// one first (to remove its durable record).
func (q *Queue) PurgeEach(fn func(Entry)) int {
	q.lanes(func(l *lane) { l.each(fn) })
	return q.Purge()
}

// LastSeq is the sequence number of the last message published (or
// restored): a publish that changed it was accepted with that number.
func (q *Queue) LastSeq() uint64 { return q.nextSeq }

// Has reports whether message seq is in the queue: ready (in RAM or paged
// out) or delivered and not yet settled.
func (q *Queue) Has(seq uint64) bool {
	if _, ok := q.held.get(seq); ok {
		return true
	}
	found := false
	q.lanes(func(l *lane) {
		if found {
			return
		}
		for i := range l.requeued {
			if l.requeued[i].seq == seq {
				found = true
				return
			}
		}
		r := &l.ready
		if i := r.search(seq); i < r.len() && r.seqAt(i) == seq && !r.at(i).taken() {
			found = true
		}
	})
	return found
}
