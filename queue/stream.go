package queue

import (
	"slices"
	"sort"
)

// Stream is a stream queue's state machine: an append-only log of messages
// with increasing offsets, grouped into chunks (a batch written together)
// and segments (runs of chunks, the unit of retention), read by any number
// of cursors (StreamConsumer) that each keep their own offset. Nothing is
// removed by consuming; acknowledgements only return credit.
//
// Like Queue it does no I/O and reads no clock: the broker appends
// messages, takes chunks to write (TakeChunk), reports them durable
// (Commit), feeds consumers that fell behind the in-memory tail with what it
// read from disk (Fill), and passes the time to retention (Retain). Only
// committed messages are delivered.
//
// Memory: the index is one ChunkInfo per chunk, never per message; message
// bodies are held only in the tail (the newest messages, at most
// StreamConfig.CacheBytes of committed ones, plus everything not yet
// committed) and in the read-ahead buffers of lagging consumers.
type Stream struct {
	cfg StreamConfig

	chunks   []ChunkInfo   // written chunks in offset order
	segments []segmentInfo // segments in order; the last is the active one
	bytes    int64         // body bytes in chunks

	first     uint64 // first offset retained
	next      uint64 // offset of the next message appended
	written   uint64 // offsets below are in chunks handed to the store
	committed uint64 // offsets below are durable and may be delivered

	// tail holds messages [tailFirst, next): uncommitted ones and the newest
	// committed ones.
	tail      []StreamEntry
	tailHead  int // tail[tailHead:] is live
	tailFirst uint64
	tailBytes int64 // body bytes of committed entries in tail
	pending   int64 // body bytes of uncommitted entries

	consumers []*StreamConsumer
	// partition is the stream's index in its super stream (SetPartition).
	partition int
	// more is set by a Dispatch that stopped a consumer at maxSkip with
	// more to look at: the caller should dispatch again soon.
	more bool
	// named is the acknowledged offset of each named consumer; dirty names
	// those changed since TakeDirtyOffsets.
	named map[string]uint64
	dirty map[string]struct{}
}

// StreamConfig is a stream's retention and memory configuration.
type StreamConfig struct {
	// MaxBytes is the retention by size (x-max-length-bytes): whole
	// segments are dropped, oldest first, while the log is larger (0 =
	// unlimited).
	MaxBytes int64
	// MaxAge is the retention by age in ms (x-max-age): a segment whose
	// newest chunk is older is dropped (0 = unlimited).
	MaxAge int64
	// MaxSegmentBytes is the size at which a new segment starts
	// (x-stream-max-segment-size-bytes; RabbitMQ's default is 500 MB).
	MaxSegmentBytes int64
	// CacheBytes is how many body bytes of committed messages the tail
	// keeps in memory for consumers near the end.
	CacheBytes int64
}

// DefaultMaxSegmentBytes is RabbitMQ's default segment size.
const DefaultMaxSegmentBytes = 500_000_000

// maxChunkFilters is how many distinct filter values a chunk's summary
// lists; a chunk with more may match any filter.
const maxChunkFilters = 16

// ChunkInfo describes one chunk: a batch of messages written together.
type ChunkInfo struct {
	First     uint64 // offset of its first message
	Count     uint32 // messages in it
	Timestamp int64  // when it was written, unix ms
	Bytes     int64  // body bytes of its messages
	Segment   uint64 // segment it belongs to
	// Filter summary: the distinct x-stream-filter-value values of its
	// messages (when at most maxChunkFilters), whether any message has
	// none, and whether there were too many to list.
	Filters    []string
	Unfiltered bool
	AnyFilter  bool
}

// End is the offset after the chunk's last message.
func (c *ChunkInfo) End() uint64 { return c.First + uint64(c.Count) }

// segmentInfo is a run of chunks retained or dropped together.
type segmentInfo struct {
	id     uint64
	chunks int   // chunks in it
	bytes  int64 // body bytes
	last   int64 // timestamp of its newest chunk
}

