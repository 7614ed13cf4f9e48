package broker

import (
	"sync"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/queue"
	"github.com/warrenmq/warren/store"
)

// streamHost is this node's side of the replicated streams of one data
// group: it writes the chunks the group applies to the node's store,
// removes those retention drops, and feeds the node's consumers of the
// group's streams. The group's apply goroutine only queues the store work
// (write, remove, drop; a leaf lock): one goroutine per group (run, owned
// by the broker's replState) does it with no lock held, in order, and on
// each chunk's completion moves the stream's stored mark and dispatches
// under the group's lock. Consumers behind the in-memory tail are fed by
// a reader goroutine per read, from the store, never past stored.
type streamHost struct {
	b     *Broker
	m     *QueueGroup
	group uint64

	// mu guards the fields below (a leaf lock).
	mu      sync.Mutex
	jobs    []streamJob
	written []streamWritten
	running bool
}

type streamJob struct {
	gs     *groupStream
	chunk  *store.StreamChunk
	msgs   chunkEntries
	firsts []uint64 // remove these chunks
	drop   bool     // delete the stream's data
	// catchUp, when set, is the end of the chunks to make sure the store
	// has (streamcatchup.go).
	catchUp uint64
	cancel  []*consumer
}

type streamWritten struct {
	gs  *groupStream
	end uint64
	err error
}

func newStreamHost(b *Broker, m *QueueGroup, group uint64) *streamHost {
	return &streamHost{b: b, m: m, group: group}
}

// queue adds j and makes sure the goroutine runs. Any lock may be held.
func (h *streamHost) queue(j streamJob) {
	h.mu.Lock()
	h.jobs = append(h.jobs, j)
	start := !h.running
	h.running = true
	h.mu.Unlock()
	h.kick(start)
}

// kick starts the goroutine when start is set (the caller set running).
func (h *streamHost) kick(start bool) {
	if !start {
		return
	}
	r := &h.b.repl
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		h.mu.Lock()
		h.running = false
		h.mu.Unlock()
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	go h.run()
}

// write queues the write of a chunk the group applied. Hold g.mu.
func (h *streamHost) write(gs *groupStream, ci queue.ChunkInfo, entries []queue.StreamEntry) {
	if h.b.cfg.Store == nil {
		gs.stored = ci.End()
		return
	}
	h.queue(streamJob{gs: gs, msgs: entries, chunk: &store.StreamChunk{
		First: ci.First, Timestamp: ci.Timestamp, Segment: ci.Segment, Bytes: ci.Bytes, Count: ci.Count,
		Filters: ci.Filters, Unfiltered: ci.Unfiltered, AnyFilter: ci.AnyFilter,
	}})
}

// remove queues the removal of chunks retention dropped. Hold g.mu.
func (h *streamHost) remove(gs *groupStream, chunks []queue.ChunkInfo) {
	firsts := make([]uint64, len(chunks))
	for i := range chunks {
		firsts[i] = chunks[i].First
	}
	h.queue(streamJob{gs: gs, firsts: firsts})
}

// drop queues the deletion of a deleted stream's data; its consumers are
// cancelled. Hold g.mu.
func (h *streamHost) drop(gs *groupStream) {
	j := streamJob{gs: gs, drop: true}
	for _, c := range gs.s.Consumers() {
		j.cancel = append(j.cancel, c.Owner.(*consumer))
	}
	h.queue(j)
}

