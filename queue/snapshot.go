package queue

import (
	"encoding/binary"
	"errors"
	"slices"
)

// Snapshot and restore. A snapshot is the whole state of the queue as
// bytes: configuration, ready messages of every lane (with their bodies;
// a paged-out message is recorded without one, as its index), requeued
// messages, unacknowledged deliveries with their consumers, consumers in
// registration order with the round-robin positions, the publishers'
// sequences, the sequence counter, the expiry bookkeeping and the
// discards (at-least-once dead letters, discards.go). It is
// written in a fixed order (unacknowledged deliveries by id, publishers
// by id), so two queues in the same state give the same bytes. Consumer
// gates are this node's and are not recorded. Consumers must have
// distinct non-zero IDs for their deliveries to be told from basic.get's.

// ErrBadSnapshot means RestoreSnapshot was given bytes that are not a
// snapshot of this version.
var ErrBadSnapshot = errors.New("queue: bad snapshot")

// snapshotVersion 2 added Config.GroupHeader and the message groups,
// version 3 the deduplication cache (Config.DedupSize, DedupTTL and its
// keys), version 4 Config.DeadLetterAtLeastOnce and the discards
// (discards.go), version 5 the deduplication keys as their DedupHash
// (dedupcache.go) instead of strings; older snapshots are still read.
const snapshotVersion = 5

// AppendSnapshot appends the queue's state to b.
func (q *Queue) AppendSnapshot(b []byte) []byte {
	b = append(b, snapshotVersion)
	c := &q.cfg
	b = binary.AppendVarint(b, c.MessageTTL)
	b = binary.AppendVarint(b, c.MaxLength)
	b = binary.AppendVarint(b, c.MaxLengthBytes)
	b = append(b, byte(c.Overflow), c.MaxPriority, boolByte(c.SingleActiveConsumer), boolByte(c.DeadLetter))
	b = binary.AppendVarint(b, c.DeliveryLimit)
	b = binary.AppendVarint(b, c.Expires)
	b = appendString(b, c.GroupHeader)
	b = binary.AppendUvarint(b, uint64(c.DedupSize))
	b = binary.AppendVarint(b, c.DedupTTL)
	b = append(b, boolByte(c.DeadLetterAtLeastOnce))
	b = binary.AppendUvarint(b, q.nextSeq)
	b = binary.AppendUvarint(b, uint64(q.cursor))
	b = binary.AppendVarint(b, q.lastUsed)
	b = append(b, boolByte(q.expired))

	b = binary.AppendUvarint(b, uint64(len(q.consumers)))
	for _, c := range q.consumers {
		b = binary.AppendUvarint(b, uint64(c.ID))
		b = appendString(b, c.Tag)
		b = append(b, boolByte(c.NoAck), boolByte(c.Exclusive))
		b = binary.AppendVarint(b, int64(c.Prefetch))
		b = binary.AppendVarint(b, int64(c.Priority))
	}
	b = binary.AppendUvarint(b, uint64(len(q.groups)))
	for _, g := range q.groups {
		b = binary.AppendVarint(b, int64(g.prio))
		b = binary.AppendUvarint(b, uint64(g.cursor))
	}

	b = binary.AppendUvarint(b, uint64(len(q.hi)))
	q.lanes(func(l *lane) {
		b = binary.AppendUvarint(b, uint64(len(l.requeued)))
		for i := range l.requeued {
			b = appendSlot(b, &l.requeued[i])
		}
		holes := 0
		if l == &q.base {
			holes = q.holes
		}
		b = binary.AppendUvarint(b, uint64(l.ready.len()-holes))
		for i := 0; i < l.ready.len(); i++ {
			if !l.ready.at(i).taken() {
				s := l.ready.slotAt(i)
				b = appendSlot(b, &s)
			}
		}
	})

	seqs := q.held.appendSeqs(make([]uint64, 0, q.held.len()))
	slices.Sort(seqs)
	b = binary.AppendUvarint(b, uint64(len(seqs)))
	for _, seq := range seqs {
		h, _ := q.held.get(seq)
		var id ConsumerID
		if h.c != nil {
			id = h.c.ID
		}
		b = binary.AppendUvarint(b, uint64(id))
		b = appendSlot(b, &h.s)
	}

	pubs := make([]PublisherID, 0, len(q.pubs))
	for p := range q.pubs {
		pubs = append(pubs, p)
	}
	slices.Sort(pubs)
	b = binary.AppendUvarint(b, uint64(len(pubs)))
	for _, p := range pubs {
		b = binary.AppendUvarint(b, uint64(p))
		b = binary.AppendUvarint(b, q.pubs[p])
	}
	if q.mg != nil {
		b = q.mg.appendSnapshot(b, q.consumers)
	}
	if q.dedup != nil {
		b = q.dedup.appendSnapshot(b)
	}
	return q.appendDiscards(b)
}

// Snapshot returns the queue's state as bytes (AppendSnapshot).
func (q *Queue) Snapshot() []byte { return q.AppendSnapshot(nil) }