// StreamEntry is one message of the log.
type StreamEntry struct {
	Offset uint64
	Msg    *Message
	// Filter is the message's x-stream-filter-value ("" = none).
	Filter string
}

// StreamConsumer is a cursor on a stream: one basic.consume.
type StreamConsumer struct {
	Tag string
	// Prefetch is the consumer's credit: deliveries it may have
	// unacknowledged (always > 0 on streams).
	Prefetch int
	// Gate, when set, is asked before every delivery.
	Gate Gate
	// Owner is the caller's handle for the consumer.
	Owner any
	// Filters and MatchUnfiltered are x-stream-filter and
	// x-stream-match-unfiltered: with Filters set only messages whose
	// filter value is among them (and, with MatchUnfiltered, those without
	// one) are delivered.
	Filters         []string
	MatchUnfiltered bool
	// Name is x-stream-consumer-name: the acknowledged offset is tracked
	// under it, and with Single it names the consumer group.
	Name string
	// Single makes the consumer one of a single-active-consumer group: of
	// the consumers with the same Name only the first registered is
	// active; the others wait and take over in order.
	Single bool
	// Elected, with Single, leaves the choice of the group's active member
	// to the caller (SetActive): a replicated stream's groups are decided
	// by its data group, across nodes. Such a consumer is added waiting.
	Elected bool

	// Offset is the next offset to deliver.
	Offset  uint64
	unacked int
	active  bool
	// buf is read-ahead from disk for a consumer behind the tail; the
	// read looked at every chunk below bufEnd (those without an entry in
	// buf were skipped by the filter).
	buf    []StreamEntry
	bufEnd uint64
	// reading is set while the broker reads from disk for this consumer.
	reading bool
}

// Unacked is how many deliveries to c await acknowledgement.
func (c *StreamConsumer) Unacked() int { return c.unacked }

// Active reports whether c receives deliveries (false for a waiting
// member of a single-active-consumer group).
func (c *StreamConsumer) Active() bool { return c.active }

// StreamDelivery is one message handed to one consumer.
type StreamDelivery struct {
	Consumer *StreamConsumer
	Entry    StreamEntry
}

// ReadRequest asks the broker to read from disk for a consumer behind the
// tail: whole chunks from the one holding From, up to Limit (exclusive),
// then Fill.
type ReadRequest struct {
	Consumer *StreamConsumer
	From     uint64
	Limit    uint64
}

// NewStream returns an empty stream.
func NewStream(cfg StreamConfig) *Stream {
	if cfg.MaxSegmentBytes <= 0 {
		cfg.MaxSegmentBytes = DefaultMaxSegmentBytes
	}
	return &Stream{cfg: cfg, named: make(map[string]uint64), dirty: make(map[string]struct{})}
}

// SetConfig changes retention (a policy changed; the next Retain applies
// it) and the memory the tail may keep (applied at once).
func (s *Stream) SetConfig(cfg StreamConfig) {
	if cfg.MaxSegmentBytes <= 0 {
		cfg.MaxSegmentBytes = DefaultMaxSegmentBytes
	}
	s.cfg = cfg
	s.trimTail()
}

// Config is the stream's configuration.
func (s *Stream) Config() StreamConfig { return s.cfg }

// FirstOffset is the first offset retained; NextOffset the offset the next
// message will get; CommittedOffset the end of what is durable.
func (s *Stream) FirstOffset() uint64     { return s.first }
func (s *Stream) NextOffset() uint64      { return s.next }
func (s *Stream) CommittedOffset() uint64 { return s.committed }

// Messages is the number of messages retained.
func (s *Stream) Messages() uint64 { return s.next - s.first }

// Bytes is the body bytes of the messages written.
func (s *Stream) Bytes() int64 { return s.bytes }

