package broker

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// Replicated streams, the broker's side (the state machine is in
// streamgroup.go, the store work and the feeding of consumers in
// streamhost.go). A stream declared in a cluster with data groups is
// placed like a quorum queue (placeQuorum; a super stream's partitions
// balanced over the groups, so over their preferred leaders) and its queue
// entity has both repl and stream set; its streamState's own log stays
// empty and its goroutine does not run.
//
//   - basic.publish: the message joins this node's appender of the stream
//     (streamAppender, with the channel's publisher id and sequence);
//     one append command per group round trip carries every message that
//     waited (at most streamChunkBytes of bodies), through the node's
//     group proposer, and becomes one chunk on every replica. Confirms
//     wait for the command's commit: on the group's leader as Raft counts
//     it (PipelineLog.Begin's committed), elsewhere until it is applied
//     on this node.
//     Publishers are held back while more than streamPendingCap bytes wait.
//   - basic.consume: the consumer is a cursor on this node's replica
//     (this node must be a member of the stream's group), resolved there
//     from x-stream-offset or its name's stored offset; deliveries come
//     from the replica as the group applies chunks, and from this node's
//     store for a consumer behind the in-memory tail.
//   - basic.ack: credit back; a named consumer's offset is proposed
//     (StreamStoreOffset), so that it resumes from it through any node.
//   - Retention: the group's leader proposes StreamRetain with its clock
//     once a second for the streams with a retention setting.

// streamAppender gathers this node's publishes to one replicated stream
// while its previous append command is in flight.
type streamAppender struct {
	// mu guards the fields below (a leaf lock: taken under qe.mu).
	mu       sync.Mutex
	pending  []streamAppend
	confirms []streamConfirm
	bytes    int
	inflight bool
	// drained, while over streamPendingCap bytes wait, is closed once
	// they fall under half of it.
	drained chan struct{}
	// spare and spareConfirms are the arrays of an append's lists, given
	// back once it is encoded and answered, for the lists of the next
	// (one append is in flight at a time).
	spare         []streamAppend
	spareConfirms []streamConfirm
}

// streamConfirm is a publisher waiting for the message at index i of the
// appender's pending list (i counts from the batch's start): channel ch's
// confirm seq, or done (a peer's publish over the node link).
type streamConfirm struct {
	i    int
	ch   *channel
	seq  uint64
	done func(error)
}

// publishStreamReplLocked appends msg to replicated stream qe through
// this node's appender; with confirmSeq the confirm waits for the append's
// commit. It reports whether the message went. Hold qe.mu; nothing here
// blocks.
func (ch *channel) publishStreamReplLocked(qe *queueEntity, msg *queue.Message, confirmSeq uint64, throttle *chan struct{}) bool {
	b := ch.c.b
	p := ch.replPublisher(qe, confirmSeq)
	if p == nil {
		return false
	}
	var c *streamConfirm
	if confirmSeq != 0 {
		ch.confirms.hold(confirmSeq)
		c = &streamConfirm{ch: ch, seq: confirmSeq}
	}
	b.appendStreamLocked(qe, p, streamAppend{pub: ch.replPub, seq: ch.replSeq, msg: msg}, c, throttle)
	return true
}

// publishStreamRepl is a peer's publish to replicated stream qe, appended
// through this node's appender with p, its group's proposer here; with id
// the reply (the peer's confirm) waits for the append's commit. Read loop.
func (s *linkServer) publishStreamRepl(qe *queueEntity, p *groupProposer, msg *queue.Message, id uint64) chan struct{} {
	var c *streamConfirm
	if id != 0 {
		c = &streamConfirm{done: func(err error) {
			if err != nil {
				s.reply(id, amqp.InternalError, err.Error(), 0, 0)
			} else {
				s.reply(id, 0, "", 0, 0)
			}
		}}
	}
	var throttle chan struct{}
	seq := s.nextReplSeq()
	qe.mu.Lock()
	s.b.appendStreamLocked(qe, p, streamAppend{pub: s.replPub, seq: seq, msg: msg}, c, &throttle)
	qe.mu.Unlock()
	return throttle
}

// appendStreamLocked adds m to replicated stream qe's appender, starting
// an append with p when none is in flight; c, when set, waits for its
// commit. It sets *throttle while the appender holds too much. Hold qe.mu.
func (b *Broker) appendStreamLocked(qe *queueEntity, p *groupProposer, m streamAppend, c *streamConfirm, throttle *chan struct{}) {
	qe.stats.publish++
	a := &qe.stream.app
	a.mu.Lock()
	if c != nil {
		c.i = len(a.pending)
		a.confirms = append(a.confirms, *c)
	}
	a.pending = append(a.pending, m)
	msg := m.msg
	a.bytes += len(msg.Body)
	if a.bytes > streamPendingCap {
		if a.drained == nil {
			a.drained = make(chan struct{})
		}
		if *throttle == nil {
			*throttle = a.drained
		}
	}
	start := !a.inflight
	a.inflight = true
	a.mu.Unlock()
	if start {
		b.flushStreamAppends(qe, p)
	}
}

