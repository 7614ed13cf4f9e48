package queue

import (
	"errors"
	"slices"
)

// Stream commands and effects. A stream's replicated state is its log:
// the messages appended and the offsets they got, how they are cut into
// chunks and segments (with the time each chunk was written), what is
// committed, what retention dropped, and the named consumers' stored
// offsets. All of it changes through a StreamCmd applied with
// Stream.Apply, whose time is in the command (Now) — retention by age
// drops the same segments on every replica — and whose effects (the chunk
// to write, the chunks to delete, the offset a message got) come back as
// values. StreamSnapshot / RestoreStreamSnapshot carry that state
// (stream_snapshot.go); stream_determinism_test.go checks that a command
// log replays to the same state and effects.
//
// What is not replicated state, as Consumer.Gate and paging are not for a
// Queue: the cursors (StreamConsumer: offset, credit, filters, read-ahead,
// single-active-consumer groups), which read the log on the node they
// consume from and are added, fed (Fill) and dispatched to (Dispatch) by
// typed methods; the in-memory cache of committed messages
// (StreamConfig.CacheBytes, SetCacheBytes), sized by this node's memory;
// and the set of named offsets not yet written to this node's store
// (TakeDirtyOffsets).

// StreamOp is what a stream command does.
type StreamOp uint8

// The stream commands.
const (
	// StreamAppend appends Msg with filter value Filter; EffStreamAppended
	// gives the offset it got. It is delivered once committed.
	StreamAppend StreamOp = iota + 1
	// StreamTakeChunk cuts the next appended messages, at most MaxBytes of
	// bodies (at least one message), into a chunk written at Now:
	// EffStreamWrite asks the owner to write it. Nothing appended, no
	// effect.
	StreamTakeChunk
	// StreamCommit records that every offset below Offset (at most the end
	// of the chunks taken) is durable and may be delivered.
	StreamCommit
	// StreamRewind drops the chunk taken at Offset, not committed (its
	// write failed), and everything after it; the next message appended
	// gets Offset. EffStreamRemove lists the chunks dropped.
	StreamRewind
	// StreamRetain applies retention at Now: whole segments, oldest first,
	// while the log is over MaxBytes or its oldest segment is older than
	// MaxAge; the active segment stays. EffStreamRemove lists the chunks
	// dropped.
	StreamRetain
	// StreamStoreOffset stores Offset as the acknowledged offset of the
	// consumer named Name, unless a higher one is stored.
	StreamStoreOffset
	// StreamSetConfig applies the retention and segment size of Config (a
	// policy changed; the next StreamRetain applies it). Config.CacheBytes
	// is ignored: the cache is this node's (SetCacheBytes).
	StreamSetConfig
	// StreamAppendChunk appends Entries' messages (their Msg and Filter;
	// Offset is ignored) as one chunk written at Now and commits it:
	// EffStreamAppended for each, then EffStreamWrite. It is the form a
	// replicated log carries (the log's commit is the durability); it is
	// refused with ErrStreamPending while messages appended by StreamAppend
	// are not committed.
	StreamAppendChunk
)

// StreamCmd is one stream command. Which fields count depends on Op.
type StreamCmd struct {
	Op  StreamOp
	Now int64

	// Append.
	Msg    *Message
	Filter string
	// AppendChunk.
	Entries []StreamEntry
	// TakeChunk.
	MaxBytes int64
	// Commit, rewind, store offset.
	Offset uint64
	// StoreOffset.
	Name string
	// SetConfig.
	Config StreamConfig
}

// StreamEffectKind is what a stream effect asks of the owner.
type StreamEffectKind uint8

// The stream effects.
const (
	// EffStreamAppended: the message appended got offset Offset.
	EffStreamAppended StreamEffectKind = iota + 1
	// EffStreamWrite: write chunk Chunk holding Entries (the slice is the
	// owner's), then commit it.
	EffStreamWrite
	// EffStreamRemove: delete the chunks Chunks from the store.
	EffStreamRemove
)

