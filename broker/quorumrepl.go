package broker

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// Replicated quorum queues. In a cluster with data groups
// (Config.QuorumGroups), a quorum queue declared on any node is placed in
// one group (placeQuorum: x-queue-leader-locator client-local, the
// default, picks a group this node is the preferred leader of, balanced
// any group; the one with the fewest queues) and its declaration carries
// the group as its node ("@group/<id>", groupNode), so every node applies
// the same placement and a restarted node recovers it from its records.
// The queue's state is the group's replicated state machine (QueueGroup),
// held by every member; the queueEntity of every node is an entry with
// repl set, whose own queue.Queue stays empty.
//
// What a client does with the queue becomes group commands (quorumgroup.go),
// proposed by the node the client is on through its groupProposer, which
// sends them in order, many to a Raft entry ('B'): up to maxInFlight
// entries in flight per group on the group's leader, one on the other
// members (which forward them):
//
//   - basic.publish: OpEnqueue with the channel's publisher id and a
//     sequence; the publisher's confirm waits for the command to be
//     committed (a majority of the group has it fsynced) and applied on
//     this node, and is a nack when the length limit refused it or the
//     group did not take it in time. While more than replHighBytes of this
//     node's commands wait for a group, its publishers are held back
//     (conn.holdPublisher), as for a deep queue.
//   - basic.consume: the consumer's id names this node and its process
//     (replConsumerID); consume-ok goes out, then OpAttach. Every replica
//     applies the checkouts the group decides (after each enqueue, attach,
//     settle, return) and the node that has the consumer writes its
//     deliveries (observe; with a store, the group's body runner,
//     quorumbodies.go): the bodies are on every member, in RAM or its
//     store, so no delivery crosses the node link.
//   - basic.ack / nack / reject, a channel closed, basic.cancel: OpSettle,
//     OpReturn, OpDiscard, OpDetach by message id.
//   - basic.get, queue.purge: OpGet, OpPurge, answered from the result.
//
// A leader change changes nothing for the consumers: they stay attached in
// the replicated state, hold what they held and are fed by the next
// checkout. A node that restarts, and the leader for a node that is gone
// (replWatch), propose 'O' for that node's consumers: detached, and what
// they held returned (redelivered, x-delivery-count incremented).
//
// A consumer of this node that an 'O' detached while it lives on here (the
// leader lost sight of this node: a partition) is attached again once this
// node applies the 'O'. Settlements and detaches that the group did not
// take (no quorum reachable) are proposed again until it does
// (submitRetried); a basic.get is held by this process's getter id
// (replGetterID), so it comes back like a consumer's delivery.
//
// Time: the leader of each group proposes OpTick, with its clock's time in
// the command, for the queues whose next expiry or x-expires is due
// (tickGroups, from replWatch's timer; a group without such queues costs
// nothing), so every replica expires the same messages. Dead letters
// (expired, rejected, maxlen, delivery_limit) and a queue's expiry are
// carried out by the node that leads the group when it applies the
// command (observe, deadLoop): at most once, x-dead-letter-strategy's
// default — a dead letter decided while the leadership changes hands may
// be republished by neither node. With x-dead-letter-strategy
// at-least-once (and x-overflow reject-publish) the queue keeps its dead
// letters until their targets confirm them, and the group's leader
// republishes them (quorumdlx.go).
//
// Not yet: the channel-wide prefetch and the outbound-buffer gate
// (per-consumer prefetch only); nodes that are not members of the queue's
// group forward its publishes to a member (quorummembers.go) but refuse
// its consumers and gets.

// QuorumGroups reaches a cluster's data groups (cmd/warren adapts the
// cluster package's DataGroups).
type QuorumGroups interface {
	// Groups lists the data groups, empty until the cluster has planned
	// them.
	Groups() []QuorumGroup
	// Log returns the command log of group g on this node, nil when this
	// node is not a member.
	Log(g uint64) CommandLog
	// Leader reports whether this node leads group g.
	Leader(g uint64) bool
	// Alive reports whether node is up as far as this node can tell.
	Alive(node string) bool
	// LeaderName is the name of group g's leader as this node knows it
	// ("" when none, or when this node is not a member).
	LeaderName(g uint64) string
}

// QuorumGroup is a data group: its id and members, the first its
// preferred leader.
type QuorumGroup struct {
	ID      uint64
	Members []string
}

// groupNodePrefix marks a declaration's node naming a data group.
const groupNodePrefix = "@group/"

// groupNode is the node of a queue placed in group g.
func groupNode(g uint64) string { return groupNodePrefix + strconv.FormatUint(g, 10) }

// groupOf returns the group a queue's node names, if it names one.
func groupOf(node string) (uint64, bool) {
	s, ok := strings.CutPrefix(node, groupNodePrefix)
	if !ok {
		return 0, false
	}
	g, err := strconv.ParseUint(s, 10, 64)
	return g, err == nil && g != 0
}

// replQueue is what a replicated quorum queue's entry knows of it.
type replQueue struct {
	group uint64
	key   GroupQueueKey
}

// replState is the broker's side of the data groups on this node.
type replState struct {
	// mu guards the maps; a leaf lock (taken on the groups' apply
	// goroutines, under a group's lock).
	mu        sync.Mutex
	machines  map[uint64]*QueueGroup
	consumers map[queue.ConsumerID]*consumer
	proposers map[uint64]*groupProposer
	closed    bool
	wg        sync.WaitGroup
	done      chan struct{}
	// ctx ends when the broker closes: proposals in flight give up.
	ctx    context.Context
	cancel context.CancelFunc
	// retry gets the earlier processes of this node whose consumers are
	// still to be proposed gone (replWatch).
	retry chan queue.ConsumerID
	// prefix is this process's consumer id prefix (replConsumerID).
	prefix uint64
	next   uint64
	// ticking are the queues with a tick in flight (tickGroups); dead
	// the work of deadLoop, which deadKick wakes.
	ticking  map[GroupQueueKey]bool
	dead     []replDead
	deadKick chan struct{}
	// dlxKick wakes the at-least-once dead-letter worker (quorumdlx.go);
	// dlxConfirmed, the worker's own, are the targets that confirmed
	// each dead letter not settled yet, per queue.
	dlxKick      chan struct{}
	dlxConfirmed map[GroupQueueKey]map[uint64]map[*queueEntity]bool
	// placed is signalled when a replicated queue is placed in a group or
	// a global parameter changes (DataGroupsChanged).
	placed chan struct{}
	// away are the groups this node is not a member of per the plan, with
	// their members (SetQuorumAway, quorummembers.go).
	away map[uint64][]string
}

// Consumer ids of replicated queues: node(20 bits, a hash of the node's
// name) | process incarnation(20 bits, random) | counter(24 bits), unique
// across the cluster, so that the group's consumers of a node (or of one
// of its past processes) are found by their ids.
const (
	replNodeShift = 44
	replIncShift  = 24
	replNodeMask  = queue.ConsumerID(0xFFFFF) << replNodeShift
	replProcMask  = queue.ConsumerID(0xFFFFFFFFFF) << replIncShift
)

func nodeHash(name string) uint64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return uint64(h.Sum32()) & 0xFFFFF
}

