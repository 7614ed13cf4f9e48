package broker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/warrenmq/warren/queue"
	"github.com/warrenmq/warren/store"
)

// Data groups. In a cluster a quorum queue lives in one of a bounded pool
// of Raft groups (the cluster package runs them; DESIGN.md "Cluster (HA)").
// Each group's state machine is a QueueGroup: the queue state machines
// (package queue) of every quorum queue placed in the group, keyed by
// vhost, name and definition id (so a queue deleted and declared again is
// a new one). A group command names one queue and carries either its
// creation (with its configuration), its deletion, or one queue.Cmd in the
// queue's own encoding (queue.AppendCmd):
//
//	'C' key config      create the queue (a no-op when it exists)
//	'D' key             delete the queue
//	'Q' key command     apply a queue command
//	'B' n (len cmd)...  n commands of the kinds above or 'O', in order
//	                    (one Raft entry for many proposals)
//	'O' mask value now  the consumers whose ids match (id&mask == value)
//	                    are gone (their node died or restarted): in every
//	                    queue they are detached and what they held returned
//	key: vhost(uvarint length, bytes) name(same) id(uvarint)
//
// After a queue command that can make a delivery possible (enqueue,
// attach, settle, return, discard, set-config) and after 'O', the group
// applies a checkout (queue.OpCheckout at the command's time) itself: the
// deliveries are part of the command's effects, decided alike on every
// replica, so no node has to propose them.
//
// Every replica applies every command and so holds the same state; Apply's
// result is the command's effects (a *GroupResult; a []*GroupResult for
// 'B' and 'O', one per command or queue), which the proposer's node gets.
// With a store, each replica keeps only a window of each queue's bodies in
// RAM and the rest in its store (quorumbodies.go).
//
// A snapshot holds every queue of the group: count, then per queue (sorted
// by key) its key and its queue.Snapshot (a paged-out message as its index
// only); then, when the group stores bodies, per queue in the same order
// its id and its stored bodies, streamed:
//
//	bodies  (uvarint id(store.ReplID), (uvarint seq, str exchange,
//	        str routing key, bytes header, bytes body)..., uvarint 0)...

// Group command kinds.
const (
	groupCreate = 'C'
	groupDelete = 'D'
	groupQueue  = 'Q'
	groupBatch  = 'B'
	groupGone   = 'O'
)

// GroupQueueKey names a quorum queue in a data group.
type GroupQueueKey struct {
	VHost string
	Name  string
	ID    uint64
}

func (k GroupQueueKey) String() string { return fmt.Sprintf("%s/%s#%d", k.VHost, k.Name, k.ID) }

func compareKeys(a, b GroupQueueKey) int {
	if c := strings.Compare(a.VHost, b.VHost); c != 0 {
		return c
	}
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	switch {
	case a.ID < b.ID:
		return -1
	case a.ID > b.ID:
		return 1
	}
	return 0
}

func appendGroupKey(b []byte, k GroupQueueKey) []byte {
	b = appendS(b, k.VHost)
	b = appendS(b, k.Name)
	return appendU(b, k.ID)
}

func readGroupKey(d *linkDecoder) GroupQueueKey {
	return GroupQueueKey{VHost: d.s(), Name: d.s(), ID: d.u()}
}

// GroupCreateCmd is the group command creating queue k with cfg.
func GroupCreateCmd(k GroupQueueKey, cfg queue.Config) []byte {
	b := appendGroupKey([]byte{groupCreate}, k)
	return queue.AppendConfig(b, &cfg)
}

// GroupDeleteCmd is the group command deleting queue k.
func GroupDeleteCmd(k GroupQueueKey) []byte { return appendGroupKey([]byte{groupDelete}, k) }

// AppendGroupQueueCmd appends the group command applying cmd to queue k
// to b.
func AppendGroupQueueCmd(b []byte, k GroupQueueKey, cmd *queue.Cmd) []byte {
	b = appendGroupKey(append(b, groupQueue), k)
	return queue.AppendCmd(b, cmd)
}