// flushStreamAppends proposes the next append command of qe's appender,
// or marks it idle when nothing waits. Called by the publisher that found
// it idle and by the previous command's completion (no lock held but,
// for the first, qe.mu).
func (b *Broker) flushStreamAppends(qe *queueEntity, p *groupProposer) {
	a := &qe.stream.app
	a.mu.Lock()
	n, size := 0, 0
	for n < len(a.pending) && (n == 0 || size+len(a.pending[n].msg.Body) <= streamChunkBytes) {
		size += len(a.pending[n].msg.Body)
		n++
	}
	if n == 0 {
		a.inflight = false
		if a.drained != nil {
			close(a.drained)
			a.drained = nil
		}
		a.mu.Unlock()
		return
	}
	batch, whole := takeList(&a.pending, &a.spare, n)
	k := 0
	for k < len(a.confirms) && a.confirms[k].i < n {
		k++
	}
	confirms, wholeConfirms := takeList(&a.confirms, &a.spareConfirms, k)
	for i := range a.confirms {
		a.confirms[i].i -= n
	}
	a.bytes -= size
	if a.drained != nil && a.bytes <= streamPendingCap/2 {
		close(a.drained)
		a.drained = nil
	}
	a.mu.Unlock()
	// The command is built behind the room the group's log frames it
	// with, so that it is proposed without a copy (replCmd.buf).
	h := p.headroom()
	need := h + 64
	for i := range batch {
		m := batch[i].msg
		need += len(m.Exchange) + len(m.RoutingKey) + len(m.Header) + len(m.Body) + 40
	}
	buf := appendStreamAppendCmd(make([]byte, h, need), qe.repl.key, nowMs(), batch)
	if whole {
		giveBack(&a.mu, &a.spare, batch)
	}
	// The publishers are answered, and the next append proposed, at the
	// first of: the command's commit, when this node leads the group and
	// counts it (the messages are on a majority's disks, and applying an
	// append cannot fail but for a stream deleted meanwhile, to which the
	// publishes were routed); or its outcome on this node.
	var answered atomic.Bool
	answer := func(err error) {
		// A channel's confirms are handed to its connection's writer
		// once for the run of them (one basic.ack for the lot).
		for i, c := range confirms {
			if c.done != nil {
				c.done(err)
				continue
			}
			c.ch.confirms.done(c.seq, err)
			if i+1 == len(confirms) || confirms[i+1].ch != c.ch {
				c.ch.c.confirmReady(c.ch)
			}
		}
		if wholeConfirms {
			giveBack(&a.mu, &a.spareConfirms, confirms)
		}
		b.flushStreamAppends(qe, p)
	}
	committed := func() {
		if answered.CompareAndSwap(false, true) {
			answer(nil)
		}
	}
	p.submitCmd(replCmd{cmd: buf[h:], buf: buf, committed: committed, done: func(r *GroupResult, err error) {
		if err == nil && r.Err != nil {
			err = r.Err
		}
		if err != nil {
			b.log.Warn("replicated stream append failed", zap.String("queue", qe.name), zap.Error(err))
		}
		if answered.CompareAndSwap(false, true) {
			answer(err)
		}
	}})
}

// takeList takes the first n items of *list. All of them: the list's
// array is the caller's until it gives it back (giveBack), and *list goes
// on in *spare's array. Fewer: the items taken share their array with the
// rest, which the caller does not give back.
func takeList[T any](list, spare *[]T, n int) (taken []T, whole bool) {
	if n == len(*list) {
		taken = *list
		*list, *spare = (*spare)[:0], nil
		return taken, true
	}
	taken = (*list)[:n:n]
	*list = (*list)[n:]
	return taken, false
}

// giveBack makes the array of a list takeList took whole the next spare,
// emptied, with mu (the appender's) held.
func giveBack[T any](mu *sync.Mutex, spare *[]T, taken []T) {
	clear(taken)
	mu.Lock()
	*spare = taken[:0]
	mu.Unlock()
}

// replStream returns the group state machine holding replicated stream qe
// on this node (nil when this node is not a member).
func (b *Broker) replStream(qe *queueEntity) *QueueGroup {
	r := &b.repl
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.machines[qe.repl.group]
}