func (r *replState) init(node string) {
	var inc [4]byte
	_, _ = rand.Read(inc[:])
	r.prefix = nodeHash(node)<<replNodeShift | (uint64(binary.BigEndian.Uint32(inc[:]))&0xFFFFF)<<replIncShift
	r.machines = make(map[uint64]*QueueGroup)
	r.consumers = make(map[queue.ConsumerID]*consumer)
	r.proposers = make(map[uint64]*groupProposer)
	r.done = make(chan struct{})
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.retry = make(chan queue.ConsumerID, 64)
	r.ticking = make(map[GroupQueueKey]bool)
	r.deadKick = make(chan struct{}, 1)
	r.dlxKick = make(chan struct{}, 1)
	r.placed = make(chan struct{}, 1)
	r.dlxConfirmed = map[GroupQueueKey]map[uint64]map[*queueEntity]bool{}
}

// replicated reports whether the broker places quorum queues in data
// groups.
func (b *Broker) replicated() bool { return b.cfg.QuorumGroups != nil && b.cfg.NodeName != "" }

// QueueGroupMachine returns the state machine of data group g on this
// node, for the group's log (cmd/warren): a QueueGroup whose applied
// deliveries to this node's consumers the broker writes.
func (b *Broker) QueueGroupMachine(g uint64) StateMachine {
	m := NewQueueGroup()
	m.setBodies(b.newGroupBodies(g))
	r := &b.repl
	r.mu.Lock()
	r.machines[g] = m
	r.mu.Unlock()
	m.host = newStreamHost(b, m, g)
	// With a store, the group's bodies runner writes the deliveries
	// (groupBodies.after, in order with paged-out bodies' reads).
	viaBodies := m.bodies != nil
	m.Observe(func(_ uint64, res *GroupResult) { b.observe(g, res, viaBodies) })
	m.OnRestore(func() { b.reattachRestored(g, m) })
	return m
}

// reattachRestored attaches again this node's consumers of group g's
// queues that the state m restored from a snapshot does not have. The
// group detached them (an 'O' while this node was cut off, which
// returned what they held) in commands this node never applied, so
// observe never saw them detached: without this they would stay
// registered here and never be fed. An attach of a consumer the group
// has already (one proposed before the snapshot and applied after it)
// changes nothing.
func (b *Broker) reattachRestored(g uint64, m *QueueGroup) {
	attached := m.attachedIDs()
	r := &b.repl
	r.mu.Lock()
	var lost []*consumer
	for id, cons := range r.consumers {
		if qe := cons.qe; qe.repl != nil && qe.stream == nil && qe.repl.group == g && !attached[id] {
			lost = append(lost, cons)
		}
	}
	r.mu.Unlock()
	for _, cons := range lost {
		b.log.Info("consumer of a quorum queue missing from the group's snapshot this node restored; attaching it again",
			zap.String("queue", cons.qe.name), zap.String("consumer-tag", cons.Tag), zap.Uint64("group", g))
		if p := b.proposer(g); p != nil {
			b.attachRepl(p, cons)
		}
	}
}

// placeQuorum chooses the data group of a new quorum queue (0: the
// cluster has none yet, and the queue stays on this node as on a single
// node).
func (b *Broker) placeQuorum(v *vhost, name string, args amqp.Table) uint64 {
	groups := b.cfg.QuorumGroups.Groups()
	if len(groups) == 0 {
		return 0
	}
	loc, _ := args["x-queue-leader-locator"].(string)
	if loc == "" {
		v.mu.RLock()
		if p := matchPolicy(v.policies.user, name, true); p != nil {
			loc, _ = p.def["queue-leader-locator"].(string)
		}
		v.mu.RUnlock()
	}
	self := b.cfg.NodeName
	cands := groups[:0:0]
	for _, g := range groups {
		if !slices.Contains(g.Members, self) {
			continue // this node could not use it
		}
		if loc != "balanced" && g.Members[0] != self {
			continue
		}
		cands = append(cands, g)
	}
	if len(cands) == 0 {
		for _, g := range groups {
			if slices.Contains(g.Members, self) {
				cands = append(cands, g)
			}
		}
	}
	if len(cands) == 0 {
		return 0
	}
	count := b.quorumQueuesPerGroup()
	best := cands[0].ID
	for _, g := range cands[1:] {
		if count[g.ID] < count[best] {
			best = g.ID
		}
	}
	return best
}

// setRepl makes qe, just declared or recovered with node, a replicated
// queue when node names a group; it reports whether it did.
func (qe *queueEntity) setRepl(node string) bool {
	g, ok := groupOf(node)
	if !ok {
		return false
	}
	qe.repl = &replQueue{group: g, key: GroupQueueKey{VHost: qe.vhost.name, Name: qe.name, ID: qe.id}}
	qe.homeNode = node
	qe.vhost.b.notePlacement()
	return true
}

// DataGroupsChanged is signalled (it has room for one signal) when a
// replicated queue is placed in a data group, or a global parameter (the
// data groups' plan is one) is set or deleted: the node's data groups may
// have to start or change members. Nil on a broker without data groups.
func (b *Broker) DataGroupsChanged() <-chan struct{} { return b.repl.placed }

func (b *Broker) notePlacement() {
	select {
	case b.repl.placed <- struct{}{}:
	default:
	}
}

// errGroupDown is the reply for a replicated queue whose group this node
// cannot reach, or is not a member of.
func groupDown(qe *queueEntity, cls, mth uint16) error {
	return amqp.Errorf(amqp.NotFound, cls, mth, "quorum queue '%s' in vhost '%s' is unavailable: its data group %d has no quorum reachable from this node",
		qe.name, qe.vhost.name, qe.repl.group)
}

// proposer returns this node's proposer of group g, nil when this node is
// not a member or the broker is closed.
func (b *Broker) proposer(g uint64) *groupProposer {
	r := &b.repl
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	if p := r.proposers[g]; p != nil {
		return p
	}
	log := b.cfg.QuorumGroups.Log(g)
	if log == nil {
		return nil
	}
	p := &groupProposer{b: b, g: g, log: log}
	r.proposers[g] = p
	return p
}

// replCmd is a group command waiting to be proposed, and who waits for
// its result.
type replCmd struct {
	cmd []byte
	// buf, when set, holds cmd at its end, behind free room the log may
	// use (PipelineLog.Headroom): a command alone in its entry is then
	// proposed in place, not copied into a batch.
	buf  []byte
	done func(*GroupResult, error)
	// committed, when set, is told of the commit of cmd's entry before
	// done, if the log tells it (PipelineLog.Begin); done comes either
	// way.
	committed func()
}

// PipelineLog is a CommandLog that can have several of this node's
// proposals in flight at once, in order, while this node leads the log's
// group (a data group's Raft log; cmd/warren adapts it).
type PipelineLog interface {
	CommandLog
	// Begin submits cmd behind every command Begin submitted before, and
	// returns without waiting; ok is false, and nothing was submitted,
	// when it cannot (this node does not lead the group). wait, called
	// once, blocks until cmd is applied on this node or fails. A command
	// Begin submitted is never submitted again, so the commands of one
	// caller apply in the order of its calls or not at all; a caller that
	// goes on with Propose first waits for every Begin it made.
	// committed, when not nil, is called once cmd is known committed, if
	// that is known before it is applied (this node leads the group and
	// counted the commit; not otherwise): it must not block.
	//
	// The command is buf[Headroom():]: Begin writes its own framing into
	// buf[:Headroom()] and keeps buf (no copy), which must not change
	// afterwards.
	Begin(buf []byte, committed func()) (wait func() (Applied, error), ok bool)
	// Headroom is how many bytes Begin takes before a command.
	Headroom() int
}