var (
	// ErrGroupNoQueue is a group command's result for a queue the group
	// does not have (never created, or deleted).
	ErrGroupNoQueue = errors.New("broker: no such queue in the data group")
	// ErrGroupCommand is the result of a command that does not decode.
	ErrGroupCommand = errors.New("broker: bad data group command")
)

// GroupResult is what a group command came to: the effects of a queue
// command (queue.Apply's), or its refusal.
type GroupResult struct {
	Key     GroupQueueKey
	Effects []queue.Effect
	Err     error
	// body, on this node, gets the body of a basic.get's paged-out
	// message (nil if it could not be read).
	body chan *queue.Message
	// Detached are the consumers an 'O' command detached from the queue.
	Detached []queue.ConsumerID
	// Now is the command's time (unix ms; 0: none).
	Now int64
}

// QueueGroup is a data group's state machine (StateMachine): the queues
// of the group. The log calls Apply, Snapshot and Restore from its one
// apply goroutine; readers (Queues, Ready) take mu.
type QueueGroup struct {
	// mu guards queues and last; held while a command applies.
	mu     sync.Mutex
	queues map[GroupQueueKey]*queue.Queue
	last   uint64
	// timed are the queues that may need ticks (OpTick): a message TTL,
	// an x-expires, or messages published with an expiration.
	timed map[GroupQueueKey]bool
	// dlx are the queues that may hold discards (at-least-once dead
	// letters, quorumdlx.go), for the dead-letter worker; forgotten by
	// discardKeys once they hold none.
	dlx map[GroupQueueKey]bool
	// streams are the group's replicated streams (streamgroup.go), host
	// this node's side of them (nil: no I/O).
	streams map[GroupQueueKey]*groupStream
	host    *streamHost
	// sacLocal are this node's members of the streams' consumer groups
	// by id (streamsac.go). Not state.
	sacLocal map[queue.ConsumerID]sacLocal
	// observe, when set, is called after each command applied, with mu
	// held (the broker's effect executor on the group's leader).
	observe func(index uint64, r *GroupResult)
	// bodies keeps the bodies beyond the window in this node's store
	// (quorumbodies.go); nil without a store. Not state.
	bodies *groupBodies
	// restored, when set, is called after a snapshot is restored, with
	// mu not held (the broker attaching its consumers again). Not state.
	restored func()
}

var _ StateMachine = (*QueueGroup)(nil)

// NewQueueGroup returns an empty group state machine.
func NewQueueGroup() *QueueGroup {
	return &QueueGroup{queues: make(map[GroupQueueKey]*queue.Queue), timed: make(map[GroupQueueKey]bool),
		dlx: make(map[GroupQueueKey]bool)}
}

// GroupBatchCmd is the group command applying cmds in order.
func GroupBatchCmd(cmds [][]byte) []byte {
	return groupBatchCmd(0, cmds)
}

// groupBatchCmd is GroupBatchCmd behind h free bytes (replCmd.buf).
func groupBatchCmd(h int, cmds [][]byte) []byte {
	n := h
	for _, c := range cmds {
		n += len(c) + 4
	}
	b := appendU(append(make([]byte, h, n+8), groupBatch), uint64(len(cmds)))
	for _, c := range cmds {
		b = appendS(b, c)
	}
	return b
}

// GroupGoneCmd is the group command detaching the consumers whose ids
// match (id&mask == value) and returning what they held, at now.
func GroupGoneCmd(mask, value queue.ConsumerID, now int64) []byte {
	b := appendU([]byte{groupGone}, uint64(mask))
	b = appendU(b, uint64(value))
	return appendU(b, uint64(now))
}