// Segments is the number of segments.
func (s *Stream) Segments() int { return len(s.segments) }

// Chunks is the number of chunks written.
func (s *Stream) Chunks() int { return len(s.chunks) }

// PendingBytes is the body bytes appended and not yet committed.
func (s *Stream) PendingBytes() int64 { return s.pending }

// Append adds msg to the log and returns its offset. It is delivered once
// a chunk holding it is committed. It is StreamAppend without the Cmd
// value.
func (s *Stream) Append(msg *Message, filter string) uint64 { return s.append(msg, filter) }

func (s *Stream) append(msg *Message, filter string) uint64 {
	off := s.next
	s.next++
	s.pending += int64(msg.Size())
	s.tail = append(s.tail, StreamEntry{Offset: off, Msg: msg, Filter: filter})
	return off
}

// TakeChunk takes the next messages to write, at most maxBytes of bodies
// (at least one message), as a chunk timestamped now. ok is false when
// nothing waits. The entries slice is the caller's. It is StreamTakeChunk
// without the Cmd value.
func (s *Stream) TakeChunk(now, maxBytes int64) (ChunkInfo, []StreamEntry, bool) {
	return s.takeChunk(now, maxBytes)
}

// takeChunk is TakeChunk; a negative maxBytes takes every message waiting.
func (s *Stream) takeChunk(now, maxBytes int64) (ChunkInfo, []StreamEntry, bool) {
	i := s.tailHead + int(s.written-s.tailFirst)
	if i >= len(s.tail) {
		return ChunkInfo{}, nil, false
	}
	ci := ChunkInfo{First: s.written, Timestamp: now}
	j := i
	set := make(map[string]struct{})
	for j < len(s.tail) && (j == i || maxBytes < 0 || ci.Bytes+int64(s.tail[j].Msg.Size()) <= maxBytes) {
		e := &s.tail[j]
		ci.Bytes += int64(e.Msg.Size())
		if e.Filter == "" {
			ci.Unfiltered = true
		} else if !ci.AnyFilter {
			set[e.Filter] = struct{}{}
			if len(set) > maxChunkFilters {
				ci.AnyFilter = true
			}
		}
		j++
	}
	ci.Count = uint32(j - i)
	if !ci.AnyFilter && len(set) > 0 {
		ci.Filters = make([]string, 0, len(set))
		for f := range set {
			ci.Filters = append(ci.Filters, f)
		}
		sort.Strings(ci.Filters)
	}
	n := len(s.segments)
	if n == 0 || s.segments[n-1].bytes >= s.cfg.MaxSegmentBytes {
		var id uint64
		if n > 0 {
			id = s.segments[n-1].id + 1
		}
		s.segments = append(s.segments, segmentInfo{id: id})
		n++
	}
	ci.Segment = s.segments[n-1].id
	s.addChunk(ci)
	s.written = ci.End()
	return ci, slices.Clone(s.tail[i:j]), true
}

// addChunk indexes a written chunk in the current last segment.
func (s *Stream) addChunk(ci ChunkInfo) {
	s.chunks = append(s.chunks, ci)
	seg := &s.segments[len(s.segments)-1]
	seg.chunks++
	seg.bytes += ci.Bytes
	seg.last = max(seg.last, ci.Timestamp)
	s.bytes += ci.Bytes
}

// Restore indexes a chunk read back from the store at recovery, in offset
// order, before any Append.
func (s *Stream) Restore(ci ChunkInfo) {
	if n := len(s.segments); n == 0 || s.segments[n-1].id != ci.Segment {
		s.segments = append(s.segments, segmentInfo{id: ci.Segment})
	}
	if len(s.chunks) == 0 {
		s.first = ci.First
	}
	s.addChunk(ci)
	s.next, s.written, s.committed = ci.End(), ci.End(), ci.End()
	s.tailFirst, s.tail, s.tailHead = s.next, nil, 0
}

