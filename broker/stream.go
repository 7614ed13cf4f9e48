package broker

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
	"github.com/warrenmq/warren/store"
)

// Stream queues (x-queue-type=stream): the state machine is queue.Stream,
// guarded by the queue's mu like a classic queue's. Its log changes
// through commands (queue.StreamCmd, applyLocked): a publish appends
// (StreamAppend), the goroutine below cuts chunks at the current time
// (StreamTakeChunk), commits them once written (StreamCommit) or rewinds
// past a failed write (StreamRewind), applies retention at the current
// time (StreamRetain); an ack of a named consumer stores its offset
// (StreamStoreOffset) and a policy change applies retention settings
// (StreamSetConfig). The effects — chunks to write, chunks to delete —
// are carried out with no lock held. The cursors (consumers, their credit
// and disk reads) and the cache of committed messages are this node's and
// change through the stream's typed methods, as does recovery (Restore,
// RestoreOffset). Around it the broker runs, per stream, one goroutine
// (streamState.run) that
//   - takes the messages appended by publishers as chunks and hands them to
//     the store's group-commit writer (no lock held, so the journal's
//     backpressure blocks it and not a publisher holding the queue lock);
//   - on each chunk's completion commits it in the state machine, sends the
//     publishers' confirms and dispatches to consumers;
//   - applies retention (after each commit and once a second for age);
//   - writes named consumers' acknowledged offsets (batched, no sync).
//
// Consumers behind the in-memory tail are fed by a short-lived reader
// goroutine per read (at most one per consumer at a time), which reads
// streamReadBytes of chunks from Badger with no lock held and hands them to
// the consumer under the queue lock.

const (
	streamChunkBytes = 1 << 20  // body bytes per chunk at most
	streamCacheBytes = 4 << 20  // committed body bytes kept in memory per stream
	streamReadBytes  = 2 << 20  // chunk bytes read per disk read
	streamPendingCap = 32 << 20 // uncommitted bytes before publishers are held
	streamTick       = time.Second
)

// streamState is the broker's side of a stream queue.
type streamState struct {
	qe  *queueEntity
	log *zap.Logger
	st  *store.Store

	// Guarded by qe.mu:
	s       *queue.Stream
	single  bool         // x-single-active-consumer: named consumers form groups
	waits   []streamWait // confirms waiting for their chunk, in offset order
	scratch []queue.StreamDelivery
	effects []queue.StreamEffect // applyLocked's buffer
	closed  bool                 // no more reads are started
	reads   uint64               // disk reads started, for management and tests
	// commitWaits are closed once the stream is committed up to their end
	// (or gone): tx.commit waits on them.
	commitWaits []streamCommitWait
	// redispatch asks the goroutine to dispatch again (a filtering
	// consumer stopped at its skip budget).
	redispatch bool
	// epoch counts the rewinds after failed chunk writes: completions of
	// chunks taken before the last one are ignored (their chunks were
	// dropped).
	epoch uint64
	// rewinds are the rewinds so far, one per epoch: the offset the
	// stream rewound to and the write error that made it (qe.mu).
	rewinds []streamRewind

	cmu       sync.Mutex // leaf: completed
	completed []streamDone

	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	started bool
	readers sync.WaitGroup
	once    sync.Once
	// app gathers this node's publishes to a replicated stream
	// (streamrepl.go).
	app streamAppender
}

type streamRewind struct {
	from uint64
	err  error
}

// txStream is what a transaction appended to one stream: up to offset
// end, the first of it in epoch epoch.
type txStream struct {
	end, epoch uint64
}

type streamWait struct {
	off uint64
	ch  *channel
	seq uint64
}

type streamCommitWait struct {
	end uint64
	// done gets one value when the wait is over: nil once the stream is
	// committed up to end (or gone), the write error when a failed chunk
	// write rewound the stream before end.
	done chan error
}

// releaseCommitWaitsLocked ends the commit waits that are due (all of
// them with all set), giving them err. Hold qe.mu.
func (ss *streamState) releaseCommitWaitsLocked(all bool, err error) {
	keep := ss.commitWaits[:0]
	for _, w := range ss.commitWaits {
		if all || w.end <= ss.s.CommittedOffset() {
			w.done <- err // buffered: never blocks
		} else {
			keep = append(keep, w)
		}
	}
	clear(ss.commitWaits[len(keep):])
	ss.commitWaits = keep
}