// Apply implements StateMachine: it returns a *GroupResult, or a
// []*GroupResult for a batch or a gone-consumers command.
func (g *QueueGroup) Apply(index uint64, cmd []byte) any {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.last = index
	switch {
	case len(cmd) > 0 && cmd[0] == groupBatch:
		d := linkDecoder{b: cmd[1:]}
		n := d.u()
		if d.err != nil || n > uint64(len(d.b)) {
			return []*GroupResult{g.done(index, &GroupResult{Err: ErrGroupCommand})}
		}
		out := make([]*GroupResult, 0, n)
		for range n {
			sub := d.raw()
			if d.err != nil {
				out = append(out, g.done(index, &GroupResult{Err: ErrGroupCommand}))
				break
			}
			if len(sub) > 0 && sub[0] == groupGone {
				// Its results, one per queue, went to the observer;
				// the batch reports the first (or none).
				rs := g.applyGone(index, sub[1:])
				if len(rs) == 0 {
					rs = append(rs, &GroupResult{})
				}
				out = append(out, rs[0])
				continue
			}
			out = append(out, g.done(index, g.applyOne(sub)))
		}
		return out
	case len(cmd) > 0 && cmd[0] == groupGone:
		return g.applyGone(index, cmd[1:])
	}
	return g.done(index, g.applyOne(cmd))
}

// done hands r to the observer and returns it. Hold mu.
func (g *QueueGroup) done(index uint64, r *GroupResult) *GroupResult {
	if g.observe != nil {
		g.observe(index, r)
	}
	return r
}

// applyOne applies a create, delete or queue command. Hold mu.
func (g *QueueGroup) applyOne(cmd []byte) *GroupResult {
	r := &GroupResult{}
	if len(cmd) == 0 {
		r.Err = ErrGroupCommand
		return r
	}
	d := linkDecoder{b: cmd[1:]}
	r.Key = readGroupKey(&d)
	if d.err != nil {
		r.Err = ErrGroupCommand
		return r
	}
	switch cmd[0] {
	case groupCreate:
		cfg, err := queue.DecodeConfig(d.b)
		if err != nil {
			r.Err = ErrGroupCommand
			break
		}
		if g.queues[r.Key] == nil {
			q := queue.NewWithConfig(cfg)
			q.SetDeliverPaged(true)
			g.queues[r.Key] = q
			if timedConfig(&cfg) {
				g.timed[r.Key] = true
			}
		}
	case groupStreamCreate, groupStreamCmd:
		g.applyStreamLocked(cmd[0], r, &d)
	case groupDelete:
		if gs := g.streams[r.Key]; gs != nil {
			g.dropStreamLocked(r.Key, gs)
			break
		}
		if g.queues[r.Key] == nil {
			r.Err = ErrGroupNoQueue
		} else if g.bodies != nil {
			g.bodies.dropQueue(r.Key)
		}
		delete(g.queues, r.Key)
		delete(g.timed, r.Key)
		delete(g.dlx, r.Key)
	case groupQueue:
		q := g.queues[r.Key]
		if q == nil {
			r.Err = ErrGroupNoQueue
			break
		}
		qc, err := queue.DecodeCmd(d.b)
		if err != nil {
			r.Err = ErrGroupCommand
			break
		}
		r.Now = qc.Now
		r.Effects, r.Err = q.Apply(&qc, nil)
		if (qc.Op == queue.OpEnqueue && qc.TTL >= 0) || (qc.Op == queue.OpSetConfig && timedConfig(&qc.Config)) {
			g.timed[r.Key] = true
		}
		if q.HasDiscards() {
			g.dlx[r.Key] = true
		}
		switch qc.Op {
		case queue.OpEnqueue, queue.OpAttach, queue.OpSettle, queue.OpReturn, queue.OpDiscard, queue.OpSetConfig:
			co := queue.Cmd{Op: queue.OpCheckout, Now: qc.Now}
			r.Effects, _ = q.Apply(&co, r.Effects)
		}
		if g.bodies != nil {
			g.bodies.after(r.Key, q, &qc, r)
		}
	default:
		r.Err = ErrGroupCommand
	}
	return r
}