// createStreamRepl makes sure qe's group has the stream (a declaration:
// the create command is idempotent), unless this node's replica has it.
func (b *Broker) createStreamRepl(qe *queueEntity, cls, mth uint16) error {
	if m := b.replStream(qe); m != nil {
		if _, _, _, _, ok := m.StreamOffsets(qe.repl.key); ok {
			return nil
		}
	}
	qe.mu.Lock()
	cfg := qe.stream.s.Config()
	qe.mu.Unlock()
	res, err := b.replCall(qe, GroupStreamCreateCmd(qe.repl.key, cfg), cls, mth)
	if err == nil && res.Err != nil {
		err = amqp.Errorf(amqp.InternalError, cls, mth, "stream '%s': %v", qe.name, res.Err)
	}
	return err
}

// consumeStreamRepl is basic.consume on a replicated stream: a cursor on
// this node's replica, with consumeStream's rules.
func (ch *channel) consumeStreamRepl(qe *queueEntity, m *amqp.BasicConsume, tag string) error {
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
	single := a.single || qe.stream.single
	if single && a.name == "" {
		return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 20,
			"single active consumer on stream queue '%s' in vhost '%s' needs x-stream-consumer-name", qe.name, v.name)
	}
	if _, away := ch.c.b.replAway(qe.repl.group); away {
		// A stream's consumers read a local replica, as in RabbitMQ.
		return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 20,
			"stream queue '%s' in vhost '%s' does not have a running replica on the local node (%s)", qe.name, v.name, ch.c.b.cfg.NodeName)
	}
	g := ch.c.b.replStream(qe)
	if g == nil {
		return groupDown(qe, amqp.ClassBasic, 20)
	}
	cons := &consumer{
		consumerArgs: consumerArgs{Tag: tag, Exclusive: m.Exclusive, Prefetch: ch.prefetch},
		ch:           ch,
		qe:           qe,
	}
	sc := &queue.StreamConsumer{
		Tag: tag, Prefetch: ch.prefetch, Gate: cons, Owner: cons,
		Filters: a.filters, MatchUnfiltered: a.matchUnfiltered,
		Name: a.name, Single: single, Elected: single,
	}
	cons.stream = sc
	partition := 0
	if single {
		partition = v.partitionIndex(qe.name)
		cons.ID = ch.c.b.replConsumerID()
	}
	g.mu.Lock()
	gs := g.streams[qe.repl.key]
	if gs == nil {
		g.mu.Unlock()
		return groupDown(qe, amqp.ClassBasic, 20)
	}
	s := gs.s
	sc.Offset = s.Resolve(a.offset)
	if a.name != "" && a.offset.Kind == queue.OffsetNext {
		if off, ok := s.NamedOffset(a.name); ok {
			sc.Offset = min(max(off+1, s.FirstOffset()), s.NextOffset())
		}
	}
	if single {
		// Waiting until the group (the stream's replicated state)
		// elects it: its join is proposed below, and its consume-ok
		// sent once the join is applied here.
		ch.confirmConsumer(cons, tag, true)
		var consumeOk func()
		if !m.NoWait {
			consumeOk = func() { ch.lateConsumeOk(cons, tag) }
		}
		g.addSACLocked(gs, cons, consumeOk)
	} else {
		s.AddConsumer(sc)
		ch.confirmConsumer(cons, tag, m.NoWait)
	}
	if g.host != nil {
		g.host.dispatchLocked(gs)
	}
	g.mu.Unlock()
	if single {
		ch.c.b.sacJoin(qe.repl.group, qe.repl.key, cons.ID, partition, sc)
	}
	return nil
}

// withReplStream runs f on qe's replica stream under its group's lock,
// then dispatches; nothing when this node has no replica of it.
func (b *Broker) withReplStream(qe *queueEntity, f func(s *queue.Stream)) {
	g := b.replStream(qe)
	if g == nil {
		return
	}
	g.mu.Lock()
	if gs := g.streams[qe.repl.key]; gs != nil {
		f(gs.s)
		if g.host != nil {
			g.host.dispatchLocked(gs)
		}
	}
	g.mu.Unlock()
}

// removeStreamReplConsumer takes cons off its replicated stream.
func (qe *queueEntity) removeStreamReplConsumer(cons *consumer) {
	if cons.stream.Elected {
		qe.vhost.b.removeSAC(qe, cons)
		return
	}
	qe.vhost.b.withReplStream(qe, func(s *queue.Stream) { s.RemoveConsumer(cons.stream) })
}