// groupProposer proposes this node's commands to one group, in the order
// they were submitted, many to a Raft entry. While this node leads the
// group (the log is a PipelineLog that takes Begin) up to maxInFlight
// entries are in flight at once: a command waits for no earlier entry's
// commit, only for the entry being formed. Otherwise (this node forwards
// to the leader) one entry is in flight, and whatever waits meanwhile goes
// in the next one.
//
// Order and deduplication: a publisher's enqueues carry increasing
// sequences, and a queue treats a sequence at or below the highest it
// enqueued as a resend (confirmed, not enqueued). So no entry may apply
// after a later one of the same proposer, or its publishes would be
// confirmed without being enqueued: entries in flight with Begin are never
// submitted again (they apply in order or not at all), and a proposal
// with Propose (which may submit its entry again, under the same request
// id) starts only once every entry in flight has its outcome.
type groupProposer struct {
	b   *Broker
	g   uint64
	log CommandLog

	// mu guards the fields below (a leaf lock: submit is called under
	// queue and channel locks).
	mu      sync.Mutex
	pending []replCmd
	bytes   int
	running bool
	// inflight counts the entries begun and not yet completed; moved
	// (Broadcast) when it falls or commands arrive while entries fly.
	inflight int
	moved    sync.Cond
	// drained, while the backlog is over replHighBytes, is closed once it
	// falls to replLowBytes: publishers wait on it (flow control).
	drained chan struct{}
}

// maxBatchBytes bounds the commands of one entry; over replHighBytes of
// commands waiting, publishers are held back (conn.holdPublisher) until
// the backlog falls to replLowBytes. maxInFlight bounds the entries a
// node's proposer has in flight in one group.
const (
	maxBatchBytes = 4 << 20
	replHighBytes = 64 << 20
	replLowBytes  = 16 << 20
	maxInFlight   = 8
)

// submit queues cmd; done (maybe nil) gets its result, on the proposer's
// goroutine. It never blocks: over replHighBytes of backlog it returns a
// channel closed once the backlog has drained to replLowBytes, for the
// caller's publisher to wait on.
func (p *groupProposer) submit(cmd []byte, done func(*GroupResult, error)) (drained chan struct{}) {
	return p.submitCmd(replCmd{cmd: cmd, done: done})
}

// headroom is the free room a command should have before it in its buffer
// for the group's log to propose it in place (replCmd.buf): 0 when the
// log does not pipeline.
func (p *groupProposer) headroom() int {
	if pl, ok := p.log.(PipelineLog); ok {
		return pl.Headroom()
	}
	return 0
}

// submitCmd is submit of c, whose committed, when set, is told of the
// commit of its entry when the log can tell it before c is applied, and
// whose buf may hold its command behind free room (headroom).
func (p *groupProposer) submitCmd(c replCmd) (drained chan struct{}) {
	cmd := c.cmd
	p.mu.Lock()
	if p.moved.L == nil {
		p.moved.L = &p.mu
	}
	p.pending = append(p.pending, c)
	p.bytes += len(cmd)
	if p.bytes > replHighBytes {
		if p.drained == nil {
			p.drained = make(chan struct{})
		}
		drained = p.drained
	}
	start := !p.running
	p.running = true
	if !start && p.inflight > 0 {
		p.moved.Broadcast()
	}
	p.mu.Unlock()
	if !start {
		return drained
	}
	r := &p.b.repl
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		p.failAll(ErrLogClosed)
		return nil
	}
	r.wg.Add(1)
	r.mu.Unlock()
	go p.run()
	return drained
}

// releaseLocked wakes the publishers waiting for the backlog once it is
// low enough (or gone). Hold p.mu.
func (p *groupProposer) releaseLocked() {
	if p.drained != nil && (p.bytes <= replLowBytes || !p.running) {
		close(p.drained)
		p.drained = nil
	}
}

func (p *groupProposer) failAll(err error) {
	p.mu.Lock()
	cmds := p.pending
	p.pending, p.bytes, p.running = nil, 0, false
	p.releaseLocked()
	p.mu.Unlock()
	for _, c := range cmds {
		if c.done != nil {
			c.done(nil, err)
		}
	}
}

// flight is an entry in flight: its commands and how to wait for it.
type flight struct {
	batch []replCmd
	wait  func() (Applied, error)
}

// run proposes batches until nothing waits and nothing is in flight. The
// entries begun are completed, in order, by complete.
func (p *groupProposer) run() {
	defer p.b.repl.wg.Done()
	pl, _ := p.log.(PipelineLog)
	var (
		flights chan *flight
		done    chan struct{}
		cmds    [][]byte
	)
	defer func() {
		if flights != nil {
			close(flights)
			<-done
		}
	}()
	for {
		p.mu.Lock()
		for len(p.pending) == 0 && p.inflight > 0 || len(p.pending) > 0 && p.inflight >= maxInFlight {
			p.moved.Wait()
		}
		n, size := 0, 0
		for n < len(p.pending) && (n == 0 || size+len(p.pending[n].cmd) <= maxBatchBytes) {
			size += len(p.pending[n].cmd)
			n++
		}
		if n == 0 {
			p.running = false
			p.releaseLocked()
			p.mu.Unlock()
			return
		}
		batch := slices.Clone(p.pending[:n])
		clear(p.pending[:n])
		p.pending = p.pending[n:]
		p.bytes -= size
		p.releaseLocked()
		p.inflight++
		p.mu.Unlock()
		h := 0
		if pl != nil {
			h = pl.Headroom()
		}
		var buf []byte
		if c := batch[0]; len(batch) == 1 && c.buf != nil && len(c.buf)-len(c.cmd) >= h {
			// Alone in its entry and built with room for the log's
			// framing: proposed as it is (a command's result is the
			// batch's one result).
			buf = c.buf[len(c.buf)-len(c.cmd)-h:]
		} else {
			cmds = cmds[:0]
			for _, c := range batch {
				cmds = append(cmds, c.cmd)
			}
			buf = groupBatchCmd(h, cmds)
		}
		cmd := buf[h:]
		if pl != nil {
			if wait, ok := pl.Begin(buf, batchCommitted(batch)); ok {
				if flights == nil {
					flights, done = make(chan *flight, maxInFlight), make(chan struct{})
					go p.complete(flights, done)
				}
				flights <- &flight{batch: batch, wait: wait}
				continue
			}
		}
		// Propose may submit the entry again: only once every entry in
		// flight has its outcome.
		p.mu.Lock()
		for p.inflight > 1 {
			p.moved.Wait()
		}
		p.mu.Unlock()
		a, err := p.log.Propose(p.b.repl.ctx, cmd)
		p.finish(batch, a, err)
	}
}

