package queue

import (
	"encoding/binary"
	"slices"
)

// At-least-once dead-lettering (x-dead-letter-strategy at-least-once, as
// RabbitMQ's quorum queues do it). A queue whose configuration asks for it
// (Config.AtLeastOnce: the strategy, a dead-letter exchange and overflow
// reject-publish) does not let its dead letters go: every EffDeadLetter
// that Apply reports is also kept in the queue's discards, in the order
// the queue decided them, with its reason and body (or, paged out, its
// index: the owner keeps the stored copy), and the effect is marked Held.
// The discards are replicated state: they are in snapshots and count
// against the length limits (x-max-length, x-max-length-bytes), as in
// RabbitMQ. The owner republishes them (on a replicated queue, the group's
// leader), and once the dead-letter targets have confirmed them it applies
// OpSettleDiscards with their ids: they leave the discards (EffSettled for
// each, so that a stored copy is deleted). Settling an id that is not
// there (settled already, by a leader before) is passed over.
//
// A configuration that stops asking for it (a policy changed) lets the
// discards go at once, at most once: EffDeadLetter, not Held.

// Discard is a dead letter kept until its targets confirm it.
type Discard struct {
	Entry  Entry
	Reason string
}

// discardSet is the discards of a queue, in the order they were decided.
type discardSet struct {
	list  []Discard
	bytes int64
}

// AtLeastOnce reports whether the configuration dead-letters at least
// once: the strategy asked for, a dead-letter exchange, and overflow
// reject-publish (RabbitMQ falls back to at-most-once otherwise).
func (c *Config) AtLeastOnce() bool {
	return c.DeadLetterAtLeastOnce && c.DeadLetter && c.Overflow == RejectPublish
}

// holdDiscards keeps the dead letters among out (with a message id) in
// the discards and marks them Held.
func (q *Queue) holdDiscards(out []Effect) {
	for i := range out {
		f := &out[i]
		if f.Kind != EffDeadLetter || f.Entry.Seq == 0 {
			continue
		}
		f.Held = true
		q.discards.list = append(q.discards.list, Discard{Entry: f.Entry, Reason: f.Reason})
		q.discards.bytes += int64(f.Entry.Size)
	}
}

// releaseDiscards lets every discard go at most once (EffDeadLetter, not
// Held): the configuration no longer asks for at-least-once.
func (q *Queue) releaseDiscards(out []Effect) []Effect {
	for _, d := range q.discards.list {
		out = append(out, Effect{Kind: EffDeadLetter, Reason: d.Reason, Entry: d.Entry})
	}
	q.discards = discardSet{}
	return out
}

// settleDiscards removes the discards with ids seqs (EffSettled for each
// found) and reports whether it found them all.
func (q *Queue) settleDiscards(seqs []uint64, out []Effect) ([]Effect, bool) {
	want := slices.Clone(seqs)
	slices.Sort(want)
	found := 0
	l := q.discards.list[:0]
	for _, d := range q.discards.list {
		if _, ok := slices.BinarySearch(want, d.Entry.Seq); ok {
			found++
			q.discards.bytes -= int64(d.Entry.Size)
			out = append(out, Effect{Kind: EffSettled, Entry: d.Entry})
			continue
		}
		l = append(l, d)
	}
	clear(q.discards.list[len(l):])
	q.discards.list = l
	return out, found == len(slices.Compact(want))
}

// Discards appends up to max of the queue's discards (oldest first) to
// out; max 0 is all of them. Their messages are shared: do not modify.
func (q *Queue) Discards(out []Discard, max int) []Discard {
	l := q.discards.list
	if max > 0 && len(l) > max {
		l = l[:max]
	}
	return append(out, l...)
}

// DiscardCount returns the number and body bytes of the discards: dead
// letters not yet confirmed by their targets (RabbitMQ's messages_dlx and
// message_bytes_dlx).
func (q *Queue) DiscardCount() (n int, bytes int64) {
	return len(q.discards.list), q.discards.bytes
}

// HasDiscards reports whether the queue keeps dead letters not yet
// settled.
func (q *Queue) HasDiscards() bool { return len(q.discards.list) > 0 }

// pageInDiscard gives discard seq its body back, and reports whether it
// had none.
func (q *Queue) pageInDiscard(seq uint64, m *Message) bool {
	for i := range q.discards.list {
		if e := &q.discards.list[i].Entry; e.Seq == seq && e.Msg == nil {
			e.Msg = m
			return true
		}
	}
	return false
}

// appendDiscards appends the discards to a snapshot.
func (q *Queue) appendDiscards(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(q.discards.list)))
	for i := range q.discards.list {
		d := &q.discards.list[i]
		b = appendString(b, d.Reason)
		s := slot{msg: d.Entry.Msg, seq: d.Entry.Seq, size: uint32(d.Entry.Size)}
		if d.Entry.Spilled {
			s.flags = flagSpilled
		}
		b = appendSlot(b, &s)
	}
	return b
}

// restoreDiscards reads the discards of a snapshot.
func (q *Queue) restoreDiscards(r *snapReader) {
	for range r.count() {
		reason := r.string()
		s := r.slot()
		if r.err != nil {
			return
		}
		e := Entry{Msg: s.msg, Seq: s.seq, Size: int(s.size), Spilled: s.flags&flagSpilled != 0}
		q.discards.list = append(q.discards.list, Discard{Entry: e, Reason: reason})
		q.discards.bytes += int64(e.Size)
	}
}
