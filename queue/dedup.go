package queue

// Deduplication of resends. A publisher that resends what it published
// before (after a connection or leader change) gives each publish a
// sequence number that increases; the queue keeps the highest sequence
// it enqueued per publisher, so memory grows with publishers, not with
// messages. A publish at or below that sequence is a resend: confirmed
// again, not enqueued again. OpForget drops a publisher (its channel is
// gone), after which its sequences start afresh.

// firstSend reports whether publish seq of p is new, and records it.
func (q *Queue) firstSend(p PublisherID, seq uint64) bool {
	if last, ok := q.pubs[p]; ok && seq <= last {
		return false
	}
	if q.pubs == nil {
		q.pubs = make(map[PublisherID]uint64)
	}
	q.pubs[p] = seq
	return true
}

// Forget drops publisher p's highest sequence.
func (q *Queue) Forget(p PublisherID) { delete(q.pubs, p) }

// Publishers is the number of publishers whose sequences the queue keeps.
func (q *Queue) Publishers() int { return len(q.pubs) }