// waitTxStreams waits until the streams a committing transaction appended
// to have committed what it appended: tx.commit-ok promises it is on disk.
// It returns the write error of a stream that rewound past what the
// transaction appended (those messages are not stored). Reader goroutine,
// no lock held.
func (ch *channel) waitTxStreams() error {
	var first error
	for ss, tx := range ch.txStreams {
		qe := ss.qe
		end := tx.end
		qe.mu.Lock()
		// A rewind since the transaction's first append, to below its
		// last offset, dropped some of what it appended (the offsets may
		// since have been taken by other messages).
		var lost error
		for _, r := range ss.rewinds[min(tx.epoch, uint64(len(ss.rewinds))):] {
			if r.from < end {
				lost = r.err
				break
			}
		}
		if lost != nil {
			qe.mu.Unlock()
			if first == nil {
				first = lost
			}
			continue
		}
		if qe.deleted || ss.closed || ss.s.CommittedOffset() >= end {
			qe.mu.Unlock()
			continue
		}
		w := streamCommitWait{end: end, done: make(chan error, 1)}
		ss.commitWaits = append(ss.commitWaits, w)
		qe.mu.Unlock()
		if err := <-w.done; err != nil && first == nil {
			first = err
		}
	}
	clear(ch.txStreams)
	return first
}

type streamDone struct {
	first, end uint64
	epoch      uint64
	err        error
}

