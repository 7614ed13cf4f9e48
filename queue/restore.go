package queue

// Restore puts a recovered entry back in the ready list. Entries must be
// restored in Seq order, before any Publish; later publishes continue
// after the highest Seq restored.
func (q *Queue) Restore(e Entry) {
	q.ready.push(e)
	q.readyLen += int64(e.Msg.Size())
	if e.Seq > q.nextSeq {
		q.nextSeq = e.Seq
	}
}

// PurgeEach drops every ready message like Purge, calling fn with each
// one first (to remove its durable record).
func (q *Queue) PurgeEach(fn func(Entry)) int {
	for _, e := range q.requeued {
		fn(e)
	}
	for i := 0; i < q.ready.len(); i++ {
		fn(*q.ready.at(i))
	}
	return q.Purge()
}
