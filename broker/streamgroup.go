package broker

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"

	"github.com/warrenmq/warren/queue"
)

// Replicated streams in data groups. A stream declared in a cluster with
// data groups is placed in one group like a quorum queue (placeQuorum) and
// its log is a queue.Stream in the group's state machine (QueueGroup),
// beside the group's quorum queues: every member applies the same stream
// commands, so every replica gives every message the same offset, cuts the
// same chunks and drops the same segments. Group commands of streams:
//
//	'S' key maxBytes maxAge maxSegmentBytes
//	                    create the stream (a no-op when it exists)
//	'T' key op ...      a stream command:
//	  'A' now n (publisher seq exchange routingKey header body)...
//	                    append the messages as one chunk written at now
//	                    (queue.StreamAppendChunk), skipping a message whose
//	                    publisher has a sequence as high applied already
//	  'O' name offset   store a named consumer's offset
//	  'R' now           apply retention at now (the leader's clock)
//	'D' key             delete it (as for a quorum queue)
//
// Each message's x-stream-offset header is set when it is applied (the
// same on every replica). Each replica writes the chunks it applies to its
// own node's store (as a single node's stream does, under a store id
// derived from the stream's key, replStreamStoreID) through the broker's
// writer of the group (streamhost.go), and consumers on the node read from
// the replica: from its in-memory tail, and from the store below what this
// node has written (stored). A group without a broker (tests) writes
// nothing and counts every chunk stored.
//
// The snapshot of a group holds, after its queues, its streams: count,
// then per stream (sorted by key) its key, queue.Stream's snapshot and the
// publishers' last sequences. Chunk data is not in it: a replica restored
// from a snapshot reads the chunks from before it from its own store, and
// fetches those its store lacks (a member that was far behind and was sent
// the leader's snapshot) from another member first (streamcatchup.go).

// Group command kinds of streams, and stream command ops.
const (
	groupStreamCreate = 'S'
	groupStreamCmd    = 'T'

	streamOpAppend = 'A'
	streamOpOffset = 'O'
	streamOpRetain = 'R'
)

// groupStream is a replicated stream in a data group: the replicated log
// and, for this node, where its chunks are stored and its consumers.
// Guarded by the group's mu.
type groupStream struct {
	key GroupQueueKey
	s   *queue.Stream
	// pubs is the last sequence applied per publisher (dedup).
	pubs map[uint64]uint64
	// sac are the single-active-consumer groups by name and partition
	// the stream's index in its super stream (streamsac.go).
	sac       map[string]*sacGroup
	partition int

	// This node's (not replicated):
	storeID uint64
	// stored: offsets below are in this node's store.
	stored uint64
	// gone is set once the stream is deleted or replaced by a restore.
	gone    bool
	effects []queue.StreamEffect
	scratch []queue.StreamDelivery
}

// replStreamStoreID is the store id of a replicated stream's chunks on
// every node: a hash of its key with the top bit set, apart from the
// queue ids of the node's own streams.
func replStreamStoreID(k GroupQueueKey) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(appendGroupKey(nil, k))
	return h.Sum64() | 1<<63
}

// GroupStreamCreateCmd is the group command creating stream k with cfg's
// retention and segment size.
func GroupStreamCreateCmd(k GroupQueueKey, cfg queue.StreamConfig) []byte {
	b := appendGroupKey([]byte{groupStreamCreate}, k)
	b = appendU(b, uint64(cfg.MaxBytes))
	b = appendU(b, uint64(cfg.MaxAge))
	return appendU(b, uint64(cfg.MaxSegmentBytes))
}

// streamAppend is one message of an append command.
type streamAppend struct {
	pub, seq uint64
	msg      *queue.Message
}

// appendStreamAppendCmd appends the command appending msgs to stream k as
// one chunk written at now.
func appendStreamAppendCmd(b []byte, k GroupQueueKey, now int64, msgs []streamAppend) []byte {
	b = appendGroupKey(append(b, groupStreamCmd), k)
	b = append(b, streamOpAppend)
	b = appendU(b, uint64(now))
	b = appendU(b, uint64(len(msgs)))
	for i := range msgs {
		a := &msgs[i]
		b = appendU(b, a.pub)
		b = appendU(b, a.seq)
		b = appendS(b, a.msg.Exchange)
		b = appendS(b, a.msg.RoutingKey)
		b = appendS(b, a.msg.Header)
		b = appendS(b, a.msg.Body)
	}
	return b
}

