package broker

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
	"github.com/warrenmq/warren/store"
)

// Chunk catch-up of replicated streams. A group snapshot holds a stream's
// index, not its chunks (streamgroup.go): a member that restores one (it
// was far behind and the leader sent its snapshot, or it restarts from
// its own snapshot) may lack chunks below it in its store. Restore sets
// the stream's stored mark to its first offset and queues a catch-up job
// on the group's streamHost, ahead of the writes of every chunk applied
// after the snapshot: the job lists the chunks this node's store has,
// drops those retention removed meanwhile, and fetches the missing ones
// from another member of the group over the node link (lkStreamRead, read
// there from that member's store below its own stored mark), writes them,
// and then moves stored to the snapshot's committed offset. Consumers on
// this node read only below stored, so they wait for the catch-up rather
// than skip offsets. While no member can answer (down, or catching up
// itself) the job retries every streamCatchUpRetry; the group's later
// chunk writes on this node wait behind it.

// streamCatchUpRetry is the pause between rounds of a catch-up that found
// no member to fetch from.
const streamCatchUpRetry = 500 * time.Millisecond

var (
	// errStreamFetch is a fetch no member of the group answered.
	errStreamFetch = errors.New("broker: no member has the stream's chunks")
)

// restoredStreamsLocked queues the catch-up of the streams a restore
// brought. Hold g.mu.
func (g *QueueGroup) restoredStreamsLocked() {
	for _, gs := range g.streams {
		if g.host == nil {
			gs.stored = gs.s.CommittedOffset()
			continue
		}
		gs.stored = gs.s.FirstOffset()
		g.host.queue(streamJob{gs: gs, catchUp: gs.s.CommittedOffset()})
	}
}

// catchUp makes this node's store hold every chunk of gs below end, then
// moves its stored mark there. Run by h.run, no lock held.
func (h *streamHost) catchUp(gs *groupStream, end uint64) {
	st := h.b.cfg.Store
	if st != nil {
		h.fillChunks(st, gs, end)
	}
	h.m.mu.Lock()
	if end > gs.stored {
		gs.stored = end
	}
	h.dispatchLocked(gs)
	h.m.mu.Unlock()
}