// RestoreOffset sets the acknowledged offset of a named consumer at
// recovery.
func (s *Stream) RestoreOffset(name string, off uint64) { s.named[name] = off }

// Commit records that every offset below end is durable and may be
// delivered, and trims the tail to its cache budget. It is StreamCommit
// without the Cmd value (and its check of end).
func (s *Stream) Commit(end uint64) { s.commit(end) }

func (s *Stream) commit(end uint64) {
	if end <= s.committed {
		return
	}
	for i := s.tailHead + int(s.committed-s.tailFirst); i < s.tailHead+int(end-s.tailFirst) && i < len(s.tail); i++ {
		s.tailBytes += int64(s.tail[i].Msg.Size())
		s.pending -= int64(s.tail[i].Msg.Size())
	}
	s.committed = end
	s.trimTail()
}

// Rewind drops every message at offset from and after it — the chunk at
// from could not be written, and nothing after it may be delivered or keep
// its offset — so that the next message appended gets offset from: a
// message that is not durable is never delivered and offsets keep no gap.
// Consumers waiting beyond from wait at from. from is the first offset of a
// chunk taken and not committed. Rewind returns the chunks dropped: later
// ones may have been written and are to be deleted. It is StreamRewind
// without the Cmd value.
func (s *Stream) Rewind(from uint64) []ChunkInfo { return s.rewind(from) }

func (s *Stream) rewind(from uint64) []ChunkInfo {
	if from < s.committed || from >= s.next {
		return nil
	}
	i := sort.Search(len(s.chunks), func(i int) bool { return s.chunks[i].First >= from })
	dropped := slices.Clone(s.chunks[i:])
	for j := len(dropped) - 1; j >= 0; j-- {
		ci := &dropped[j]
		s.bytes -= ci.Bytes
		seg := &s.segments[len(s.segments)-1]
		seg.chunks--
		seg.bytes -= ci.Bytes
		if seg.chunks == 0 {
			s.segments = s.segments[:len(s.segments)-1]
		}
	}
	clear(s.chunks[i:])
	s.chunks = s.chunks[:i]
	if n := len(s.segments); n > 0 {
		seg := &s.segments[n-1]
		seg.last = 0
		for j := i - 1; j >= 0 && s.chunks[j].Segment == seg.id; j-- {
			seg.last = max(seg.last, s.chunks[j].Timestamp)
		}
	}
	k := s.tailHead + int(from-s.tailFirst)
	for j := k; j < len(s.tail); j++ {
		s.pending -= int64(s.tail[j].Msg.Size())
	}
	clear(s.tail[k:])
	s.tail = s.tail[:k]
	s.next, s.written = from, from
	for _, c := range s.consumers {
		c.Offset = min(c.Offset, from)
	}
	return dropped
}

// trimTail drops committed entries from the front of the tail while it is
// over budget, and entries below the first offset.
func (s *Stream) trimTail() {
	for s.tailHead < len(s.tail) && s.tailFirst < s.committed &&
		(s.tailBytes > s.cfg.CacheBytes || s.tailFirst < s.first) {
		s.tailBytes -= int64(s.tail[s.tailHead].Msg.Size())
		s.tail[s.tailHead] = StreamEntry{}
		s.tailHead++
		s.tailFirst++
	}
	if s.tailHead > 1024 && s.tailHead*2 > len(s.tail) {
		n := copy(s.tail, s.tail[s.tailHead:])
		clear(s.tail[n:])
		s.tail = s.tail[:n]
		s.tailHead = 0
	}
}

// Retain drops whole segments, oldest first, while the log is over
// MaxBytes or its oldest segment is older than MaxAge at now; the active
// (last) segment is always kept. It returns the dropped chunks (to delete
// from the store) and moves the first offset forward. It is StreamRetain
// without the Cmd value.
func (s *Stream) Retain(now int64) []ChunkInfo { return s.retain(now) }