// GroupStreamOffsetCmd is the command storing off as the offset of the
// consumer named name of stream k.
func GroupStreamOffsetCmd(k GroupQueueKey, name string, off uint64) []byte {
	b := appendGroupKey([]byte{groupStreamCmd}, k)
	b = appendS(append(b, streamOpOffset), name)
	return appendU(b, off)
}

// GroupStreamRetainCmd is the command applying stream k's retention at
// now.
func GroupStreamRetainCmd(k GroupQueueKey, now int64) []byte {
	b := appendGroupKey([]byte{groupStreamCmd}, k)
	return appendU(append(b, streamOpRetain), uint64(now))
}

// applyStreamLocked applies a stream create or stream command to r.Key,
// whose arguments are d. Hold g.mu.
func (g *QueueGroup) applyStreamLocked(kind byte, r *GroupResult, d *linkDecoder) {
	if g.streams == nil {
		g.streams = make(map[GroupQueueKey]*groupStream)
	}
	gs := g.streams[r.Key]
	if kind == groupStreamCreate {
		cfg := queue.StreamConfig{CacheBytes: streamCacheBytes}
		cfg.MaxBytes, cfg.MaxAge, cfg.MaxSegmentBytes = int64(d.u()), int64(d.u()), int64(d.u())
		if d.err != nil {
			r.Err = ErrGroupCommand
			return
		}
		if gs == nil {
			g.streams[r.Key] = &groupStream{key: r.Key, s: queue.NewStream(cfg), pubs: map[uint64]uint64{},
				storeID: replStreamStoreID(r.Key)}
		}
		return
	}
	if gs == nil {
		r.Err = ErrGroupNoQueue
		return
	}
	var cmd queue.StreamCmd
	switch op := d.byte1(); op {
	case streamOpJoin, streamOpLeave:
		g.applySACLocked(gs, op, r, d)
		if g.host != nil && len(gs.s.Consumers()) > 0 {
			g.host.dispatchLocked(gs)
		}
		return
	case streamOpAppend:
		cmd = queue.StreamCmd{Op: queue.StreamAppendChunk, Now: int64(d.u())}
		n := d.u()
		// A message takes six bytes at the least (six varints).
		if d.err != nil || n > uint64(len(d.b))/6 {
			r.Err = ErrGroupCommand
			return
		}
		cmd.Entries = make([]queue.StreamEntry, 0, n)
		next := gs.s.NextOffset()
		// The messages of an append mostly share their exchange and
		// routing key: one string each for a run of equal ones.
		var ex, rk string
		// One allocation for the messages of the chunk, which live as
		// long as one another (the stream's cache holds chunks).
		msgs := make([]queue.Message, n)
		var headers []byte // their headers' arena (streamHeaderIn)
		for i := range n {
			pub, seq := d.u(), d.u()
			if b := d.raw(); string(b) != ex {
				ex = string(b)
			}
			if b := d.raw(); string(b) != rk {
				rk = string(b)
			}
			m := &msgs[i]
			m.Exchange, m.RoutingKey, m.Persistent = ex, rk, true
			header, body := d.raw(), d.raw()
			if d.err != nil {
				r.Err = ErrGroupCommand
				return
			}
			if pub != 0 {
				if last, ok := gs.pubs[pub]; ok && seq <= last {
					continue // applied already (a publish proposed twice)
				}
				gs.pubs[pub] = seq
			}
			var filter string
			m.Header, filter = streamHeaderIn(&headers, int(n-i), header, next)
			m.Body = body
			cmd.Entries = append(cmd.Entries, queue.StreamEntry{Msg: m, Filter: filter})
			next++
		}
		if len(cmd.Entries) == 0 {
			return
		}
	case streamOpOffset:
		cmd = queue.StreamCmd{Op: queue.StreamStoreOffset, Name: d.s(), Offset: d.u()}
	case streamOpRetain:
		cmd = queue.StreamCmd{Op: queue.StreamRetain, Now: int64(d.u())}
	default:
		r.Err = ErrGroupCommand
		return
	}
	if d.err != nil {
		r.Err = ErrGroupCommand
		return
	}
	effs, err := gs.s.Apply(&cmd, gs.effects[:0])
	if err != nil {
		r.Err = err
	}
	for i := range effs {
		switch f := &effs[i]; f.Kind {
		case queue.EffStreamWrite:
			if g.host == nil {
				gs.stored = f.Chunk.End()
			} else {
				g.host.write(gs, f.Chunk, f.Entries)
			}
		case queue.EffStreamRemove:
			if g.host != nil {
				g.host.remove(gs, f.Chunks)
			}
		}
	}
	clear(effs)
	gs.effects = effs[:0]
	if cmd.Op == queue.StreamStoreOffset {
		gs.s.TakeDirtyOffsets() // replicated state: nothing to write here
	}
	if g.host != nil && len(gs.s.Consumers()) > 0 {
		g.host.dispatchLocked(gs)
	}
}

