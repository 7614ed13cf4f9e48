package queue

import (
	"encoding/binary"
	"slices"
)

// Stream snapshots. A stream snapshot is the replicated state of a stream
// as bytes: retention and segment size, the offsets (first retained,
// next, written, committed), the chunk index and its segments, the
// messages not yet committed (with their bodies: a replica restored from
// it must cut and write them the same way), and the named consumers'
// stored offsets, by name. Committed messages are not in it — they are in
// the chunks the store holds — nor is anything of this node's: cursors,
// the cache of committed messages, the offsets not yet persisted.

const streamSnapshotVersion = 1

// AppendStreamSnapshot appends the stream's replicated state to b.
func (s *Stream) AppendStreamSnapshot(b []byte) []byte {
	b = append(b, streamSnapshotVersion)
	b = binary.AppendVarint(b, s.cfg.MaxBytes)
	b = binary.AppendVarint(b, s.cfg.MaxAge)
	b = binary.AppendVarint(b, s.cfg.MaxSegmentBytes)
	b = binary.AppendUvarint(b, s.first)
	b = binary.AppendUvarint(b, s.next)
	b = binary.AppendUvarint(b, s.written)
	b = binary.AppendUvarint(b, s.committed)

	b = binary.AppendUvarint(b, uint64(len(s.segments)))
	for _, g := range s.segments {
		b = binary.AppendUvarint(b, g.id)
		b = binary.AppendUvarint(b, uint64(g.chunks))
		b = binary.AppendVarint(b, g.bytes)
		b = binary.AppendVarint(b, g.last)
	}
	b = binary.AppendUvarint(b, uint64(len(s.chunks)))
	for i := range s.chunks {
		c := &s.chunks[i]
		b = binary.AppendUvarint(b, c.First)
		b = binary.AppendUvarint(b, uint64(c.Count))
		b = binary.AppendVarint(b, c.Timestamp)
		b = binary.AppendVarint(b, c.Bytes)
		b = binary.AppendUvarint(b, c.Segment)
		b = append(b, boolByte(c.Unfiltered), boolByte(c.AnyFilter))
		b = binary.AppendUvarint(b, uint64(len(c.Filters)))
		for _, f := range c.Filters {
			b = appendString(b, f)
		}
	}

	// Uncommitted messages: [committed, next), all in the tail.
	b = binary.AppendUvarint(b, s.next-s.committed)
	for off := s.committed; off < s.next; off++ {
		e := &s.tail[s.tailHead+int(off-s.tailFirst)]
		m := e.Msg
		b = appendString(b, e.Filter)
		b = appendString(b, m.Exchange)
		b = appendString(b, m.RoutingKey)
		b = binary.AppendUvarint(b, uint64(len(m.Header)))
		b = append(b, m.Header...)
		b = binary.AppendUvarint(b, uint64(len(m.Body)))
		b = append(b, m.Body...)
		b = append(b, m.Priority, boolByte(m.Persistent))
	}

	names := make([]string, 0, len(s.named))
	for n := range s.named {
		names = append(names, n)
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = appendString(b, n)
		b = binary.AppendUvarint(b, s.named[n])
	}
	return b
}

// StreamSnapshot returns the stream's replicated state as bytes
// (AppendStreamSnapshot).
func (s *Stream) StreamSnapshot() []byte { return s.AppendStreamSnapshot(nil) }

// RestoreStreamSnapshot replaces the stream's replicated state with the
// one b records (ErrBadSnapshot, the stream unchanged, if b is not a
// stream snapshot of this version). What is this node's stays: the cache
// size, the partition and the cursors, which move to the first retained
// offset or the new end if theirs is no longer in the log; their
// read-ahead is dropped. No named offset awaits persisting after it.
func (s *Stream) RestoreStreamSnapshot(b []byte) error {
	r := &snapReader{b: b}
	if r.byte() != streamSnapshotVersion {
		return ErrBadSnapshot
	}
	cfg := StreamConfig{MaxBytes: r.varint(), MaxAge: r.varint(), MaxSegmentBytes: r.varint(), CacheBytes: s.cfg.CacheBytes}
	n := NewStream(cfg)
	n.first, n.next, n.written, n.committed = r.uvarint(), r.uvarint(), r.uvarint(), r.uvarint()
	if r.err == nil && !(n.first <= n.committed && n.committed <= n.written && n.written <= n.next) {
		return ErrBadSnapshot
	}
	for range r.count() {
		g := segmentInfo{id: r.uvarint(), chunks: int(r.uvarint()), bytes: r.varint(), last: r.varint()}
		n.segments = append(n.segments, g)
		n.bytes += g.bytes
	}
	for range r.count() {
		c := ChunkInfo{First: r.uvarint(), Count: uint32(r.uvarint()), Timestamp: r.varint(), Bytes: r.varint(),
			Segment: r.uvarint(), Unfiltered: r.bool(), AnyFilter: r.bool()}
		if k := r.count(); k > 0 {
			c.Filters = make([]string, 0, k)
			for range k {
				c.Filters = append(c.Filters, r.string())
			}
		}
		n.chunks = append(n.chunks, c)
	}
	if r.err != nil {
		return r.err
	}
	k := r.uvarint()
	if k != n.next-n.committed || k > uint64(len(r.b)) {
		return ErrBadSnapshot
	}
	n.tailFirst = n.committed
	for range k {
		e := StreamEntry{Offset: n.tailFirst + uint64(len(n.tail)), Filter: r.string()}
		m := &Message{Exchange: r.string(), RoutingKey: r.string()}
		m.Header = r.bytes()
		m.Body = r.bytes()
		m.Priority = r.byte()
		m.Persistent = r.bool()
		e.Msg = m
		n.tail = append(n.tail, e)
		n.pending += int64(m.Size())
	}
	for range r.count() {
		name := r.string()
		n.named[name] = r.uvarint()
	}
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return ErrBadSnapshot
	}
	n.partition = s.partition
	n.consumers = s.consumers
	for _, c := range n.consumers {
		c.Offset = min(max(c.Offset, n.first), n.next)
		c.buf, c.bufEnd, c.reading = nil, 0, false
	}
	*s = *n
	return nil
}