// fillChunks fetches and writes the chunks of gs below end its store
// lacks, until done, the stream is gone or the broker closes.
func (h *streamHost) fillChunks(st *store.Store, gs *groupStream, end uint64) {
	firsts, err := st.StreamChunkFirsts(gs.storeID)
	if err != nil {
		h.b.log.Error("listing replicated stream chunks", zap.Stringer("stream", gs.key), zap.Error(err))
		return
	}
	h.m.mu.Lock()
	first := gs.s.FirstOffset()
	chunks := gs.s.ChunkInfos(first, end)
	h.m.mu.Unlock()
	var stale []uint64
	for _, f := range firsts {
		if f < first {
			stale = append(stale, f)
		}
	}
	if len(stale) > 0 {
		st.RemoveStreamChunks(gs.storeID, stale)
	}
	var missing []queue.ChunkInfo
	for _, c := range chunks {
		if _, ok := slices.BinarySearch(firsts, c.First); !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return
	}
	h.b.log.Info("fetching replicated stream chunks from the group", zap.Stringer("stream", gs.key),
		zap.Int("chunks", len(missing)), zap.Uint64("from", missing[0].First), zap.Uint64("to", missing[len(missing)-1].End()))
	r := &h.b.repl
	for len(missing) > 0 {
		n, err := h.fetchChunks(st, gs, missing)
		missing = missing[n:]
		if len(missing) == 0 {
			return
		}
		h.m.mu.Lock()
		gone := gs.gone
		h.m.mu.Unlock()
		if gone {
			return
		}
		if n == 0 {
			h.b.log.Warn("replicated stream catch-up: retrying", zap.Stringer("stream", gs.key),
				zap.Uint64("from", missing[0].First), zap.Error(err))
			t := time.NewTimer(streamCatchUpRetry)
			select {
			case <-r.done:
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// fetchChunks reads the chunks missing (in order) from a member of the
// group, from the first on, writes those it got and waits for the
// writes. It returns how many of missing it dealt with (written, or gone
// from the member's log too).
func (h *streamHost) fetchChunks(st *store.Store, gs *groupStream, missing []queue.ChunkInfo) (int, error) {
	self := h.b.cfg.NodeName
	var members []string
	for _, g := range h.b.cfg.QuorumGroups.Groups() {
		if g.ID == h.group {
			members = g.Members
		}
	}
	err := errStreamFetch
	for _, node := range members {
		if node == self || !h.b.cfg.QuorumGroups.Alive(node) {
			continue
		}
		p := h.b.peer(node)
		if p == nil {
			return 0, errStreamFetch
		}
		p.awaitFirst()
		from, limit := missing[0].First, missing[len(missing)-1].End()
		rep := p.call(lkStreamRead, &linkWaiter{}, func(b []byte, id uint64) []byte {
			b = appendU(appendU(b, id), h.group)
			b = appendS(appendS(b, gs.key.VHost), gs.key.Name)
			b = appendU(b, gs.key.ID)
			return appendU(appendU(b, from), limit)
		})
		if rep.err != nil {
			err = fmt.Errorf("%s: %w", node, rep.err)
			continue
		}
		n, werr := h.writeFetched(st, gs, missing, rep.data)
		if werr != nil {
			err = fmt.Errorf("%s: %w", node, werr)
			continue
		}
		if n > 0 {
			return n, nil
		}
		err = fmt.Errorf("%s: %w", node, errStreamFetch)
	}
	return 0, err
}

// writeFetched writes the chunks of missing an lkStreamData reply holds
// and returns how many of missing it covered.
func (h *streamHost) writeFetched(st *store.Store, gs *groupStream, missing []queue.ChunkInfo, data []byte) (int, error) {
	d := linkDecoder{b: data}
	code, end := d.u(), d.u()
	d.u() // committed, stored: for the status
	d.u()
	count := d.u()
	if d.err != nil || count > uint64(len(d.b)) {
		return 0, errLinkFrame
	}
	if code != 0 {
		return 0, fmt.Errorf("%w: code %d", errStreamFetch, code)
	}
	type fetched struct {
		off uint64
		m   store.StreamMessage
	}
	msgs := make([]fetched, 0, count)
	for range count {
		f := fetched{off: d.u()}
		f.m.Exchange, f.m.RoutingKey = d.s(), d.s()
		f.m.Header, f.m.Body = d.raw(), d.raw()
		f.m.Filter = d.s()
		msgs = append(msgs, f)
	}
	if d.err != nil {
		return 0, d.err
	}
	n := 0
	written := make(chan error, len(missing))
	pending := 0
	for n < len(missing) && missing[n].End() <= end {
		c := missing[n]
		i, _ := slices.BinarySearchFunc(msgs, c.First, func(f fetched, off uint64) int {
			switch {
			case f.off < off:
				return -1
			case f.off > off:
				return 1
			}
			return 0
		})
		j := i
		for j < len(msgs) && msgs[j].off < c.End() {
			j++
		}
		n++
		if j-i != int(c.Count) {
			// Not in the member's store (retention dropped it there
			// first): it is being dropped here too.
			continue
		}
		sm := make([]store.StreamMessage, 0, c.Count)
		for _, f := range msgs[i:j] {
			sm = append(sm, f.m)
		}
		pending++
		st.AppendStreamChunk(gs.storeID, &store.StreamChunk{First: c.First, Timestamp: c.Timestamp, Segment: c.Segment,
			Bytes: c.Bytes, Count: c.Count, Filters: c.Filters, Unfiltered: c.Unfiltered, AnyFilter: c.AnyFilter},
			store.StreamMessageList(sm), func(err error) { written <- err })
	}
	var err error
	for range pending {
		err = errors.Join(err, <-written)
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}

// streamRead answers a member catching up stream k of group: the chunks
// of this node's store from the one starting at from, below limit and
// below what this node has stored, at most streamReadBytes of them.
func (s *linkServer) streamRead(id, group uint64, k GroupQueueKey, from, limit uint64) {
	b := s.b
	r := &b.repl
	r.mu.Lock()
	m := r.machines[group]
	r.mu.Unlock()
	var gs *groupStream
	var stored, committed uint64
	if m != nil {
		m.mu.Lock()
		if gs = m.streams[k]; gs != nil {
			stored, committed = gs.stored, gs.s.CommittedOffset()
		}
		m.mu.Unlock()
	}
	st := b.cfg.Store
	if gs == nil || st == nil {
		s.frame(lkStreamData, func(buf []byte) []byte {
			buf = appendU(appendU(appendU(buf, id), amqp.NotFound), from)
			return appendU(appendU(appendU(buf, 0), 0), 0)
		})
		return
	}
	limit = min(limit, stored)
	var body []byte
	count := uint64(0)
	end := from
	if from < limit {
		var err error
		end, err = st.ReadStream(gs.storeID, from, limit, streamReadBytes, nil, func(off uint64, m store.StreamMessage) {
			body = appendU(body, off)
			body = appendS(appendS(body, m.Exchange), m.RoutingKey)
			body = appendS(appendS(body, m.Header), m.Body)
			body = appendS(body, m.Filter)
			count++
		})
		if err != nil {
			b.log.Warn("reading a replicated stream for a member", zap.Stringer("stream", k), zap.Error(err))
			end, body, count = from, nil, 0
		}
	}
	s.frame(lkStreamData, func(buf []byte) []byte {
		buf = appendU(appendU(appendU(buf, id), 0), end)
		buf = appendU(appendU(buf, committed), stored)
		return append(appendU(buf, count), body...)
	})
}