// batchCommitted returns the function telling the commands of batch that
// want it of their entry's commit, in order; nil when none does.
func batchCommitted(batch []replCmd) func() {
	var fs []func()
	for _, c := range batch {
		if c.committed != nil {
			fs = append(fs, c.committed)
		}
	}
	if fs == nil {
		return nil
	}
	return func() {
		for _, f := range fs {
			f()
		}
	}
}

// complete waits for the entries begun, in order, and hands out their
// results; it closes done once flights is closed and drained.
func (p *groupProposer) complete(flights chan *flight, done chan struct{}) {
	defer close(done)
	for f := range flights {
		a, err := f.wait()
		p.finish(f.batch, a, err)
	}
}

// finish hands the results of an entry (or its failure) to the batch's
// callers, and counts the entry out of flight.
func (p *groupProposer) finish(batch []replCmd, a Applied, err error) {
	var rs []*GroupResult
	if err == nil {
		switch r := a.Result.(type) {
		case []*GroupResult:
			rs = r
		case *GroupResult:
			rs = []*GroupResult{r}
		}
		if len(rs) != len(batch) {
			err = ErrGroupCommand
		}
	}
	if err != nil {
		p.b.log.Debug("data group proposal failed", zap.Uint64("group", p.g), zap.Int("commands", len(batch)), zap.Error(err))
	}
	for i, c := range batch {
		if c.done == nil {
			continue
		}
		if err != nil {
			c.done(nil, err)
		} else {
			c.done(rs[i], nil)
		}
	}
	p.mu.Lock()
	p.inflight--
	p.moved.Broadcast()
	p.mu.Unlock()
}

// call proposes cmd to qe's group and waits for its result. No lock held.
func (b *Broker) replCall(qe *queueEntity, cmd []byte, cls, mth uint16) (*GroupResult, error) {
	p := b.proposer(qe.repl.group)
	if p == nil {
		return nil, groupDown(qe, cls, mth)
	}
	ch := make(chan *GroupResult, 1)
	var perr error
	p.submit(cmd, func(r *GroupResult, err error) {
		perr = err
		ch <- r
	})
	r := <-ch
	if perr != nil {
		return nil, groupDown(qe, cls, mth)
	}
	return r, nil
}

// queueCmd is the group command applying c to qe.
func (qe *queueEntity) queueCmd(c *queue.Cmd) []byte {
	return AppendGroupQueueCmd(nil, qe.repl.key, c)
}

// createRepl makes sure qe's group has the queue (a declaration: the
// create command is idempotent), unless this node's replica has it.
func (b *Broker) createRepl(qe *queueEntity, cls, mth uint16) error {
	if qe.stream != nil {
		return b.createStreamRepl(qe, cls, mth)
	}
	if _, away := b.replAway(qe.repl.group); away {
		// The queue is in the definitions, and so in its group (made
		// by a member when it was declared).
		return nil
	}
	r := &b.repl
	r.mu.Lock()
	m := r.machines[qe.repl.group]
	r.mu.Unlock()
	qe.mu.Lock()
	cfg := qe.fx.set.cfg
	qe.mu.Unlock()
	if m != nil {
		if _, _, _, ok := m.Counts(qe.repl.key); ok {
			if cfg.Expires > 0 {
				// A redeclare is a use (x-expires).
				if p := b.proposer(qe.repl.group); p != nil {
					c := queue.Cmd{Op: queue.OpTouch, Now: nowMs()}
					p.submit(qe.queueCmd(&c), nil)
				}
			}
			return nil
		}
	}
	if cfg.DeadLetterAtLeastOnce && !cfg.AtLeastOnce() {
		b.log.Warn("x-dead-letter-strategy at-least-once needs x-overflow reject-publish and a dead-letter exchange: dead-lettering at most once",
			zap.String("queue", qe.name))
	}
	res, err := b.replCall(qe, GroupCreateCmd(qe.repl.key, cfg), cls, mth)
	if err == nil && res.Err != nil {
		err = amqp.Errorf(amqp.InternalError, cls, mth, "quorum queue '%s': %v", qe.name, res.Err)
	}
	return err
}

// replCounts returns qe's ready messages and consumers as this node's
// replica has them.
func (b *Broker) replCounts(qe *queueEntity) (ready, consumers int) {
	if qe.stream != nil {
		return b.streamReplCounts(qe)
	}
	r := &b.repl
	r.mu.Lock()
	m := r.machines[qe.repl.group]
	r.mu.Unlock()
	if m == nil {
		return 0, 0
	}
	ready, _, consumers, _ = m.Counts(qe.repl.key)
	return ready, consumers
}

// replPublisher returns qe's group proposer for a publish of ch, with
// ch's publisher id made and its sequence counted, or nil (the publish
// nacked when confirmSeq is set) when this node has no proposer for the
// group.
func (ch *channel) replPublisher(qe *queueEntity, confirmSeq uint64) *groupProposer {
	p := ch.c.b.proposer(qe.repl.group)
	if p == nil {
		if confirmSeq != 0 {
			ch.confirms.hold(confirmSeq)
			ch.journaled(confirmSeq, errLinkDown)
		}
		return nil
	}
	if ch.replPub == 0 {
		var id [8]byte
		_, _ = rand.Read(id[:])
		ch.replPub = binary.BigEndian.Uint64(id[:]) | 1
	}
	ch.replSeq++
	return p
}

// publishReplLocked proposes the enqueue of msg on qe; with confirmSeq
// the confirm waits for its result. It reports whether the message went,
// and sets *throttle when the group's backlog on this node is over its
// bound. Hold qe.mu; nothing here blocks.
func (ch *channel) publishReplLocked(qe *queueEntity, msg *queue.Message, confirmSeq uint64, throttle *chan struct{}) bool {
	if node, away := ch.c.b.replAway(qe.repl.group); away {
		return ch.forwardReplLocked(qe, node, msg, confirmSeq, throttle)
	}
	if qe.stream != nil {
		return ch.publishStreamReplLocked(qe, msg, confirmSeq, throttle)
	}
	p := ch.replPublisher(qe, confirmSeq)
	if p == nil {
		return false
	}
	c := queue.Cmd{Op: queue.OpEnqueue, Now: nowMs(), TTL: messageTTL(msg.Header), Msg: msg,
		Publisher: queue.PublisherID(ch.replPub), PubSeq: ch.replSeq}
	var done func(*GroupResult, error)
	if confirmSeq != 0 {
		ch.confirms.hold(confirmSeq)
		pubSeq := ch.replSeq
		done = func(r *GroupResult, err error) {
			if err == nil && r.Err != nil {
				err = r.Err
			}
			if err == nil {
				for _, f := range r.Effects {
					if f.Kind == queue.EffReject && f.PubSeq == pubSeq {
						err = errRejectPublish
					}
				}
			}
			ch.journaled(confirmSeq, err)
		}
	}
	qe.stats.publish++
	if d := p.submit(qe.queueCmd(&c), done); d != nil && *throttle == nil {
		*throttle = d
	}
	return true
}