// applyGone detaches the matching consumers of every queue, returns what
// they held and dispatches. Hold mu.
func (g *QueueGroup) applyGone(index uint64, b []byte) []*GroupResult {
	d := linkDecoder{b: b}
	mask, value, now := queue.ConsumerID(d.u()), queue.ConsumerID(d.u()), int64(d.u())
	if d.err != nil || len(d.b) != 0 {
		return []*GroupResult{g.done(index, &GroupResult{Err: ErrGroupCommand})}
	}
	keys := make([]GroupQueueKey, 0, len(g.queues))
	for k := range g.queues {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	var out []*GroupResult
	var ids []queue.ConsumerID
	for _, k := range keys {
		q := g.queues[k]
		ids = q.ConsumerIDs(ids[:0])
		seqs := q.HeldBy(mask, value, nil)
		r := &GroupResult{Key: k, Now: now}
		touched := len(seqs) > 0
		for _, id := range ids {
			if id&mask == value {
				c := queue.Cmd{Op: queue.OpDetach, Consumer: id, Now: now}
				r.Effects, _ = q.Apply(&c, r.Effects)
				r.Detached = append(r.Detached, id)
				touched = true
			}
		}
		if !touched {
			continue
		}
		if len(seqs) > 0 {
			c := queue.Cmd{Op: queue.OpReturn, Seqs: seqs, Now: now}
			r.Effects, _ = q.Apply(&c, r.Effects)
		}
		c := queue.Cmd{Op: queue.OpCheckout, Now: now}
		r.Effects, _ = q.Apply(&c, r.Effects)
		if q.HasDiscards() {
			g.dlx[k] = true // past x-delivery-limit
		}
		if g.bodies != nil {
			g.bodies.after(k, q, nil, r)
		}
		out = append(out, g.done(index, r))
	}
	g.sacGoneLocked(mask, value)
	return out
}

// Observe makes f see every command applied from now on, with its result
// (the effect executor of the node that leads the group). f runs on the
// log's apply goroutine with the group's lock held: it must not block.
func (g *QueueGroup) Observe(f func(index uint64, r *GroupResult)) {
	g.mu.Lock()
	g.observe = f
	g.mu.Unlock()
}

// OnRestore sets f to be called after each snapshot the group restores.
func (g *QueueGroup) OnRestore(f func()) {
	g.mu.Lock()
	g.restored = f
	g.mu.Unlock()
}

// attachedIDs returns the ids of the consumers attached to the group's
// queues.
func (g *QueueGroup) attachedIDs() map[queue.ConsumerID]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ids []queue.ConsumerID
	for _, q := range g.queues {
		ids = q.ConsumerIDs(ids)
	}
	set := make(map[queue.ConsumerID]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return set
}

// Queues returns the keys of the group's queues, sorted.
func (g *QueueGroup) Queues() []GroupQueueKey {
	g.mu.Lock()
	defer g.mu.Unlock()
	keys := make([]GroupQueueKey, 0, len(g.queues))
	for k := range g.queues {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

// Counts returns the ready and unacknowledged messages and the consumers
// of queue k as this replica holds them; ok is false when the group does
// not have it.
func (g *QueueGroup) Counts(k GroupQueueKey) (ready, unacked, consumers int, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.queues[k]
	if q == nil {
		return 0, 0, 0, false
	}
	return q.Ready(), q.Unacked(), q.ConsumerCount(), true
}

// AppliedIndex is the index of the last command applied (or restored).
func (g *QueueGroup) AppliedIndex() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last
}

// Snapshot implements StateMachine: every queue's snapshot, encoded now
// (the state goes on changing while the snapshot is written), and with a
// store a view of the stored bodies as they are now, streamed by WriteTo.
func (g *QueueGroup) Snapshot() (StateSnapshot, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	keys := make([]GroupQueueKey, 0, len(g.queues))
	for k := range g.queues {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	b := appendU(nil, uint64(len(keys)))
	for _, k := range keys {
		b = appendGroupKey(b, k)
		start := len(b)
		b = binary.BigEndian.AppendUint32(b, 0)
		b = g.queues[k].AppendSnapshot(b)
		binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	}
	// The streams, length-prefixed, then (with a store) the bodies.
	ss := g.appendStreamsSnapshot(nil)
	b = appendU(b, uint64(len(ss)))
	b = append(b, ss...)
	if g.bodies == nil {
		return bytesSnapshot(b), nil
	}
	view, err := g.bodies.st.OpenReplView()
	if err != nil {
		return nil, err
	}
	ids := make([]uint64, len(keys))
	for i, k := range keys {
		ids[i] = g.bodies.replID(k)
	}
	return &groupSnapshot{index: b, view: view, ids: ids}, nil
}

// groupSnapshot is a group's snapshot with stored bodies: the queues'
// snapshots, then their bodies read from view.
type groupSnapshot struct {
	index []byte
	view  *store.ReplView
	ids   []uint64
}

func (s *groupSnapshot) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	n, err := bw.Write(s.index)
	total := int64(n)
	var buf []byte
	for _, id := range s.ids {
		if err != nil {
			break
		}
		buf = appendU(buf[:0], id)
		n, err = bw.Write(buf)
		total += int64(n)
		if err != nil {
			break
		}
		err = s.view.Each(id, func(seq uint64, m *store.Message) error {
			buf = appendU(buf[:0], seq)
			buf = appendS(buf, m.Exchange)
			buf = appendS(buf, m.RoutingKey)
			buf = appendS(buf, m.Header)
			buf = appendS(buf, m.Body)
			n, err := bw.Write(buf)
			total += int64(n)
			return err
		})
		if err == nil {
			n, err = bw.Write([]byte{0})
			total += int64(n)
		}
	}
	if err == nil {
		err = bw.Flush()
	}
	return total, err
}

func (s *groupSnapshot) Release() { s.view.Close() }

// maxSnapshotQueue bounds one queue's snapshot, and a body, in a group
// snapshot being restored.
const maxSnapshotQueue = 1 << 31

// Restore implements StateMachine. It reads the snapshot as a stream:
// the queues' snapshots, then their bodies, which go to the store (the
// group's earlier bodies dropped first) or, without one, back into the
// queues.
func (g *QueueGroup) Restore(index uint64, r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return fmt.Errorf("%w: snapshot header: %v", ErrGroupCommand, err)
	}
	if n > 1<<24 {
		return fmt.Errorf("%w: snapshot of %d queues", ErrGroupCommand, n)
	}
	queues := make(map[GroupQueueKey]*queue.Queue, n)
	byID := make(map[uint64]*queue.Queue, n)
	var buf []byte
	for range n {
		var k GroupQueueKey
		vh, err1 := readStreamBytes(br, 1<<16)
		name, err2 := readStreamBytes(br, 1<<16)
		id, err3 := binary.ReadUvarint(br)
		var size [4]byte
		_, err4 := io.ReadFull(br, size[:])
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return fmt.Errorf("%w: snapshot key: %v", ErrGroupCommand, err)
		}
		k = GroupQueueKey{VHost: string(vh), Name: string(name), ID: id}
		sz := binary.BigEndian.Uint32(size[:])
		if uint64(sz) > maxSnapshotQueue {
			return fmt.Errorf("%w: snapshot of queue %s", ErrGroupCommand, k)
		}
		buf = slices.Grow(buf[:0], int(sz))[:sz]
		if _, err := io.ReadFull(br, buf); err != nil {
			return fmt.Errorf("%w: snapshot of queue %s: %v", ErrGroupCommand, k, err)
		}
		q := queue.New()
		if err := q.RestoreSnapshot(buf); err != nil {
			return fmt.Errorf("broker: data group snapshot of queue %s: %w", k, err)
		}
		q.SetDeliverPaged(true)
		queues[k] = q
		if g.bodies != nil {
			byID[g.bodies.replID(k)] = q
		} else {
			byID[k.ID] = q
		}
	}
	// The streams (none in a snapshot from before them).
	streams := map[GroupQueueKey]*groupStream{}
	if sl, err := binary.ReadUvarint(br); err == nil {
		if sl > maxSnapshotQueue {
			return fmt.Errorf("%w: streams of the snapshot: %d bytes", ErrGroupCommand, sl)
		}
		sb := make([]byte, sl)
		if _, err := io.ReadFull(br, sb); err != nil {
			return fmt.Errorf("%w: streams of the snapshot: %v", ErrGroupCommand, err)
		}
		if streams, err = restoreStreams(sb); err != nil {
			return err
		}
	} else if !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: streams of the snapshot: %v", ErrGroupCommand, err)
	}
	if g.bodies != nil {
		g.bodies.reset()
		if err := g.bodies.st.RemoveReplGroup(g.bodies.group); err != nil {
			return fmt.Errorf("broker: data group snapshot: %w", err)
		}
	}
	// The bodies: stored, or given back to the queues (a group without a
	// store restoring a snapshot from one with).
	for {
		id, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: snapshot bodies: %v", ErrGroupCommand, err)
		}
		q := byID[id]
		if g.bodies == nil {
			q = byID[id&(1<<48-1)]
		}
		for {
			seq, err := binary.ReadUvarint(br)
			if err != nil {
				return fmt.Errorf("%w: snapshot bodies: %v", ErrGroupCommand, err)
			}
			if seq == 0 {
				break
			}
			var f [4][]byte
			for i := range f {
				if f[i], err = readStreamBytes(br, maxSnapshotQueue); err != nil {
					return fmt.Errorf("%w: snapshot body: %v", ErrGroupCommand, err)
				}
			}
			m := &store.Message{Exchange: string(f[0]), RoutingKey: string(f[1]), Header: f[2], Body: f[3]}
			switch {
			case g.bodies != nil:
				g.bodies.st.PutReplBody(id, seq, m)
			case q != nil:
				q.PageIn(seq, replMessage(m))
			}
		}
	}
	timed := make(map[GroupQueueKey]bool)
	dlx := make(map[GroupQueueKey]bool)
	for k, q := range queues {
		if cfg := q.Config(); timedConfig(&cfg) || q.NextExpiry() != 0 {
			timed[k] = true
		}
		if q.HasDiscards() {
			dlx[k] = true
		}
	}
	g.mu.Lock()
	old := g.streams
	g.queues, g.last, g.timed, g.streams, g.dlx = queues, index, timed, streams, dlx
	g.restoredStreamsLocked()
	g.adoptConsumersLocked(old)
	restored := g.restored
	g.mu.Unlock()
	if restored != nil {
		restored()
	}
	return nil
}

