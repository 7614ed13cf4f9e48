package queue

// Persistent messages: a durable queue's owner has the queue count them
// (SetCountPersistent), for RabbitMQ's messages_persistent and
// message_bytes_persistent. A message is persistent by its delivery mode
// (Message.Persistent); paged out (no Message in RAM) it is persistent
// unless the paging store holds it (Entry.Spilled): a durable queue's
// owner journals its persistent messages and spills only the others. So
// whether an entry counts never changes while it is in the queue, and the
// counts follow it in and out of the ready and unacknowledged sets beside
// readyLen and ackedLen.

// SetCountPersistent makes the queue count its persistent messages (off:
// Persistent reports none). Set by the owner, before the first publish or
// restore; it is not part of the queue's state (snapshots).
func (q *Queue) SetCountPersistent(on bool) { q.countPersistent = on }

// Persistent returns the number and body bytes of the persistent messages
// of the queue, ready and unacknowledged; none unless SetCountPersistent.
func (q *Queue) Persistent() (int, int64) {
	return q.pReady + q.pAcked, q.pReadyLen + q.pAckedLen
}

func persistentEntry(m *Message, spilled bool) bool {
	if m != nil {
		return m.Persistent
	}
	return !spilled
}

// persistReady adds d (1 or -1) entries of size bytes to the persistent
// ready counts when the entry of m (nil when paged out) and spilled is
// persistent.
func (q *Queue) persistReady(m *Message, spilled bool, size uint32, d int) {
	if q.countPersistent && persistentEntry(m, spilled) {
		q.pReady += d
		q.pReadyLen += int64(d) * int64(size)
	}
}

// persistPagedOut keeps the ready counts true to a ready entry of m paged
// out as spilled says, should the owner spill a persistent message or not
// spill a transient one.
func (q *Queue) persistPagedOut(m *Message, spilled bool, size uint32) {
	if persistentEntry(m, false) != persistentEntry(nil, spilled) {
		q.persistReady(m, false, size, -1)
		q.persistReady(nil, spilled, size, 1)
	}
}

// persistPagedIn is persistPagedOut the other way, for a ready entry
// paged out as spilled says that gets m back.
func (q *Queue) persistPagedIn(m *Message, spilled bool, size uint32) {
	if persistentEntry(nil, spilled) != persistentEntry(m, false) {
		q.persistReady(nil, spilled, size, -1)
		q.persistReady(m, false, size, 1)
	}
}

// persistAcked is persistReady for the unacknowledged counts.
func (q *Queue) persistAcked(m *Message, spilled bool, size uint32, d int) {
	if q.countPersistent && persistentEntry(m, spilled) {
		q.pAcked += d
		q.pAckedLen += int64(d) * int64(size)
	}
}