// replConsumerID returns a new consumer id of this process.
func (b *Broker) replConsumerID() queue.ConsumerID {
	r := &b.repl
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next = (r.next + 1) & (1<<replIncShift - 1)
	if r.next == 0 {
		r.next = 1 // 0 is the getter's (replGetterID)
	}
	return queue.ConsumerID(r.prefix | r.next)
}

// replGetterID is the holder id of this process's basic.gets: counter 0,
// which no consumer has.
func (b *Broker) replGetterID() queue.ConsumerID { return queue.ConsumerID(b.repl.prefix) }

// consumeRepl is basic.consume of a replicated queue: consume-ok, then the
// attach; deliveries come as the group applies them (observe).
func (ch *channel) consumeRepl(qe *queueEntity, m *amqp.BasicConsume, tag string, prio int) error {
	if qe.stream != nil {
		return ch.consumeStreamRepl(qe, m, tag)
	}
	b := ch.c.b
	if node, away := b.replAway(qe.repl.group); away {
		return ch.consumeReplVia(qe, node, m, tag, prio)
	}
	p := b.proposer(qe.repl.group)
	if p == nil {
		return groupDown(qe, amqp.ClassBasic, 20)
	}
	cons := &consumer{
		consumerArgs: consumerArgs{ID: b.replConsumerID(), Tag: tag, NoAck: m.NoAck, Exclusive: m.Exclusive,
			Prefetch: ch.prefetch, Priority: prio},
		ch: ch, qe: qe,
	}
	b.registerReplConsumer(cons)
	ch.confirmConsumer(cons, tag, m.NoWait)
	b.attachRepl(p, cons)
	return nil
}

// registerReplConsumer records cons, a consumer of a replicated queue this
// node serves (its client's, or a peer's over the link), where the group's
// deliveries find it (observe).
func (b *Broker) registerReplConsumer(cons *consumer) {
	r := &b.repl
	r.mu.Lock()
	r.consumers[cons.ID] = cons
	r.mu.Unlock()
	qe := cons.qe
	qe.mu.Lock()
	qe.addConsumerLocked(cons)
	qe.mu.Unlock()
}

// attachRepl proposes the attach of cons to its queue's group through p;
// a consumer the group refuses (exclusive use, no quorum) is cancelled.
func (b *Broker) attachRepl(p *groupProposer, cons *consumer) {
	qe := cons.qe
	c := queue.Cmd{Op: queue.OpAttach, Now: nowMs(), Consumer: cons.ID, Tag: cons.Tag, NoAck: cons.NoAck,
		Exclusive: cons.Exclusive, Prefetch: cons.Prefetch, Priority: cons.Priority}
	p.submit(qe.queueCmd(&c), func(res *GroupResult, err error) {
		if err == nil && res.Err == nil {
			return
		}
		if err == nil {
			err = res.Err
		}
		b.log.Info("consumer of a quorum queue not attached; cancelling it", zap.String("queue", qe.name),
			zap.String("consumer-tag", cons.Tag), zap.Error(err))
		b.dropReplConsumer(cons)
		cons.serverCancel()
	})
}

// dropReplConsumer forgets cons on this node.
func (b *Broker) dropReplConsumer(cons *consumer) {
	r := &b.repl
	r.mu.Lock()
	delete(r.consumers, cons.ID)
	r.mu.Unlock()
	qe := cons.qe
	qe.mu.Lock()
	delete(qe.consumers, cons.ID)
	qe.mu.Unlock()
}

// removeReplConsumer is the end of cons (basic.cancel, its channel
// closed): detached in the group. What it holds stays held until its
// channel settles or returns it.
func (qe *queueEntity) removeReplConsumer(cons *consumer) {
	b := qe.vhost.b
	b.dropReplConsumer(cons)
	c := queue.Cmd{Op: queue.OpDetach, Now: nowMs(), Consumer: cons.ID}
	b.submitRetried(qe, qe.queueCmd(&c))
}

// replRetryAfter is how long a settlement or detach that its group did
// not take waits before it is proposed again.
const replRetryAfter = 250 * time.Millisecond

// submitRetried proposes cmd to qe's group until the group takes it (or
// the broker closes): a settlement or a detach lost to a partition or a
// leader change would leave the delivery (or the consumer) held for good.
// Both are idempotent: the group refuses a second one (an id no longer
// held, a consumer no longer attached) without effect.
func (b *Broker) submitRetried(qe *queueEntity, cmd []byte) {
	p := b.proposer(qe.repl.group)
	if p == nil {
		return
	}
	p.submit(cmd, func(_ *GroupResult, err error) {
		if err == nil {
			return
		}
		r := &b.repl
		r.mu.Lock()
		closed := r.closed
		r.mu.Unlock()
		if closed {
			return
		}
		b.log.Debug("data group command not taken; proposing it again", zap.Uint64("group", qe.repl.group), zap.Error(err))
		time.AfterFunc(replRetryAfter, func() { b.submitRetried(qe, cmd) })
	})
}

// settleRepl proposes op (OpSettle, OpReturn, OpDiscard) for the run of
// deliveries ps[i:] of replicated queue qe and returns the index after
// the run. Nothing waits for the result: a settlement the group did not
// take leaves the delivery held by its consumer until the consumer goes.
func (ch *channel) settleRepl(op queue.Op, ps []pending, i int) int {
	qe, cons := ps[i].qe, ps[i].cons
	if qe.stream != nil {
		return ch.settleStreamRepl(ps, i)
	}
	j := i
	seqs := make([]uint64, 0, len(ps)-i)
	for ; j < len(ps) && ps[j].qe == qe && ps[j].cons == cons; j++ {
		seqs = append(seqs, ps[j].seq)
	}
	if cons != nil && cons.via != nil {
		cons.via.sendSettle(linkOp(op), qe, seqs)
		return j
	}
	b := qe.vhost.b
	holder := b.replGetterID()
	if cons != nil {
		holder = cons.ID
	} else if seqs = ch.settleGetsVia(op, qe, seqs); len(seqs) == 0 {
		return j
	}
	b.settleReplSeqs(qe, op, seqs, holder)
	return j
}

// settleReplSeqs proposes op for the deliveries seqs of qe held by
// holder (the group passes over those it no longer holds: returned when
// its node was out of sight, maybe delivered to another consumer since).
func (b *Broker) settleReplSeqs(qe *queueEntity, op queue.Op, seqs []uint64, holder queue.ConsumerID) {
	c := queue.Cmd{Op: op, Now: nowMs(), Consumer: holder}
	if len(seqs) == 1 {
		c.Seq = seqs[0]
	} else {
		c.Seqs = seqs
	}
	qe.mu.Lock()
	switch op {
	case queue.OpSettle, queue.OpDiscard:
		qe.stats.ack += uint64(len(seqs))
	}
	qe.mu.Unlock()
	b.submitRetried(qe, qe.queueCmd(&c))
}