// dropStreamLocked deletes stream k of the group. Hold g.mu.
func (g *QueueGroup) dropStreamLocked(k GroupQueueKey, gs *groupStream) {
	delete(g.streams, k)
	gs.gone = true
	if g.host != nil {
		g.host.drop(gs)
	}
}

// appendStreamsSnapshot appends the group's streams to a snapshot. Hold
// g.mu.
func (g *QueueGroup) appendStreamsSnapshot(b []byte) []byte {
	keys := slices.SortedFunc(maps.Keys(g.streams), compareKeys)
	b = appendU(b, uint64(len(keys)))
	for _, k := range keys {
		gs := g.streams[k]
		b = appendGroupKey(b, k)
		b = appendS(b, gs.s.StreamSnapshot())
		pubs := slices.Sorted(maps.Keys(gs.pubs))
		b = appendU(b, uint64(len(pubs)))
		for _, p := range pubs {
			b = appendU(appendU(b, p), gs.pubs[p])
		}
	}
	return g.appendSACSnapshot(b)
}

// restoreStreams decodes the streams of a group snapshot (none when b is
// empty: a snapshot from before streams).
func restoreStreams(b []byte) (map[GroupQueueKey]*groupStream, error) {
	out := map[GroupQueueKey]*groupStream{}
	if len(b) == 0 {
		return out, nil
	}
	d := linkDecoder{b: b}
	n := d.u()
	if d.err != nil || n > uint64(len(d.b)) {
		return nil, fmt.Errorf("%w: streams of the snapshot", ErrGroupCommand)
	}
	for range n {
		k := readGroupKey(&d)
		snap := d.raw()
		np := d.u()
		if d.err != nil || np > uint64(len(d.b)) {
			return nil, fmt.Errorf("%w: snapshot of stream %s", ErrGroupCommand, k)
		}
		gs := &groupStream{key: k, s: queue.NewStream(queue.StreamConfig{}), pubs: make(map[uint64]uint64, np),
			storeID: replStreamStoreID(k)}
		if err := gs.s.RestoreStreamSnapshot(snap); err != nil {
			return nil, fmt.Errorf("broker: data group snapshot of stream %s: %w", k, err)
		}
		gs.s.SetCacheBytes(streamCacheBytes)
		for range np {
			p := d.u()
			gs.pubs[p] = d.u()
		}
		if d.err != nil {
			return nil, fmt.Errorf("%w: snapshot of stream %s", ErrGroupCommand, k)
		}
		// Which chunks before the snapshot this node's store has is
		// found out by the catch-up (restoredStreamsLocked).
		out[k] = gs
	}
	if len(d.b) != 0 {
		// The consumer groups (none in a snapshot from before them).
		if restoreSAC(&d, out); d.err != nil {
			return nil, fmt.Errorf("%w: consumer groups of the snapshot", ErrGroupCommand)
		}
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the snapshot", ErrGroupCommand, len(d.b))
	}
	return out, nil
}

// adoptConsumersLocked moves this node's consumers of the streams of old
// (replaced by a restore) to the same streams of g. Hold g.mu.
func (g *QueueGroup) adoptConsumersLocked(old map[GroupQueueKey]*groupStream) {
	for k, o := range old {
		o.gone = true
		n := g.streams[k]
		for _, c := range slices.Clone(o.s.Consumers()) {
			o.s.RemoveConsumer(c)
			if n != nil {
				n.s.AddConsumer(c)
			}
		}
	}
	g.syncLocalLocked()
	for k := range old {
		if n := g.streams[k]; n != nil && g.host != nil {
			g.host.dispatchLocked(n)
		}
	}
}

// StreamOffsets returns this replica's view of stream k: first, next and
// committed offsets and the named consumers' stored offsets; ok is false
// when the group does not have it.
func (g *QueueGroup) StreamOffsets(k GroupQueueKey) (first, next, committed uint64, named map[string]uint64, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gs := g.streams[k]
	if gs == nil {
		return 0, 0, 0, nil, false
	}
	return gs.s.FirstOffset(), gs.s.NextOffset(), gs.s.CommittedOffset(), maps.Clone(gs.s.NamedOffsets()), true
}

// streamKeys returns the keys of the group's streams, sorted.
func (g *QueueGroup) streamKeys() []GroupQueueKey {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.SortedFunc(maps.Keys(g.streams), compareKeys)
}