func (s *Stream) retain(now int64) []ChunkInfo {
	var dropped []ChunkInfo
	for len(s.segments) > 1 {
		seg := s.segments[0]
		bySize := s.cfg.MaxBytes > 0 && s.bytes > s.cfg.MaxBytes
		byAge := s.cfg.MaxAge > 0 && seg.last < now-s.cfg.MaxAge
		if !bySize && !byAge {
			break
		}
		dropped = append(dropped, s.chunks[:seg.chunks]...)
		s.chunks = slices.Delete(s.chunks, 0, seg.chunks)
		s.segments = slices.Delete(s.segments, 0, 1)
		s.bytes -= seg.bytes
		s.first = s.chunks[0].First
	}
	if len(dropped) > 0 {
		s.trimTail()
	}
	return dropped
}

// OffsetSpec is where a new consumer starts (x-stream-offset).
type OffsetSpec struct {
	Kind   OffsetKind
	Offset uint64 // OffsetAbsolute
	Time   int64  // OffsetTimestamp: unix ms
}

// OffsetKind is the kind of an OffsetSpec.
type OffsetKind uint8

// The kinds of x-stream-offset.
const (
	OffsetNext OffsetKind = iota
	OffsetFirst
	OffsetLast
	OffsetAbsolute
	OffsetTimestamp
)

// Resolve turns spec into an offset: first, last (the first offset of the
// last chunk written), next (the end of the log), an offset (clamped to
// the log) or a time (the first chunk written at or after it).
func (s *Stream) Resolve(spec OffsetSpec) uint64 {
	switch spec.Kind {
	case OffsetFirst:
		return s.first
	case OffsetLast:
		if n := len(s.chunks); n > 0 {
			return s.chunks[n-1].First
		}
		return s.next
	case OffsetAbsolute:
		return min(max(spec.Offset, s.first), s.next)
	case OffsetTimestamp:
		i := sort.Search(len(s.chunks), func(i int) bool { return s.chunks[i].Timestamp >= spec.Time })
		if i < len(s.chunks) {
			return s.chunks[i].First
		}
		return s.written
	}
	return s.next
}

// NamedOffset is the acknowledged offset stored for name.
func (s *Stream) NamedOffset(name string) (uint64, bool) {
	off, ok := s.named[name]
	return off, ok
}

// NamedOffsets lists the named consumers' acknowledged offsets.
func (s *Stream) NamedOffsets() map[string]uint64 { return s.named }

// TakeDirtyOffsets returns the named offsets changed since the last call.
func (s *Stream) TakeDirtyOffsets() map[string]uint64 {
	if len(s.dirty) == 0 {
		return nil
	}
	out := make(map[string]uint64, len(s.dirty))
	for n := range s.dirty {
		out[n] = s.named[n]
	}
	clear(s.dirty)
	return out
}

// AddConsumer registers c, which starts at c.Offset. A Single consumer
// joins its group (the Single consumers with its Name), of which one
// member is active (rebalance).
func (s *Stream) AddConsumer(c *StreamConsumer) {
	c.active = !c.Single
	s.consumers = append(s.consumers, c)
	if c.Single && !c.Elected {
		s.rebalance(c.Name, c)
	}
}

// SetActive makes c, an Elected consumer, active or waiting; with seek
// an active c (re)starts at offset from, kept within the log (a member
// taking over from another resumes after the group's stored offset).
func (s *Stream) SetActive(c *StreamConsumer, active, seek bool, from uint64) {
	if c.active != active {
		c.active = active
		c.buf = nil
	}
	if active && seek {
		c.Offset = min(max(from, s.first), s.next)
		c.buf = nil
	}
}

// RemoveConsumer unregisters c; its group, if any, is rebalanced.
func (s *Stream) RemoveConsumer(c *StreamConsumer) {
	i := slices.Index(s.consumers, c)
	if i < 0 {
		return
	}
	s.consumers = slices.Delete(s.consumers, i, i+1)
	c.buf = nil
	c.active = false
	if c.Single && !c.Elected {
		s.rebalance(c.Name, nil)
	}
}