// RestoreSnapshot replaces the queue's state with the one b records. On
// error the queue is unchanged.
func (q *Queue) RestoreSnapshot(b []byte) error {
	r := &snapReader{b: b}
	version := r.byte()
	if version < 1 || version > snapshotVersion {
		return ErrBadSnapshot
	}
	var cfg Config
	cfg.MessageTTL = r.varint()
	cfg.MaxLength = r.varint()
	cfg.MaxLengthBytes = r.varint()
	cfg.Overflow = Overflow(r.byte())
	cfg.MaxPriority = r.byte()
	cfg.SingleActiveConsumer = r.bool()
	cfg.DeadLetter = r.bool()
	cfg.DeliveryLimit = r.varint()
	cfg.Expires = r.varint()
	if version >= 2 {
		cfg.GroupHeader = r.string()
	}
	if version >= 3 {
		cfg.DedupSize, cfg.DedupTTL = int(r.uvarint()), r.varint()
	}
	if version >= 4 {
		cfg.DeadLetterAtLeastOnce = r.bool()
	}
	n := NewWithConfig(cfg)
	n.nextSeq = r.uvarint()
	n.cursor = int(r.uvarint())
	n.lastUsed = r.varint()
	n.expired = r.bool()

	byID := make(map[ConsumerID]*Consumer)
	for range r.count() {
		c := &Consumer{ID: ConsumerID(r.uvarint()), Tag: r.string()}
		c.NoAck, c.Exclusive = r.bool(), r.bool()
		c.Prefetch, c.Priority = int(r.varint()), int(r.varint())
		if r.err != nil {
			return r.err
		}
		// Exclusivity was checked when they attached.
		n.consumers = append(n.consumers, c)
		if c.Priority != 0 {
			n.prioCount++
		}
		n.addToGroup(c)
		byID[c.ID] = c
	}
	if r.count() != len(n.groups) {
		return ErrBadSnapshot
	}
	for i := range n.groups {
		if int(r.varint()) != n.groups[i].prio {
			return ErrBadSnapshot
		}
		n.groups[i].cursor = int(r.uvarint())
	}

	if r.count() != len(n.hi) {
		return ErrBadSnapshot
	}
	n.lanes(func(l *lane) {
		for range r.count() {
			s := r.slot()
			l.requeued = append(l.requeued, s) // in heap order already
			n.countReady(l, s)
		}
		for range r.count() {
			s := r.slot()
			l.ready.push(s)
			n.countReady(l, s)
		}
	})

	for range r.count() {
		id := ConsumerID(r.uvarint())
		s := r.slot()
		var c *Consumer
		if id != 0 {
			c = byID[id]
			if c == nil {
				// Detached: its deliveries are still held.
				c = &Consumer{ID: id, gone: true}
				byID[id] = c
			}
		}
		n.hold(&s, c)
	}
	for range r.count() {
		p := PublisherID(r.uvarint())
		n.firstSend(p, r.uvarint())
	}
	if n.mg != nil && r.err == nil {
		if err := n.restoreGroups(r, byID); err != nil {
			return err
		}
	}
	if n.dedup != nil && r.err == nil {
		n.dedup.restore(r, version)
	}
	if version >= 4 && r.err == nil {
		n.restoreDiscards(r)
	}
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return ErrBadSnapshot
	}
	*q = *n
	return nil
}

// countReady adds s, put in lane l, to the ready counts.
func (q *Queue) countReady(l *lane, s slot) {
	if l != &q.base {
		q.hiReady++
	}
	q.readyLen += int64(s.size)
	q.persistReady(s.msg, s.flags&flagSpilled != 0, s.size, 1)
	if s.msg == nil {
		q.paged++
		q.pagedLen += int64(s.size)
	}
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

const (
	snapHasMsg     = 1
	snapSpilled    = 2
	snapPersistent = 4
)

func appendSlot(b []byte, s *slot) []byte {
	var f byte
	if s.msg != nil {
		f |= snapHasMsg
		if s.msg.Persistent {
			f |= snapPersistent
		}
	}
	if s.flags&flagSpilled != 0 {
		f |= snapSpilled
	}
	b = append(b, f)
	b = binary.AppendUvarint(b, s.seq)
	b = binary.AppendUvarint(b, s.meta)
	b = binary.AppendUvarint(b, uint64(s.size))
	if m := s.msg; m != nil {
		b = appendString(b, m.Exchange)
		b = appendString(b, m.RoutingKey)
		b = binary.AppendUvarint(b, uint64(len(m.Header)))
		b = append(b, m.Header...)
		b = binary.AppendUvarint(b, uint64(len(m.Body)))
		b = append(b, m.Body...)
		b = append(b, m.Priority)
	}
	return b
}

// snapReader decodes a snapshot; the first error sticks and every read
// after it returns zero values.
type snapReader struct {
	b   []byte
	err error
}

func (r *snapReader) fail() {
	if r.err == nil {
		r.err = ErrBadSnapshot
	}
	r.b = nil
}

func (r *snapReader) byte() byte {
	if len(r.b) == 0 {
		r.fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *snapReader) bool() bool { return r.byte() != 0 }

func (r *snapReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *snapReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a length, bounded by the bytes left (every element takes
// at least one).
func (r *snapReader) count() int {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return 0
	}
	return int(n)
}

func (r *snapReader) bytes() []byte {
	n := r.count()
	if r.err != nil {
		return nil
	}
	v := append([]byte(nil), r.b[:n]...)
	r.b = r.b[n:]
	return v
}

func (r *snapReader) string() string { return string(r.bytes()) }

func (r *snapReader) slot() slot {
	f := r.byte()
	s := slot{seq: r.uvarint(), meta: r.uvarint(), size: uint32(r.uvarint())}
	if f&snapSpilled != 0 {
		s.flags = flagSpilled
	}
	if f&snapHasMsg != 0 {
		m := &Message{Exchange: r.string(), RoutingKey: r.string()}
		m.Header = r.bytes()
		m.Body = r.bytes()
		m.Priority = r.byte()
		m.Persistent = f&snapPersistent != 0
		s.msg = m
	}
	return s
}