// observe carries out what a group command applied on this node means
// for this node's clients: the deliveries to its consumers. It runs on
// the group's apply goroutine, under the group's lock: it only appends to
// channels' outbound buffers and submits proposals.
//
// A delivery to a consumer of this process that this node no longer has
// (its detach is still to be taken) is returned; a consumer of this
// process that an 'O' detached (the group's leader lost sight of this
// node for a while: a partition) is attached again, as it still is here.
//
// On the group's leader it also hands dead letters and the queue's expiry
// to deadLoop: only the node that leads the group when it applies the
// command republishes a dead letter (none may, across a change of leader:
// at most once, x-dead-letter-strategy's default).
func (b *Broker) observe(g uint64, res *GroupResult, viaBodies bool) {
	r := &b.repl
	leader := -1
	for i := range res.Effects {
		f := &res.Effects[i]
		if f.Kind == queue.EffDeadLetter || f.Kind == queue.EffExpired {
			if leader < 0 {
				leader = 0
				if b.cfg.QuorumGroups.Leader(g) {
					leader = 1
				}
			}
			if leader == 1 && f.Held {
				// Kept by the queue until its targets confirm it: the
				// dead-letter worker republishes it (quorumdlx.go).
				b.kickDLX()
			} else if leader == 1 && !(viaBodies && f.Kind == queue.EffDeadLetter && f.Entry.Msg == nil) {
				// (A paged-out message's body is read by the group's
				// bodies runner, which hands the dead letter on.)
				b.queueDead(replDead{key: res.Key, dl: queue.DeadLetter{Entry: f.Entry, Reason: f.Reason},
					expired: f.Kind == queue.EffExpired})
			}
			continue
		}
		if f.Kind != queue.EffDeliver || f.Consumer == 0 || viaBodies {
			continue
		}
		r.mu.Lock()
		cons := r.consumers[f.Consumer]
		r.mu.Unlock()
		if cons != nil && res.Now != 0 && nowMs()-res.Now > replLateMs {
			// Decided long ago: this node was cut off meanwhile, and
			// the group may have returned it and handed it to another
			// consumer since. Returned if cons still holds it.
			if !cons.NoAck {
				b.returnOrphan(res.Key, f.Entry.Seq, f.Consumer)
			}
		} else if cons != nil {
			cons.deliverRepl(&f.Entry)
		} else if uint64(f.Consumer&replProcMask) == r.prefix {
			b.returnOrphan(res.Key, f.Entry.Seq, f.Consumer)
		}
	}
	for _, id := range res.Detached {
		r.mu.Lock()
		cons := r.consumers[id]
		r.mu.Unlock()
		if cons != nil {
			b.reattachRepl(cons)
		}
	}
}

// replLateMs is how old (by the command's time) a delivery this node
// applies may be and still be written to its consumer: one older was
// decided while this node could not apply it (cut off, catching up), and
// an 'O' may have returned it since; it is returned instead (if its
// consumer still holds it), and comes again flagged redelivered. The
// command's time is its proposing node's when it was submitted, so this
// bounds the proposer's backlog too (a delivery it makes late is a
// redelivery, not a loss), and nodes' clocks must agree to well within it.
const replLateMs = 5000

// returnOrphan returns the delivery seq of queue k held by holder, a
// consumer of this process that is gone here (or that gets it late). It
// runs under the group's lock: it only submits.
func (b *Broker) returnOrphan(k GroupQueueKey, seq uint64, holder queue.ConsumerID) {
	v := b.vhost(k.VHost)
	if v == nil {
		return
	}
	v.mu.RLock()
	qe := v.queues[k.Name]
	v.mu.RUnlock()
	if qe == nil || qe.repl == nil || qe.repl.key != k {
		return
	}
	c := queue.Cmd{Op: queue.OpReturn, Now: nowMs(), Seq: seq, Consumer: holder}
	b.submitRetried(qe, qe.queueCmd(&c))
}

// reattachRepl attaches cons again after the group detached it while it
// lives on here. What it held was returned: its acks of those find
// nothing to settle.
func (b *Broker) reattachRepl(cons *consumer) {
	qe := cons.qe
	b.log.Info("consumer of a quorum queue detached by its group while alive here; attaching it again",
		zap.String("queue", qe.name), zap.String("consumer-tag", cons.Tag))
	if p := b.proposer(qe.repl.group); p != nil {
		b.attachRepl(p, cons)
	}
}

// deliverRepl writes a delivery of a replicated queue to cons, or returns
// it to the group when cons is gone.
func (ch *channel) deliverRepl(cons *consumer, e *queue.Entry) {
	qe := cons.qe
	ch.mu.Lock()
	if ch.closed || ch.consumers[cons.Tag] != cons {
		ch.mu.Unlock()
		if !cons.NoAck {
			qe.vhost.b.settleReplSeqs(qe, queue.OpReturn, []uint64{e.Seq}, cons.ID)
		}
		return
	}
	msg := qe.deliveryMessage(e, false)
	ch.stats.countDeliveryLocked(cons.NoAck, e.Redelivered)
	ch.nextTag++
	tag := ch.nextTag
	if !cons.NoAck {
		ch.unacked.push(pending{tag: tag, qe: qe, cons: cons, seq: e.Seq, at: ch.c.b.ct.now.Load()})
		ch.globalUnacked.Add(1)
	}
	o := ch.c.out
	o.lock()
	was := len(o.buf) + len(o.segs)
	start := len(o.buf)
	m := amqp.BasicDeliver{ConsumerTag: cons.Tag, DeliveryTag: tag, Redelivered: e.Redelivered,
		Exchange: msg.Exchange, RoutingKey: msg.RoutingKey}
	o.buf = appendMethod(o.buf, ch.id, &m)
	added := ch.appendContentLocked(msg)
	o.unlock(len(o.buf) - start + added)
	ch.mu.Unlock()
	if was == 0 {
		o.wake()
	}
}

// getRepl is basic.get of a replicated queue.
func (ch *channel) getRepl(qe *queueEntity, m *amqp.BasicGet) error {
	if node, away := ch.c.b.replAway(qe.repl.group); away {
		return ch.getReplVia(qe, node, m)
	}
	// Held by this process's getter id, so that it comes back when this
	// node dies, as a consumer's deliveries do.
	c := queue.Cmd{Op: queue.OpGet, Now: nowMs(), NoAck: m.NoAck, Consumer: ch.c.b.replGetterID()}
	res, err := ch.c.b.replCall(qe, qe.queueCmd(&c), amqp.ClassBasic, 70)
	if err != nil {
		return err
	}
	var e *queue.Entry
	for i := range res.Effects {
		if f := &res.Effects[i]; f.Kind == queue.EffDeliver && f.Consumer == 0 {
			e = &f.Entry
		}
	}
	if e == nil {
		ch.stats.getEmpty.Add(1)
		ch.c.send(ch.id, &amqp.BasicGetEmpty{})
		return nil
	}
	if e.Msg == nil && res.body != nil {
		e.Msg = <-res.body // paged out: read by the group's body runner
	}
	if e.Msg == nil {
		return amqp.Errorf(amqp.InternalError, amqp.ClassBasic, 70, "quorum queue '%s': message %d could not be read", qe.name, e.Seq)
	}
	ready, _ := ch.c.b.replCounts(qe)
	if ch.sendGetOk(qe, e.Seq, m.NoAck, e.Redelivered, qe.deliveryMessage(e, true), ready) {
		ch.c.out.wake()
	}
	return nil
}