// settleStreamRepl acknowledges the run of deliveries ps[i:] of one
// replicated stream: credit back, and a named consumer's offset proposed.
// It returns the index after the run.
func (ch *channel) settleStreamRepl(ps []pending, i int) int {
	qe := ps[i].qe
	b := qe.vhost.b
	for i < len(ps) && ps[i].qe == qe {
		cons := ps[i].cons
		j := i
		var last uint64
		for ; j < len(ps) && ps[j].qe == qe && ps[j].cons == cons; j++ {
			last = max(last, ps[j].seq)
		}
		n := j - i
		i = j
		if cons == nil || cons.stream == nil {
			continue
		}
		b.withReplStream(qe, func(s *queue.Stream) { s.Return(cons.stream, n) })
		qe.mu.Lock()
		qe.stats.ack += uint64(n)
		qe.mu.Unlock()
		if name := cons.stream.Name; name != "" {
			if p := b.proposer(qe.repl.group); p != nil {
				p.submit(GroupStreamOffsetCmd(qe.repl.key, name, last), nil)
			}
		}
	}
	return i
}

// streamReturnRepl gives back the credit of the deliveries of ps[i:] of
// replicated stream ps[i].qe and returns the index after them.
func (ch *channel) streamReturnRepl(ps []pending, i int) int {
	qe := ps[i].qe
	j := i
	for j < len(ps) && ps[j].qe == qe {
		j++
	}
	run := ps[i:j]
	qe.vhost.b.withReplStream(qe, func(s *queue.Stream) {
		for _, p := range run {
			if c := p.cons; c != nil && c.stream != nil {
				s.Return(c.stream, 1)
			}
		}
	})
	return j
}

// streamReplCounts returns the messages retained and this node's
// consumers of replicated stream qe, as this node's replica has them.
func (b *Broker) streamReplCounts(qe *queueEntity) (msgs, consumers int) {
	g := b.replStream(qe)
	if g == nil {
		return 0, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if gs := g.streams[qe.repl.key]; gs != nil {
		return int(gs.s.Messages()), len(gs.s.Consumers())
	}
	return 0, 0
}

// streamReplInfo fills in the stream part of a replicated stream's
// management record from this node's replica.
func (b *Broker) streamReplInfo(qe *queueEntity, qi *QueueInfo) {
	qi.Type = "stream"
	qi.Ready, qi.Unacked, qi.Consumers = 0, 0, 0
	g := b.replStream(qe)
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	gs := g.streams[qe.repl.key]
	if gs == nil {
		return
	}
	s := gs.s
	cfg := s.Config()
	qi.Ready, qi.ReadyBytes, qi.Consumers = int(s.Messages()), s.Bytes(), len(s.Consumers())
	si := &StreamInfo{
		FirstOffset: s.FirstOffset(), NextOffset: s.NextOffset(), CommittedOffset: s.CommittedOffset(),
		Segments: s.Segments(), Chunks: s.Chunks(), Bytes: s.Bytes(), MaxBytes: cfg.MaxBytes, MaxAge: cfg.MaxAge,
		StoredOffset: gs.stored,
	}
	for name, off := range s.NamedOffsets() {
		var lag uint64
		if end := s.CommittedOffset(); end > off+1 {
			lag = end - off - 1
		}
		si.Named = append(si.Named, StreamOffsetInfo{Name: name, Offset: off, Lag: lag})
	}
	sort.Slice(si.Named, func(i, j int) bool { return si.Named[i].Name < si.Named[j].Name })
	qi.Stream = si
}

// streamRetainLoop runs while the broker does: once a second, for the
// groups this node leads, it proposes retention at its clock for their
// streams with a retention setting.
func (b *Broker) streamRetainLoop() {
	r := &b.repl
	defer r.wg.Done()
	t := time.NewTicker(streamTick)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case <-t.C:
		}
		r.mu.Lock()
		machines := make(map[uint64]*QueueGroup, len(r.machines))
		for g, m := range r.machines {
			machines[g] = m
		}
		r.mu.Unlock()
		for g, m := range machines {
			if !b.cfg.QuorumGroups.Leader(g) {
				continue
			}
			var keys []GroupQueueKey
			m.mu.Lock()
			for k, gs := range m.streams {
				if cfg := gs.s.Config(); cfg.MaxBytes > 0 || cfg.MaxAge > 0 {
					keys = append(keys, k)
				}
			}
			m.mu.Unlock()
			if len(keys) == 0 {
				continue
			}
			p := b.proposer(g)
			if p == nil {
				continue
			}
			now := nowMs()
			for _, k := range keys {
				p.submit(GroupStreamRetainCmd(k, now), nil)
			}
		}
	}
}

// streamArg reports whether declare arguments ask for a stream.
func streamArg(args amqp.Table) bool {
	switch t := args["x-queue-type"].(type) {
	case string:
		return t == "stream"
	case []byte:
		return string(t) == "stream"
	}
	return false
}