// readStreamBytes reads a uvarint length (at most max) and that many
// bytes.
func readStreamBytes(r *bufio.Reader, max uint64) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, err
	}
	if n > max {
		return nil, fmt.Errorf("a field of %d bytes", n)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	return b, err
}

// hasTimed reports whether a queue of the group may need ticks.
func (g *QueueGroup) hasTimed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.timed) > 0
}

// timedConfig reports whether a queue configured by c needs ticks.
func timedConfig(c *queue.Config) bool { return c.MessageTTL >= 0 || c.Expires > 0 }

// due returns the queues whose tick (OpTick) is due at now, sorted, and
// when the next of the others is (0: none): the group's leader ticks
// them. Queues that no longer need ticks are forgotten.
func (g *QueueGroup) due(now int64) (keys []GroupQueueKey, next int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k := range g.timed {
		q := g.queues[k]
		if q == nil {
			delete(g.timed, k)
			continue
		}
		at := q.NextTick(now)
		switch {
		case at == 0:
			if cfg := q.Config(); !timedConfig(&cfg) {
				delete(g.timed, k)
			}
		case at <= now:
			keys = append(keys, k)
		case next == 0 || at < next:
			next = at
		}
	}
	slices.SortFunc(keys, compareKeys)
	return keys, next
}

// snapshotBytes is the group's snapshot as bytes (tests, comparisons).
func (g *QueueGroup) snapshotBytes() []byte {
	s, _ := g.Snapshot()
	var buf bytes.Buffer
	_, _ = s.WriteTo(&buf)
	return buf.Bytes()
}