// purgeRepl is queue.purge of a replicated queue.
func (ch *channel) purgeRepl(qe *queueEntity, m *amqp.QueuePurge) error {
	if node, away := ch.c.b.replAway(qe.repl.group); away {
		return ch.purgeReplVia(qe, node, m)
	}
	c := queue.Cmd{Op: queue.OpPurge, Now: nowMs()}
	res, err := ch.c.b.replCall(qe, qe.queueCmd(&c), amqp.ClassQueue, 30)
	if err != nil {
		return err
	}
	if !m.NoWait {
		ch.c.send(ch.id, &amqp.QueuePurgeOk{MessageCount: uint32(len(res.Effects))})
	}
	return nil
}

// deleteRepl is queue.delete of a replicated queue: the definition goes,
// then the queue's state in its group.
func (ch *channel) deleteRepl(qe *queueEntity, m *amqp.QueueDelete) (int, error) {
	const cls, mth = amqp.ClassQueue, 40
	msgs, conss := ch.c.b.replCounts(qe)
	if node, away := ch.c.b.replAway(qe.repl.group); away && qe.stream == nil {
		var err error
		if msgs, conss, err = ch.c.b.statusReplVia(qe, node, cls, mth); err != nil {
			return 0, err
		}
	}
	v := qe.vhost
	switch {
	case m.IfUnused && conss > 0:
		return 0, amqp.Errorf(amqp.PreconditionFailed, cls, mth, "queue '%s' in vhost '%s' in use", qe.name, v.name)
	case m.IfEmpty && msgs > 0:
		return 0, amqp.Errorf(amqp.PreconditionFailed, cls, mth, "queue '%s' in vhost '%s' not empty", qe.name, v.name)
	}
	r := v.b.propose(&defCmd{Op: opDeleteQueue, VHost: v.name, VHostID: v.storeID, Name: qe.name, ID: qe.id})
	if r.err != nil {
		return 0, r.err
	}
	if p := v.b.proposer(qe.repl.group); p != nil {
		p.submit(GroupDeleteCmd(qe.repl.key), nil)
	}
	return msgs, nil
}

// replWatchEvery is how often the broker looks for gone consumers of
// replicated queues; replGoneAfter how long a node must look down before
// the leader of a group returns what its consumers held.
const (
	replWatchEvery = 500 * time.Millisecond
	replGoneAfter  = 3 * time.Second
)

// replWatch runs while the broker does: for each group this node is a
// member of, it proposes 'O' for the consumers of this node's earlier
// processes its replica holds (they died with them), once each; and for each group it leads, it
// proposes 'O' for the consumers of nodes down for replGoneAfter.
func (b *Broker) replWatch() {
	r := &b.repl
	defer r.wg.Done()
	t := time.NewTimer(replWatchEvery)
	defer t.Stop()
	// proposed are the earlier processes of this node whose consumers
	// were proposed gone.
	proposed := map[queue.ConsumerID]bool{}
	downSince := map[uint64]time.Time{}
	// seen is, per group, the consumer ids its replica held at an applied
	// index: a group whose state did not change since is not scanned
	// again, so idle queues cost nothing here however many there are.
	type scan struct {
		index uint64
		ids   []queue.ConsumerID
	}
	seen := map[uint64]scan{}
	self := nodeHash(b.cfg.NodeName)
	var watched time.Time
	for {
		select {
		case <-r.done:
			return
		case <-t.C:
		}
		// Ticks are due as the group's queues say; the watch for gone
		// consumers runs every replWatchEvery.
		wait := replWatchEvery - time.Since(watched)
		if next := b.tickGroups(); next != 0 {
			wait = min(wait, max(time.Duration(next-nowMs())*time.Millisecond, replMinTick))
		}
		if wait > 0 && !watched.IsZero() {
			t.Reset(wait)
			continue
		}
		watched = time.Now()
		t.Reset(replWatchEvery)
		for len(r.retry) > 0 {
			delete(proposed, <-r.retry)
		}
		names := map[uint64]string{}
		if b.cfg.Link != nil {
			for _, n := range b.cfg.Link.Nodes() {
				names[nodeHash(n)] = n
			}
		}
		r.mu.Lock()
		machines := make(map[uint64]*QueueGroup, len(r.machines))
		for g, m := range r.machines {
			machines[g] = m
		}
		r.mu.Unlock()
		for g, m := range machines {
			p := b.proposer(g)
			if p == nil {
				continue
			}
			sc, ok := seen[g]
			if idx := m.AppliedIndex(); !ok || idx != sc.index {
				sc = scan{index: idx, ids: m.consumerIDs()}
				seen[g] = sc
			}
			ids := sc.ids
			for _, id := range ids {
				proc := id & replProcMask
				if uint64(id>>replNodeShift) != self || uint64(proc) == r.prefix || proposed[proc] {
					continue
				}
				proposed[proc] = true
				b.log.Info("returning the deliveries of this node's earlier process", zap.Uint64("group", g))
				p.submit(GroupGoneCmd(replProcMask, proc, nowMs()), func(_ *GroupResult, err error) {
					if err != nil {
						select {
						case r.retry <- proc: // not taken: again next time
						default:
						}
					}
				})
			}
			if !b.cfg.QuorumGroups.Leader(g) {
				continue
			}
			nodes := map[uint64]bool{}
			for _, id := range ids {
				if h := uint64(id >> replNodeShift); h != self {
					nodes[h] = true
				}
			}
			now := time.Now()
			for h := range nodes {
				name, known := names[h]
				if known && b.cfg.QuorumGroups.Alive(name) {
					delete(downSince, h)
					continue
				}
				since, ok := downSince[h]
				if !ok {
					downSince[h] = now
					continue
				}
				if now.Sub(since) < replGoneAfter {
					continue
				}
				delete(downSince, h)
				b.log.Info("returning the deliveries of a node that is gone", zap.String("peer", name), zap.Uint64("group", g))
				p.submit(GroupGoneCmd(replNodeMask, queue.ConsumerID(h<<replNodeShift), nowMs()), nil)
			}
		}
	}
}

// replMinTick is the shortest wait between two rounds of ticks.
const replMinTick = 5 * time.Millisecond

// tickGroups proposes OpTick, at this node's time, for the queues due one
// in the groups this node leads (message TTL, x-expires: the time is in
// the command, so every replica expires the same messages), one tick in
// flight per queue. It returns when the next is due (unix ms, 0: none).
// Groups with no queue that needs ticks cost a map lookup.
func (b *Broker) tickGroups() int64 {
	r := &b.repl
	r.mu.Lock()
	machines := make(map[uint64]*QueueGroup, len(r.machines))
	for g, m := range r.machines {
		machines[g] = m
	}
	r.mu.Unlock()
	var next int64
	for g, m := range machines {
		if !m.hasTimed() || !b.cfg.QuorumGroups.Leader(g) {
			continue
		}
		now := nowMs()
		keys, nx := m.due(now)
		if nx != 0 && (next == 0 || nx < next) {
			next = nx
		}
		var p *groupProposer
		for _, k := range keys {
			r.mu.Lock()
			busy := r.ticking[k]
			if !busy {
				r.ticking[k] = true
			}
			r.mu.Unlock()
			if busy {
				continue
			}
			if p == nil {
				if p = b.proposer(g); p == nil {
					break
				}
			}
			c := queue.Cmd{Op: queue.OpTick, Now: now}
			p.submit(AppendGroupQueueCmd(nil, k, &c), func(*GroupResult, error) {
				r.mu.Lock()
				delete(r.ticking, k)
				r.mu.Unlock()
			})
		}
	}
	return next
}