// newStreamState builds the stream of qe for settings s; start runs it.
func newStreamState(qe *queueEntity, s queueSettings) *streamState {
	return &streamState{
		qe:     qe,
		s:      queue.NewStream(streamConfig(s)),
		single: s.stream.single,
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
}

// start runs the stream's goroutine; close stops it.
func (ss *streamState) start(b *Broker) {
	ss.log = b.log.With(zap.String("vhost", ss.qe.vhost.name), zap.String("queue", ss.qe.name))
	ss.st = b.cfg.Store
	ss.started = true
	go ss.run()
}

// close stops the goroutine and waits for it and the readers. Call with
// no lock held.
func (ss *streamState) close() {
	ss.once.Do(func() {
		ss.qe.mu.Lock()
		ss.closed = true
		ss.releaseCommitWaitsLocked(true, nil)
		ss.qe.mu.Unlock()
		if ss.started {
			close(ss.stop)
			<-ss.done
		}
		ss.readers.Wait()
	})
}

func (ss *streamState) signal() {
	select {
	case ss.wake <- struct{}{}:
	default:
	}
}

func (ss *streamState) run() {
	defer close(ss.done)
	t := time.NewTicker(streamTick)
	defer t.Stop()
	for {
		stopping, tick := false, false
		select {
		case <-ss.wake:
		case <-t.C:
			tick = true
		case <-ss.stop:
			stopping = true
		}
		ss.writeChunks()
		ss.complete(tick)
		ss.flushOffsets()
		ss.qe.mu.Lock()
		if ss.redispatch {
			ss.redispatch = false
			ss.qe.streamDispatchLocked()
		}
		ss.qe.mu.Unlock()
		if stopping {
			return
		}
	}
}

// writeChunks hands the appended messages to the store as chunks.
func (ss *streamState) writeChunks() {
	qe := ss.qe
	for {
		qe.mu.Lock()
		cmd := queue.StreamCmd{Op: queue.StreamTakeChunk, Now: nowMs(), MaxBytes: streamChunkBytes}
		effs, _ := ss.s.Apply(&cmd, ss.effects[:0])
		var w queue.StreamEffect
		if len(effs) > 0 {
			w = effs[0]
		}
		ss.doneEffectsLocked(effs)
		epoch := ss.epoch
		qe.mu.Unlock()
		if w.Kind != queue.EffStreamWrite {
			return
		}
		ci := w.Chunk
		first, end := ci.First, ci.End()
		ss.st.AppendStreamChunk(qe.storeID, &store.StreamChunk{
			First: ci.First, Timestamp: ci.Timestamp, Segment: ci.Segment, Bytes: ci.Bytes, Count: ci.Count,
			Filters: ci.Filters, Unfiltered: ci.Unfiltered, AnyFilter: ci.AnyFilter,
		}, chunkEntries(w.Entries), func(err error) {
			ss.cmu.Lock()
			ss.completed = append(ss.completed, streamDone{first, end, epoch, err})
			ss.cmu.Unlock()
			ss.signal()
		})
	}
}

// fitCacheLocked sizes the stream's in-memory tail: streamCacheBytes, or a
// sixteenth of it while the broker is under memory pressure (paging.go).
// Hold qe.mu.
func (ss *streamState) fitCacheLocked() {
	want := int64(streamCacheBytes)
	if ss.qe.vhost.b.paging.Load() {
		want /= 16
	}
	if ss.s.Config().CacheBytes != want {
		ss.s.SetCacheBytes(want)
	}
}

// applyLocked applies cmd to the stream's log and returns the chunks its
// effects ask to delete (EffStreamRemove), for the caller to remove from
// the store once the lock is released. A refused command changes
// nothing. Hold qe.mu.
func (ss *streamState) applyLocked(cmd *queue.StreamCmd, remove []queue.ChunkInfo) []queue.ChunkInfo {
	effs, _ := ss.s.Apply(cmd, ss.effects[:0])
	for i := range effs {
		if effs[i].Kind == queue.EffStreamRemove {
			remove = append(remove, effs[i].Chunks...)
		}
	}
	ss.doneEffectsLocked(effs)
	return remove
}

// setConfigLocked applies a policy change to the stream's retention and
// segment size (StreamSetConfig; the next retention applies it) and
// resizes its cache. Hold qe.mu.
func (ss *streamState) setConfigLocked(cfg queue.StreamConfig) {
	cmd := queue.StreamCmd{Op: queue.StreamSetConfig, Config: cfg}
	ss.applyLocked(&cmd, nil)
	ss.fitCacheLocked()
}

// doneEffectsLocked hands the effect buffer back for the next command.
// Hold qe.mu.
func (ss *streamState) doneEffectsLocked(effs []queue.StreamEffect) {
	clear(effs)
	ss.effects = effs[:0]
}

// complete commits the chunks the store finished, confirms their
// publishes, applies retention and dispatches.
func (ss *streamState) complete(tick bool) {
	ss.cmu.Lock()
	list := ss.completed
	ss.completed = nil
	ss.cmu.Unlock()
	if len(list) == 0 && !tick {
		return
	}
	qe := ss.qe
	qe.mu.Lock()
	if qe.deleted {
		// The stream is gone: its publishes are confirmed as a deleted
		// classic queue's are.
		release := ss.waits
		ss.waits = nil
		ss.releaseCommitWaitsLocked(true, nil)
		qe.mu.Unlock()
		for _, w := range release {
			w.ch.journaled(w.seq, nil)
		}
		return
	}
	var release, failed []streamWait
	var failure error
	var discard []queue.ChunkInfo
	for _, d := range list {
		if d.epoch != ss.epoch {
			continue // dropped by a rewind
		}
		if d.err != nil {
			// Nothing from the failed chunk on is delivered: the stream
			// rewinds to it, its publishers and those of every later
			// message get a nack, and later chunks already written are
			// deleted. The next message takes the failed chunk's offset.
			ss.log.Error("writing stream chunk", zap.Uint64("offset", d.first), zap.Error(d.err))
			rewind := queue.StreamCmd{Op: queue.StreamRewind, Offset: d.first}
			discard = ss.applyLocked(&rewind, discard)
			ss.rewinds = append(ss.rewinds, streamRewind{from: d.first, err: d.err})
			ss.epoch++
			failed = append(failed, ss.waits...)
			clear(ss.waits)
			ss.waits = ss.waits[:0]
			failure = d.err
			// A transaction that waits for these offsets is told they
			// were not stored.
			ss.releaseCommitWaitsLocked(false, nil)
			ss.releaseCommitWaitsLocked(true, d.err)
			continue
		}
		commit := queue.StreamCmd{Op: queue.StreamCommit, Offset: d.end}
		ss.applyLocked(&commit, nil)
		i := 0
		for i < len(ss.waits) && ss.waits[i].off < d.end {
			i++
		}
		release = append(release, ss.waits[:i]...)
		ss.waits = ss.waits[i:]
	}
	ss.releaseCommitWaitsLocked(false, nil)
	if tick {
		ss.fitCacheLocked()
	}
	retain := queue.StreamCmd{Op: queue.StreamRetain, Now: nowMs()}
	dropped := ss.applyLocked(&retain, nil)
	if qe.drained != nil && ss.s.PendingBytes() < streamPendingCap/2 {
		close(qe.drained)
		qe.drained = nil
	}
	qe.streamDispatchLocked()
	qe.mu.Unlock()
	for _, w := range release {
		w.ch.journaled(w.seq, nil)
	}
	for _, w := range failed {
		w.ch.journaled(w.seq, failure)
	}
	if len(discard) > 0 {
		firsts := make([]uint64, len(discard))
		for i := range discard {
			firsts[i] = discard[i].First
		}
		ss.st.RemoveStreamChunks(qe.storeID, firsts)
	}
	if len(dropped) > 0 {
		firsts := make([]uint64, len(dropped))
		for i := range dropped {
			firsts[i] = dropped[i].First
		}
		ss.st.RemoveStreamChunks(qe.storeID, firsts)
		ss.log.Debug("stream retention dropped chunks", zap.Int("chunks", len(dropped)))
	}
}

// flushOffsets writes the named consumers' offsets acknowledged since the
// last call.
func (ss *streamState) flushOffsets() {
	qe := ss.qe
	qe.mu.Lock()
	offs := ss.s.TakeDirtyOffsets()
	qe.mu.Unlock()
	for name, off := range offs {
		ss.st.SetStreamOffset(qe.storeID, name, off)
	}
}

// publishLocked appends msg to the stream with the x-stream-offset header
// added; with confirmSeq its confirm waits for the chunk's commit. It
// returns a channel to hold the publisher on when too much waits to be
// written. Hold qe.mu.
func (ch *channel) publishStreamLocked(qe *queueEntity, msg *queue.Message, confirmSeq uint64) chan struct{} {
	ss := qe.stream
	off := ss.s.NextOffset()
	header, filter := streamHeader(msg.Header, off)
	m := *msg
	m.Header = header
	m.Persistent = true
	cmd := queue.StreamCmd{Op: queue.StreamAppend, Msg: &m, Filter: filter}
	ss.applyLocked(&cmd, nil) // EffStreamAppended: off
	qe.stats.publish++
	if confirmSeq != 0 {
		ch.confirms.hold(confirmSeq)
		ss.waits = append(ss.waits, streamWait{off: off, ch: ch, seq: confirmSeq})
	}
	if ch.tx {
		if ch.txStreams == nil {
			ch.txStreams = make(map[*streamState]txStream)
		}
		tx, ok := ch.txStreams[ss]
		if !ok {
			tx.epoch = ss.epoch
		}
		tx.end = off + 1
		ch.txStreams[ss] = tx
	}
	ss.signal()
	if ss.s.PendingBytes() > streamPendingCap {
		return qe.drainedLocked()
	}
	return nil
}

// streamHeaderArenaMax bounds the allocation streamHeaderIn makes for the
// headers still to come.
const streamHeaderArenaMax = 64 << 10

// chunkEntries are the entries of a chunk a stream took (its own list,
// queue.StreamEffect) as the store's messages to write.
type chunkEntries []queue.StreamEntry

func (c chunkEntries) Len() int { return len(c) }

func (c chunkEntries) At(i int) store.StreamMessage {
	e := &c[i]
	return store.StreamMessage{Exchange: e.Msg.Exchange, RoutingKey: e.Msg.RoutingKey,
		Header: e.Msg.Header, Body: e.Msg.Body, Filter: e.Filter}
}

// streamHeader returns the content header with x-stream-offset set to off
// and the message's x-stream-filter-value.
func streamHeader(header []byte, off uint64) ([]byte, string) {
	return streamHeaderIn(nil, 0, header, off)
}

// streamHeaderIn is streamHeader writing the new header into *arena's
// spare capacity, when arena is set: the headers of a chunk's messages,
// which live as long as one another, share an allocation. left counts the
// messages whose headers are still to come, this one included: a fresh
// arena is sized for as many headers as this one, up to
// streamHeaderArenaMax (large headers get an arena each).
func streamHeaderIn(arena *[]byte, left int, header []byte, off uint64) ([]byte, string) {
	need := len(header) + 32
	var dst []byte
	if arena == nil {
		dst = make([]byte, 0, need)
	} else {
		if cap(*arena)-len(*arena) < need {
			*arena = make([]byte, 0, max(need, min(need*max(left, 1), streamHeaderArenaMax)))
		}
		dst = (*arena)[len(*arena):len(*arena):cap(*arena)]
	}
	if out, ok := amqp.AppendHeaderInt64(dst, header, "x-stream-offset", int64(off)); ok {
		if arena != nil && len(out) <= cap(dst) {
			*arena = (*arena)[:len(*arena)+len(out)]
			out = out[:len(out):len(out)]
		}
		// The common case: no x-stream-offset of the publisher's to
		// replace, and nothing decoded.
		var filter string
		if typ, raw, ok := amqp.PeekHeader(header, "x-stream-filter-value"); ok && typ == 'S' {
			filter = string(raw)
		}
		return out, filter
	}
	var h amqp.ContentHeader
	if err := amqp.DecodeContentHeader(header, &h); err != nil {
		return header, ""
	}
	hdrs := make(amqp.Table, len(h.Properties.Headers)+1)
	for k, v := range h.Properties.Headers {
		hdrs[k] = v
	}
	filter, _ := hdrs["x-stream-filter-value"].(string)
	hdrs["x-stream-offset"] = int64(off)
	h.Properties.Headers = hdrs
	if h.Properties.Flags != 0 {
		h.Properties.Flags |= amqp.FlagHeaders
	}
	out, err := h.AppendTo(make([]byte, 0, len(header)+32))
	if err != nil {
		return header, filter
	}
	return out, filter
}

// streamDispatchLocked delivers what the stream has for its consumers and
// starts the disk reads they need. Hold qe.mu.
func (qe *queueEntity) streamDispatchLocked() {
	ss := qe.stream
	if qe.deleted {
		return
	}
	ds, reads := ss.s.Dispatch(ss.scratch[:0], nil)
	for i := range ds {
		cons := ds[i].Consumer.Owner.(*consumer)
		e := ds[i].Entry
		cons.ch.deliver(cons, qe, queue.Entry{Msg: e.Msg, Seq: e.Offset})
		cons.ch.c.out.reserved.Add(-deliveryCost(e.Msg.Size()))
		qe.stats.countDelivery(cons.NoAck, false)
		ds[i] = queue.StreamDelivery{}
	}
	ss.scratch = ds[:0]
	for _, r := range reads {
		ss.startReadLocked(r)
	}
	if ss.s.More() {
		ss.redispatch = true
		ss.signal()
	}
}

// startReadLocked starts a reader goroutine for r. Hold qe.mu.
func (ss *streamState) startReadLocked(r queue.ReadRequest) {
	if ss.closed || ss.st == nil {
		return
	}
	qe := ss.qe
	c := r.Consumer
	from := ss.s.ChunkFor(r.From)
	var match func(*store.StreamChunk) bool
	if len(c.Filters) > 0 {
		match = func(sc *store.StreamChunk) bool {
			return c.ChunkMatches(&queue.ChunkInfo{Filters: sc.Filters, Unfiltered: sc.Unfiltered, AnyFilter: sc.AnyFilter})
		}
	}
	ss.reads++
	ss.readers.Add(1)
	go func() {
		defer ss.readers.Done()
		var entries []queue.StreamEntry
		end, err := ss.st.ReadStream(qe.storeID, from, r.Limit, streamReadBytes, match, func(off uint64, m store.StreamMessage) {
			if off < r.From {
				return
			}
			entries = append(entries, queue.StreamEntry{Offset: off, Filter: m.Filter, Msg: &queue.Message{
				Exchange: m.Exchange, RoutingKey: m.RoutingKey, Header: m.Header, Body: m.Body, Persistent: true,
			}})
		})
		if err != nil {
			// The consumer stays waiting for this read: a store that fails
			// to read would fail again.
			ss.log.Error("reading stream", zap.Uint64("offset", r.From), zap.Error(err))
			return
		}
		qe.mu.Lock()
		ss.s.Fill(c, r.From, entries, end)
		qe.streamDispatchLocked()
		qe.mu.Unlock()
	}()
}

// streamMessages is the message count reported for a stream (declare-ok,
// management). Hold qe.mu.
func (qe *queueEntity) streamMessagesLocked() int { return int(qe.stream.s.Messages()) }

// consumeStream is basic.consume on a stream queue, with RabbitMQ's rules
// (rabbit_stream_queue:consume): credit from a per-consumer prefetch is
// required, no-ack and a channel-wide prefetch are refused.
func (ch *channel) consumeStream(qe *queueEntity, m *amqp.BasicConsume, tag string) error {
	v := ch.c.vhost
	if ch.prefetch == 0 {
		return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 20,
			"consumer prefetch count is not set for 'queue '%s' in vhost '%s''", qe.name, v.name)
	}
	if m.NoAck {
		return amqp.Errorf(amqp.NotImplemented, amqp.ClassBasic, 20,
			"automatic acknowledgement not supported by stream queues queue '%s' in vhost '%s'", qe.name, v.name)
	}
	if ch.globalPrefetch.Load() > 0 {
		return amqp.Errorf(amqp.NotImplemented, amqp.ClassBasic, 20,
			"queue '%s' in vhost '%s' does not support global qos", qe.name, v.name)
	}
	a, err := parseStreamConsumeArgs(m.Arguments, qe.name, v.name, time.Now())
	if err != nil {
		return err
	}
	if (a.single || qe.stream.single) && a.name == "" {
		return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 20,
			"single active consumer on stream queue '%s' in vhost '%s' needs x-stream-consumer-name", qe.name, v.name)
	}
	cons := &consumer{
		consumerArgs: consumerArgs{Tag: tag, Exclusive: m.Exclusive, Prefetch: ch.prefetch},
		ch:           ch,
		qe:           qe,
	}
	sc := &queue.StreamConsumer{
		Tag: tag, Prefetch: ch.prefetch, Gate: cons, Owner: cons,
		Filters: a.filters, MatchUnfiltered: a.matchUnfiltered,
		Name: a.name, Single: a.single || qe.stream.single,
	}
	cons.stream = sc
	partition := 0
	if sc.Single {
		partition = v.partitionIndex(qe.name)
	}
	qe.mu.Lock()
	if qe.deleted {
		qe.mu.Unlock()
		return notFoundQueue(qe.name, v.name, amqp.ClassBasic, 20)
	}
	ss := qe.stream
	sc.Offset = ss.s.Resolve(a.offset)
	if a.name != "" && a.offset.Kind == queue.OffsetNext {
		if off, ok := ss.s.NamedOffset(a.name); ok {
			sc.Offset = min(max(off+1, ss.s.FirstOffset()), ss.s.NextOffset())
		}
	}
	if sc.Single {
		ss.s.SetPartition(partition)
	}
	ss.s.AddConsumer(sc)
	ch.registerConsumerLocked(qe, cons, tag, m.NoWait)
	qe.mu.Unlock()
	return nil
}

