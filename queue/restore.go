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