// replDead is a dead letter (or, with expired, a queue's expiry) of a
// replicated queue, for the dead-letter worker of the group's leader.
// queueDead hands d to deadLoop.
func (b *Broker) queueDead(d replDead) {
	r := &b.repl
	r.mu.Lock()
	r.dead = append(r.dead, d)
	r.mu.Unlock()
	select {
	case r.deadKick <- struct{}{}:
	default:
	}
}

type replDead struct {
	key     GroupQueueKey
	dl      queue.DeadLetter
	expired bool
}

// deadLoop carries out, off the groups' apply goroutines, the dead
// letters and expiries that the groups this node leads decided: dead
// letters republished to the queue's dead-letter exchange (at most once:
// by the node leading the group when it applied the command), expired
// queues deleted.
func (b *Broker) deadLoop() {
	r := &b.repl
	defer r.wg.Done()
	for {
		select {
		case <-r.done:
			return
		case <-r.deadKick:
		}
		r.mu.Lock()
		work := r.dead
		r.dead = nil
		r.mu.Unlock()
		now := time.Now()
		for i := range work {
			w := &work[i]
			qe := b.replEntity(w.key)
			if qe == nil {
				continue
			}
			if w.expired {
				b.expireRepl(qe)
				continue
			}
			qe.mu.Lock()
			set := qe.fx.set
			qe.mu.Unlock()
			if set.hasDLX {
				qe.vhost.deadLetter(qe.name, &set, &w.dl, now, 0)
			}
		}
	}
}

// replEntity returns this node's entry of replicated queue k, nil when
// it has none.
func (b *Broker) replEntity(k GroupQueueKey) *queueEntity {
	v := b.vhost(k.VHost)
	if v == nil {
		return nil
	}
	v.mu.RLock()
	qe := v.queues[k.Name]
	v.mu.RUnlock()
	if qe == nil || qe.repl == nil || qe.repl.key != k {
		return nil
	}
	return qe
}

// expireRepl deletes a replicated queue whose x-expires ran out: its
// definition, then its state in the group. A deletion that fails is
// tried again at a later tick (the queue stays expired).
func (b *Broker) expireRepl(qe *queueEntity) {
	v := qe.vhost
	r := v.b.propose(&defCmd{Op: opDeleteQueue, VHost: v.name, VHostID: v.storeID, Name: qe.name, ID: qe.id})
	if r.err != nil {
		b.log.Warn("expiring quorum queue", zap.String("queue", qe.name), zap.Error(r.err))
		return
	}
	if p := b.proposer(qe.repl.group); p != nil {
		p.submit(GroupDeleteCmd(qe.repl.key), nil)
	}
}

// setConfigRepl applies a policy change to replicated queue qe: the node
// leading its group proposes OpSetConfig (every node applies the policy to
// its definitions; one proposal is enough). A change the group does not
// take (its leader changed meanwhile) waits for the next policy change.
func (b *Broker) setConfigRepl(qe *queueEntity, cfg queue.Config, now int64) {
	if !b.cfg.QuorumGroups.Leader(qe.repl.group) {
		return
	}
	if p := b.proposer(qe.repl.group); p != nil {
		c := queue.Cmd{Op: queue.OpSetConfig, Now: now, Config: cfg}
		p.submit(qe.queueCmd(&c), nil)
	}
}

// enqueueRepl publishes a message the broker made (a dead letter) to
// replicated queue qe: no publisher id, nothing waits for the result.
func (b *Broker) enqueueRepl(qe *queueEntity, msg *queue.Message) {
	p := b.proposer(qe.repl.group)
	if p == nil {
		return
	}
	c := queue.Cmd{Op: queue.OpEnqueue, Now: nowMs(), TTL: messageTTL(msg.Header), Msg: msg}
	qe.mu.Lock()
	qe.stats.publish++
	qe.mu.Unlock()
	p.submit(qe.queueCmd(&c), nil)
}

// startRepl starts the watcher of replicated queues (Serve).
func (b *Broker) startRepl() {
	if !b.replicated() {
		return
	}
	r := &b.repl
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.wg.Add(4)
	go b.replWatch()
	go b.deadLoop()
	go b.dlxLoop()
	go b.streamRetainLoop()
}

// closeRepl stops the proposers and the watcher and waits for them.
func (b *Broker) closeRepl() {
	r := &b.repl
	r.mu.Lock()
	if r.closed || r.done == nil {
		r.closed = true
		r.mu.Unlock()
		return
	}
	r.closed = true
	close(r.done)
	r.cancel()
	r.mu.Unlock()
	r.wg.Wait()
}

// consumerIDs returns the ids of the consumers of every queue of the
// group, and of the consumers whose deliveries are still held.
func (g *QueueGroup) consumerIDs() []queue.ConsumerID {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ids []queue.ConsumerID
	for _, q := range g.queues {
		ids = q.ConsumerIDs(ids)
		ids = q.HolderIDs(ids)
	}
	return g.sacIDsLocked(ids)
}

// quorumArg reports whether declare arguments ask for a quorum queue.
func quorumArg(args amqp.Table) bool {
	switch t := args["x-queue-type"].(type) {
	case string:
		return t == "quorum"
	case []byte:
		return string(t) == "quorum"
	}
	return false
}

// replInfo fills in what the management API shows of a replicated quorum
// queue: the counts of this node's replica, the group's leader, members
// and the members online. ok is false once the queue was deleted.
func (qe *queueEntity) replInfo(qi QueueInfo) (QueueInfo, bool) {
	b := qe.vhost.b
	qe.mu.Lock()
	deleted := qe.deleted
	qi.Stats = qe.stats.export()
	qe.mu.Unlock()
	if deleted {
		return qi, false
	}
	qi.Type = "quorum"
	if qe.stream != nil {
		b.streamReplInfo(qe, &qi)
	}
	r := &b.repl
	r.mu.Lock()
	m := r.machines[qe.repl.group]
	r.mu.Unlock()
	if m != nil && qe.stream == nil {
		qi.Ready, qi.Unacked, qi.Consumers, _ = m.Counts(qe.repl.key)
		qi.ReadyBytes, qi.PagedOut, qi.PagedOutBytes, qi.UnackedBytes = m.bytes(qe.repl.key)
		qi.DeadLettered, qi.DeadLetteredBytes = m.discardCount(qe.repl.key)
	}
	qg := b.cfg.QuorumGroups
	qi.Leader = qg.LeaderName(qe.repl.group)
	qi.Node = qi.Leader
	for _, g := range qg.Groups() {
		if g.ID != qe.repl.group {
			continue
		}
		qi.Members = slices.Clone(g.Members)
		for _, n := range g.Members {
			if qg.Alive(n) {
				qi.Online = append(qi.Online, n)
			}
		}
	}
	qi.Unavailable = len(qi.Online) <= len(qi.Members)/2
	return qi, true
}