// SetPartition sets the stream's position among the partitions of its
// super stream (x-stream-partition-order), which spreads the active
// members of consumer groups over the partitions; 0 for a plain stream.
func (s *Stream) SetPartition(i int) { s.partition = max(i, 0) }

// rebalance makes one member of group name active, as RabbitMQ does for
// super stream consumer groups: in registration order, member number
// partition mod members, so that a group whose members all consume every
// partition has its partitions spread over them (on a plain stream, the
// first member). A member taking over from another, or after the active
// one left, starts after the group's acknowledged offset when one is
// stored; a consumer that joins a group without an active member starts
// where it asked. joined is the consumer just added, if any.
func (s *Stream) rebalance(name string, joined *StreamConsumer) {
	var members []*StreamConsumer
	hadActive := false
	for _, c := range s.consumers {
		if c.Single && c.Name == name {
			members = append(members, c)
			hadActive = hadActive || c.active
		}
	}
	if len(members) == 0 {
		return
	}
	want := members[s.partition%len(members)]
	for _, m := range members {
		switch {
		case m == want && !m.active:
			m.active = true
			if off, ok := s.named[name]; ok && (hadActive || m != joined) {
				m.Offset = off + 1
				m.buf = nil
			}
		case m != want && m.active:
			m.active = false
			m.buf = nil
		}
	}
}

// Consumers lists the registered consumers.
func (s *Stream) Consumers() []*StreamConsumer { return s.consumers }

// Settle acknowledges n deliveries to c (credit back); last is the highest
// offset among them, stored for a named consumer (StreamStoreOffset).
func (s *Stream) Settle(c *StreamConsumer, n int, last uint64) {
	c.unacked = max(c.unacked-n, 0)
	if c.Name != "" {
		s.storeOffset(c.Name, last)
	}
}

// Return gives back credit for n deliveries without storing an offset (a
// rejected or requeued delivery: streams cannot requeue; or an ack whose
// offset the owner stores with StreamStoreOffset).
func (s *Stream) Return(c *StreamConsumer, n int) { c.unacked = max(c.unacked-n, 0) }

// Fill hands c what the broker read from disk for its ReadRequest from
// offset from: entries in offset order and the offset where the read
// stopped (chunks skipped by the filter are passed over). A read made
// stale by a move of the consumer (a group takeover) is dropped.
func (s *Stream) Fill(c *StreamConsumer, from uint64, entries []StreamEntry, end uint64) {
	c.reading = false
	if c.Offset != from {
		return
	}
	c.buf, c.bufEnd = entries, end
	if len(entries) == 0 && end > c.Offset {
		c.Offset = end
	}
}

// ChunkMatches reports whether a chunk with summary ci may hold messages
// for c.
func (c *StreamConsumer) ChunkMatches(ci *ChunkInfo) bool {
	if len(c.Filters) == 0 || ci.AnyFilter || (ci.Unfiltered && c.MatchUnfiltered) {
		return true
	}
	for _, f := range c.Filters {
		if _, ok := slices.BinarySearch(ci.Filters, f); ok {
			return true
		}
	}
	return false
}

func (c *StreamConsumer) matches(e *StreamEntry) bool {
	if len(c.Filters) == 0 {
		return true
	}
	if e.Filter == "" {
		return c.MatchUnfiltered
	}
	return slices.Contains(c.Filters, e.Filter)
}

// maxSkip bounds the filtered-out messages one Dispatch passes over per
// consumer, so that the caller's lock is not held for long.
const maxSkip = 4096