// run does the queued store work until none is left.
func (h *streamHost) run() {
	r := &h.b.repl
	defer r.wg.Done()
	st := h.b.cfg.Store
	for {
		h.mu.Lock()
		jobs, written := h.jobs, h.written
		h.jobs, h.written = nil, nil
		if len(jobs) == 0 && len(written) == 0 {
			h.running = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		for _, j := range jobs {
			switch {
			case j.catchUp != 0:
				h.catchUp(j.gs, j.catchUp)
			case j.drop:
				for _, cons := range j.cancel {
					cons.ch.serverCancel(cons)
				}
				if st == nil {
					continue
				}
				if err := st.RemoveStream(j.gs.storeID); err != nil {
					h.b.log.Error("deleting replicated stream data", zap.Stringer("stream", j.gs.key), zap.Error(err))
				}
			case j.chunk != nil:
				gs, end := j.gs, j.chunk.First+uint64(j.chunk.Count)
				// The group's log holds the chunk on a majority: its
				// write here needs no sync of its own.
				st.AppendReplicaChunk(gs.storeID, j.chunk, j.msgs, func(err error) {
					h.mu.Lock()
					h.written = append(h.written, streamWritten{gs: gs, end: end, err: err})
					start := !h.running
					h.running = true
					h.mu.Unlock()
					h.kick(start)
				})
			case st != nil:
				st.RemoveStreamChunks(j.gs.storeID, j.firsts)
			}
		}
		if len(written) > 0 {
			h.m.mu.Lock()
			for _, w := range written {
				if w.err != nil {
					// The chunk is in the group's log: consumers behind the
					// tail wait at it.
					h.b.log.Error("writing replicated stream chunk", zap.Stringer("stream", w.gs.key), zap.Error(w.err))
					continue
				}
				if w.end > w.gs.stored {
					w.gs.stored = w.end
				}
				if !w.gs.gone {
					h.dispatchLocked(w.gs)
				}
			}
			h.m.mu.Unlock()
		}
	}
}

// dispatchLocked delivers what gs has for this node's consumers and starts
// the store reads they need. Hold g.mu.
func (h *streamHost) dispatchLocked(gs *groupStream) {
	if gs.gone {
		return
	}
	ds, reads := gs.s.Dispatch(gs.scratch[:0], nil)
	for i := range ds {
		cons := ds[i].Consumer.Owner.(*consumer)
		e := ds[i].Entry
		cons.ch.deliver(cons, cons.qe, queue.Entry{Msg: e.Msg, Seq: e.Offset})
		cons.ch.c.out.reserved.Add(-deliveryCost(e.Msg.Size()))
		ds[i] = queue.StreamDelivery{}
	}
	gs.scratch = ds[:0]
	for _, rq := range reads {
		h.readLocked(gs, rq)
	}
}

// readLocked starts a store read for a consumer behind the tail, up to
// what this node has stored (a read past it waits for the write). Hold
// g.mu.
func (h *streamHost) readLocked(gs *groupStream, rq queue.ReadRequest) {
	st := h.b.cfg.Store
	limit := min(rq.Limit, gs.stored)
	if st == nil || rq.From >= limit {
		gs.s.Fill(rq.Consumer, rq.From, nil, rq.From) // again after the next write
		return
	}
	r := &h.b.repl
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	c := rq.Consumer
	from := gs.s.ChunkFor(rq.From)
	var match func(*store.StreamChunk) bool
	if len(c.Filters) > 0 {
		match = func(sc *store.StreamChunk) bool {
			return c.ChunkMatches(&queue.ChunkInfo{Filters: sc.Filters, Unfiltered: sc.Unfiltered, AnyFilter: sc.AnyFilter})
		}
	}
	go func() {
		defer r.wg.Done()
		var entries []queue.StreamEntry
		end, err := st.ReadStream(gs.storeID, from, limit, streamReadBytes, match, func(off uint64, m store.StreamMessage) {
			if off < rq.From {
				return
			}
			entries = append(entries, queue.StreamEntry{Offset: off, Filter: m.Filter, Msg: &queue.Message{
				Exchange: m.Exchange, RoutingKey: m.RoutingKey, Header: m.Header, Body: m.Body, Persistent: true,
			}})
		})
		h.m.mu.Lock()
		defer h.m.mu.Unlock()
		if err != nil {
			h.b.log.Error("reading replicated stream", zap.Stringer("stream", gs.key), zap.Uint64("offset", rq.From), zap.Error(err))
			gs.s.Fill(c, rq.From, nil, rq.From)
			return
		}
		gs.s.Fill(c, rq.From, entries, end)
		h.dispatchLocked(gs)
	}()
}