// removeStreamConsumer takes cons off its stream; the next member of its
// group, if any, becomes active.
func (qe *queueEntity) removeStreamConsumer(cons *consumer) {
	if qe.repl != nil {
		qe.removeStreamReplConsumer(cons)
		return
	}
	qe.mu.Lock()
	qe.stream.s.RemoveConsumer(cons.stream)
	qe.touchLocked()
	qe.streamDispatchLocked()
	qe.mu.Unlock()
	qe.stream.signal()
}

// streamSettleLocked acknowledges deliveries of one stream consumer: credit
// comes back and a named consumer's offset moves. Hold qe.mu.
func (qe *queueEntity) streamSettleLocked(ps []pending) {
	cons := ps[0].cons
	if cons == nil || cons.stream == nil {
		return
	}
	var last uint64
	for i := range ps {
		last = max(last, ps[i].seq)
	}
	qe.stream.s.Return(cons.stream, len(ps)) // credit back
	qe.stats.ack += uint64(len(ps))
	if name := cons.stream.Name; name != "" {
		cmd := queue.StreamCmd{Op: queue.StreamStoreOffset, Name: name, Offset: last}
		qe.stream.applyLocked(&cmd, nil)
		qe.stream.signal()
	}
	qe.streamDispatchLocked()
}