// Dispatch hands committed messages to consumers with credit, appending
// them to out, and appends to reads the consumers that need a disk read.
func (s *Stream) Dispatch(out []StreamDelivery, reads []ReadRequest) ([]StreamDelivery, []ReadRequest) {
	s.more = false
	for _, c := range s.consumers {
		if !c.active {
			continue
		}
		skipped := 0
		for c.unacked < c.Prefetch && skipped < maxSkip {
			if c.Offset < s.first {
				c.Offset = s.first
			}
			if c.Offset >= s.committed {
				break
			}
			var e StreamEntry
			switch {
			case len(c.buf) > 0:
				for len(c.buf) > 0 && c.buf[0].Offset < c.Offset {
					c.buf[0] = StreamEntry{}
					c.buf = c.buf[1:]
				}
				if len(c.buf) == 0 {
					c.buf = nil
					if c.Offset < c.bufEnd {
						c.Offset = c.bufEnd // the rest of the read was filtered out
					}
					continue
				}
				// Offsets between are in chunks the filter skipped.
				c.Offset = c.buf[0].Offset
				e = c.buf[0]
			case c.Offset >= s.tailFirst:
				e = s.tail[s.tailHead+int(c.Offset-s.tailFirst)]
			default:
				if !c.reading {
					c.reading = true
					reads = append(reads, ReadRequest{Consumer: c, From: c.Offset, Limit: s.tailFirst})
				}
			}
			if e.Msg == nil {
				break
			}
			if !c.matches(&e) {
				skipped++
				if len(c.buf) == 0 {
					// In the tail: skip the rest of a chunk that cannot match.
					if ci := s.chunkAt(c.Offset); ci != nil && !c.ChunkMatches(ci) {
						c.Offset = ci.End()
						continue
					}
				}
				c.Offset++
				continue
			}
			if c.Gate != nil && !c.Gate.Acquire(e.Msg.Size()) {
				break
			}
			if len(c.buf) > 0 {
				c.buf[0] = StreamEntry{}
				c.buf = c.buf[1:]
				if len(c.buf) == 0 {
					c.buf = nil
					c.Offset = max(c.Offset+1, c.bufEnd)
					c.unacked++
					out = append(out, StreamDelivery{Consumer: c, Entry: e})
					continue
				}
			}
			c.Offset++
			c.unacked++
			out = append(out, StreamDelivery{Consumer: c, Entry: e})
		}
		if skipped >= maxSkip {
			s.more = true
		}
	}
	return out, reads
}

// More reports whether the last Dispatch left work undone (a filtering
// consumer passed over maxSkip messages): dispatch again.
func (s *Stream) More() bool { return s.more }

// chunkAt is the chunk holding off, or nil.
func (s *Stream) chunkAt(off uint64) *ChunkInfo {
	if i := s.chunkAtIndex(off); i >= 0 {
		return &s.chunks[i]
	}
	return nil
}

// chunkAtIndex is the index of the chunk holding off, or -1.
func (s *Stream) chunkAtIndex(off uint64) int {
	i := sort.Search(len(s.chunks), func(i int) bool { return s.chunks[i].End() > off })
	if i < len(s.chunks) && s.chunks[i].First <= off {
		return i
	}
	return -1
}

// ChunkInfos returns a copy of the index entries of the chunks holding
// offsets in [from, to), in order.
func (s *Stream) ChunkInfos(from, to uint64) []ChunkInfo {
	i := sort.Search(len(s.chunks), func(i int) bool { return s.chunks[i].End() > from })
	var out []ChunkInfo
	for ; i < len(s.chunks) && s.chunks[i].First < to; i++ {
		out = append(out, s.chunks[i])
	}
	return out
}

// ChunkFor is the first offset of the chunk holding off (off itself when
// no chunk does).
func (s *Stream) ChunkFor(off uint64) uint64 {
	i := sort.Search(len(s.chunks), func(i int) bool { return s.chunks[i].End() > off })
	if i < len(s.chunks) && s.chunks[i].First <= off {
		return s.chunks[i].First
	}
	return off
}
