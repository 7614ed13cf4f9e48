package queue

import "slices"

// HeldBy appends to seqs the ids of the unacknowledged deliveries to
// consumers whose ids match (id&mask == value), sorted, and returns it. A
// replicated queue returns the deliveries of the consumers of a node that
// is gone with it (the consumers' ids name their node).
func (q *Queue) HeldBy(mask, value ConsumerID, seqs []uint64) []uint64 {
	start := len(seqs)
	h := &q.held
	for i := h.head; i < len(h.list); i++ {
		if x := &h.list[i]; !x.hole() && x.c != nil && x.c.ID&mask == value {
			seqs = append(seqs, x.s.seq)
		}
	}
	for seq, x := range h.late {
		if x.c != nil && x.c.ID&mask == value {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs[start:])
	return seqs
}

// ConsumerIDs appends the ids of the queue's consumers, in registration
// order, to ids and returns it.
func (q *Queue) ConsumerIDs(ids []ConsumerID) []ConsumerID {
	for _, c := range q.consumers {
		ids = append(ids, c.ID)
	}
	return ids
}

// HolderIDs appends the ids of the consumers holding unacknowledged
// deliveries (one per delivery; detached consumers too) to ids and
// returns it.
func (q *Queue) HolderIDs(ids []ConsumerID) []ConsumerID {
	h := &q.held
	for i := h.head; i < len(h.list); i++ {
		if x := &h.list[i]; !x.hole() && x.c != nil {
			ids = append(ids, x.c.ID)
		}
	}
	for _, x := range h.late {
		if x.c != nil {
			ids = append(ids, x.c.ID)
		}
	}
	return ids
}