// streamReturn gives back the credit of the deliveries of ps[i:] that
// belong to stream queue ps[i].qe (a channel closing or basic.recover:
// streams cannot requeue). It returns the index after them.
func (ch *channel) streamReturn(ps []pending, i int) int {
	qe := ps[i].qe
	if qe.repl != nil {
		return ch.streamReturnRepl(ps, i)
	}
	qe.mu.Lock()
	for ; i < len(ps) && ps[i].qe == qe; i++ {
		if c := ps[i].cons; c != nil && c.stream != nil && !qe.deleted {
			qe.stream.s.Return(c.stream, 1)
		}
	}
	qe.streamDispatchLocked()
	qe.mu.Unlock()
	return i
}

// streamRejectError refuses basic.nack and basic.reject of stream
// deliveries, as RabbitMQ does.
func streamRejectError(ps []pending, methodID uint16) error {
	for i := range ps {
		if qe := ps[i].qe; qe.stream != nil {
			return amqp.Errorf(amqp.NotImplemented, amqp.ClassBasic, methodID,
				"basic.nack and basic.reject not supported by stream queues queue '%s' in vhost '%s'", qe.name, qe.vhost.name)
		}
	}
	return nil
}

// streamGetError refuses basic.get on a stream.
func streamGetError(qe *queueEntity) error {
	return amqp.Errorf(amqp.NotImplemented, amqp.ClassBasic, 70,
		"basic.get not supported by stream queues queue '%s' in vhost '%s'", qe.name, qe.vhost.name)
}