// StreamEffect is one thing the owner must do after Stream.Apply.
type StreamEffect struct {
	Kind    StreamEffectKind
	Offset  uint64
	Chunk   ChunkInfo
	Entries []StreamEntry
	Chunks  []ChunkInfo
}

// ErrStreamPending means StreamAppendChunk was applied while messages
// appended one by one wait to be committed.
var ErrStreamPending = errors.New("queue: stream has uncommitted messages")

// ErrStreamOffset means a commit named an offset not yet taken into a
// chunk, or a rewind one that is not the start of a chunk taken and not
// committed.
var ErrStreamOffset = errors.New("queue: no such uncommitted chunk")

// Apply applies cmd to the stream and appends its effects to out. A
// refused command (ErrStreamPending, ErrStreamOffset, ErrUnknownCommand)
// changes nothing; refusals are deterministic too.
func (s *Stream) Apply(cmd *StreamCmd, out []StreamEffect) ([]StreamEffect, error) {
	switch cmd.Op {
	case StreamAppend:
		off := s.append(cmd.Msg, cmd.Filter)
		return append(out, StreamEffect{Kind: EffStreamAppended, Offset: off}), nil
	case StreamTakeChunk:
		if ci, entries, ok := s.takeChunk(cmd.Now, cmd.MaxBytes); ok {
			out = append(out, StreamEffect{Kind: EffStreamWrite, Chunk: ci, Entries: entries})
		}
		return out, nil
	case StreamCommit:
		if cmd.Offset > s.written {
			return out, ErrStreamOffset
		}
		s.commit(cmd.Offset)
		return out, nil
	case StreamRewind:
		i := s.chunkStarting(cmd.Offset)
		if cmd.Offset < s.committed || i < 0 {
			return out, ErrStreamOffset
		}
		if dropped := s.rewind(cmd.Offset); len(dropped) > 0 {
			out = append(out, StreamEffect{Kind: EffStreamRemove, Chunks: dropped})
		}
		return out, nil
	case StreamRetain:
		if dropped := s.retain(cmd.Now); len(dropped) > 0 {
			out = append(out, StreamEffect{Kind: EffStreamRemove, Chunks: dropped})
		}
		return out, nil
	case StreamStoreOffset:
		s.storeOffset(cmd.Name, cmd.Offset)
		return out, nil
	case StreamSetConfig:
		cfg := cmd.Config
		cfg.CacheBytes = s.cfg.CacheBytes
		s.SetConfig(cfg)
		return out, nil
	case StreamAppendChunk:
		if s.next != s.committed || len(cmd.Entries) == 0 {
			return out, ErrStreamPending
		}
		for i := range cmd.Entries {
			off := s.append(cmd.Entries[i].Msg, cmd.Entries[i].Filter)
			out = append(out, StreamEffect{Kind: EffStreamAppended, Offset: off})
		}
		ci, entries, _ := s.takeChunk(cmd.Now, -1)
		s.commit(ci.End())
		return append(out, StreamEffect{Kind: EffStreamWrite, Chunk: ci, Entries: entries}), nil
	}
	return out, ErrUnknownCommand
}

// chunkStarting is the index of the chunk whose first offset is off, or
// -1.
func (s *Stream) chunkStarting(off uint64) int {
	i, ok := slices.BinarySearchFunc(s.chunks, off, func(c ChunkInfo, off uint64) int {
		switch {
		case c.First < off:
			return -1
		case c.First > off:
			return 1
		}
		return 0
	})
	if !ok {
		return -1
	}
	return i
}

// storeOffset stores off for the consumer named name unless a higher
// offset is stored, and marks it for TakeDirtyOffsets.
func (s *Stream) storeOffset(name string, off uint64) {
	if cur, ok := s.named[name]; !ok || off > cur {
		s.named[name] = off
		s.dirty[name] = struct{}{}
	}
}

// SetCacheBytes sets how many body bytes of committed messages the
// in-memory tail keeps (this node's memory, not replicated state), and
// trims the tail to it at once.
func (s *Stream) SetCacheBytes(n int64) {
	s.cfg.CacheBytes = n
	s.trimTail()
}