// streamPurgeError refuses queue.purge on a stream.
func streamPurgeError(qe *queueEntity) error {
	return amqp.Errorf(amqp.NotImplemented, amqp.ClassQueue, 30,
		"queue.purge not supported by stream queues queue '%s' in vhost '%s'", qe.name, qe.vhost.name)
}

// streamConsumersLocked lists the consumers of a stream (for deletion).
// Hold qe.mu.
func (qe *queueEntity) streamConsumersLocked() []*consumer {
	var out []*consumer
	for _, c := range qe.stream.s.Consumers() {
		out = append(out, c.Owner.(*consumer))
	}
	return out
}

// dropStream stops a deleted stream and deletes its data. No lock held but
// b.defMu.
func (b *Broker) dropStream(qe *queueEntity) {
	qe.stream.close()
	qe.mu.Lock()
	release := qe.stream.waits
	qe.stream.waits = nil
	qe.mu.Unlock()
	for _, w := range release {
		w.ch.journaled(w.seq, nil)
	}
	if st := b.cfg.Store; st != nil && qe.storeID != 0 {
		if err := st.RemoveStream(qe.storeID); err != nil {
			b.log.Error("deleting stream data", zap.String("queue", qe.name), zap.Error(err))
		}
	}
}

// recoverStream loads a stream's index and named offsets and starts it.
func (b *Broker) recoverStream(qe *queueEntity) error {
	idx, err := b.cfg.Store.LoadStream(qe.storeID)
	if err != nil {
		return err
	}
	if idx.Corrupt > 0 {
		b.log.Warn("skipped corrupt stream records", zap.String("queue", qe.name), zap.Int("count", idx.Corrupt))
	}
	s := qe.stream.s
	for _, c := range idx.Chunks {
		s.Restore(queue.ChunkInfo{First: c.First, Count: c.Count, Timestamp: c.Timestamp, Bytes: c.Bytes,
			Segment: c.Segment, Filters: c.Filters, Unfiltered: c.Unfiltered, AnyFilter: c.AnyFilter})
	}
	for name, off := range idx.Offsets {
		s.RestoreOffset(name, off)
	}
	qe.stream.start(b)
	qe.stream.signal()
	return nil
}

// stopStreams stops every stream's goroutines (Close).
func (b *Broker) stopStreams() {
	b.mu.Lock()
	var list []*streamState
	for _, v := range b.vhosts {
		v.mu.RLock()
		for _, qe := range v.queues {
			if qe.stream != nil {
				list = append(list, qe.stream)
			}
		}
		v.mu.RUnlock()
	}
	b.mu.Unlock()
	for _, ss := range list {
		ss.close()
	}
}
