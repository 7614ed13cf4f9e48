package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.uber.org/zap"

	"github.com/warrenmq/warren/store"
)

// MetadataGroup is the id of the metadata group, whose state machine is the
// broker's definitions.
const MetadataGroup = 0

var (
	// ErrNoQuorum is returned for a proposal refused: within the propose
	// timeout no leader took it (this node is in a minority, or the cluster
	// is electing a leader). The change has no effect.
	ErrNoQuorum = errors.New("cluster: the metadata store has no quorum: the change was refused (this node cannot reach a majority of the cluster, or a leader election is under way)")
	// ErrUnconfirmed is returned for a proposal a leader may have taken but
	// that was not confirmed applied on this node in time (the leader was
	// lost while committing it): it may or may not take effect.
	ErrUnconfirmed = errors.New("cluster: the metadata store did not confirm the change in time: its outcome is unknown (the leader was lost while committing it)")
	// ErrNotMember is returned by membership calls for a node the group
	// does not have.
	ErrNotMember = errors.New("cluster: no such node in the cluster")
)

// StateMachine is the state a RaftLog drives (the broker's definitions for
// the metadata group): the same commands applied in the same order give the
// same state on every node. The log calls it from one goroutine.
type StateMachine interface {
	// Apply applies the command committed at index and returns its result,
	// which goes to the proposer if it waits on this node.
	Apply(index uint64, cmd []byte) any
	// Snapshot captures the state as of the last index applied; the
	// snapshot is written out later, while Apply goes on.
	Snapshot() (StateSnapshot, error)
	// Restore replaces the state with a snapshot taken at index.
	Restore(index uint64, r io.Reader) error
}

// StateSnapshot is a state captured by StateMachine.Snapshot.
type StateSnapshot interface {
	io.WriterTo
	// Release is called once the snapshot is written or abandoned.
	Release()
}

// Applied is a command applied on this node: its index and the result of
// StateMachine.Apply.
type Applied struct {
	Index  uint64
	Result any
}

// RaftLogConfig configures NewRaftLog.
type RaftLogConfig struct {
	// Node is the started cluster node the group runs on.
	Node *Node
	// Group is the Raft group's id (MetadataGroup).
	Group uint64
	// Store keeps the group's log and term (store.Log LogID); SnapshotDir
	// its snapshots.
	Store       *store.Store
	LogID       uint64
	SnapshotDir string
	// LogDir, when set (data groups), is where the group's entries are
	// kept instead (a store.SegmentLog; SegmentStore); the store's log
	// LogID keeps the term and vote.
	LogDir string
	// Machine is the state the log drives.
	Machine StateMachine
	// ProposeTimeout bounds a proposal: with no leader reachable or no
	// commit within it, Propose returns ErrNoQuorum. Default 5s.
	ProposeTimeout time.Duration
	// HeartbeatTimeout is Raft's heartbeat and election timeout (default
	// 1s): how long followers wait for a leader before an election, unless
	// its cluster-port session breaks (failoverLoop). The leader sends a
	// heartbeat every tenth of it, and its lease is 3/10 of it.
	HeartbeatTimeout time.Duration
	// SnapshotThreshold (default 8192) entries lead to a snapshot, after
	// which all but TrailingLogs (default 10240) entries are deleted.
	SnapshotThreshold uint64
	TrailingLogs      uint64
	// Info returns this node's status as JSON, for Status on any node.
	Info func() []byte
	// Servers, for a data group, are its initial members: each of them
	// founds the group with this same configuration (datagroup.go). The
	// metadata group leaves it empty (it is founded by one node and joined).
	Servers []raft.Server
	// Join, for a data group, is set for a member added to a running
	// group (its plan was changed, GroupSpec.Epoch): it founds nothing and
	// waits for the group's leader to add it and send it the group's state.
	Join bool
	// Logger defaults to the node's.
	Logger *zap.Logger
}

// storedLogs is the metadata group's log store: after each write it notes
// the entries a follower now knows committed (RaftLog.noteDurable) and
// fires a signal.
type storedLogs struct {
	raft.LogStore
	l *RaftLog
}

func (s storedLogs) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s storedLogs) StoreLogs(logs []*raft.Log) error {
	err := s.LogStore.StoreLogs(logs)
	if err == nil {
		s.l.noteDurable(logs)
	}
	s.l.stored.fire()
	return err
}

// signal wakes every goroutine waiting on it when fired.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed by the next fire.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) fire() {
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.mu.Unlock()
}

// metaLogCache is how many of the latest entries of the metadata group's
// log are kept in memory (raft.LogCache).
const metaLogCache = 1024

// RaftLog is a replicated command log over one Raft group (cmd/warren
// adapts it to the broker's CommandLog): a proposal made on
// any node is committed by the group's leader (a follower forwards it over
// an 'M' stream) and returns once it is applied on the node it was made on.
//
// Each proposal carries a random 16-byte request id. A follower retries a
// forward whose outcome it does not know (the leader failed, the stream
// broke) until it learns the command applied or ProposeTimeout passes, so a
// command can be committed twice; the state machine wrapper applies the
// first entry of a request id and skips later ones (the ids of the last
// 65,536 commands are kept, in snapshots too), so a retried command has one
// effect.
type RaftLog struct {
	// cfgChanged makes the next telling read the configuration again
	// (membersChanged).
	cfgChanged atomic.Bool

	cfg   RaftLogConfig
	node  *Node
	log   *zap.Logger
	fsm   *raftFSM
	trans *raft.NetworkTransport
	snaps *raft.FileSnapshotStore
	rs    RaftStore
	// logs is the Raft log store: rs, behind a cache of the latest
	// entries for the metadata group (metaLogCache), or a data group's
	// segment log (SegmentStore of seg); stored is fired
	// after each of its writes (for proposers waiting to apply, Propose).
	logs raft.LogStore
	// seg is a data group's segment log (RaftLogConfig.LogDir), closed
	// with the group.
	seg    *store.SegmentLog
	stored signal
	// durable is the last entry a follower knows committed from its own
	// log write (noteDurable); durableMu guards it.
	durableMu sync.Mutex
	durable   entryAt
	raft      *raft.Raft
	rc        raft.Config
	start     time.Time
	// seeded is set once the group has a snapshot (seedSnapshot): nodes
	// join only then.
	seeded atomic.Bool
	// notify wakes notifyLoop, which tells the followers the commit
	// index, when a command is about to be applied (committedAt) or was
	// applied on this leader (noticeSoon); committed is the highest index
	// of a command given to the state machine.
	committed atomic.Uint64
	notify    chan struct{}
	// lost carries the address of a leader whose session broke
	// (peerLost) to failoverLoop.
	lost chan string
	// starting is set when Start is called (or about to be, by
	// DataGroups on a goroutine of its own); ready is closed once raft is
	// set: proposals made before wait for it.
	starting atomic.Bool
	ready    chan struct{}
	// flying counts the commands Begin submitted and nobody has waited
	// for yet.
	flying atomic.Int64
	// commitMu guards the callbacks BeginCommitted registered, by request
	// id, and told, the last index leaderCommitted looked at.
	commitMu    sync.Mutex
	onCommitted map[reqID]commitCallback
	told        uint64
	// awaitMu guards awaitSkip: the members AwaitPeers does not wait for
	// until the time given (awaitpeers.go).
	awaitMu   sync.Mutex
	awaitSkip map[string]time.Time

	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// NewRaftLog returns the group's log; Start runs it.
func NewRaftLog(cfg RaftLogConfig) (*RaftLog, error) {
	if cfg.Node == nil || cfg.Store == nil || cfg.Machine == nil || cfg.SnapshotDir == "" {
		return nil, errors.New("cluster: RaftLogConfig needs a Node, a Store, a SnapshotDir and a Machine")
	}
	if cfg.ProposeTimeout <= 0 {
		cfg.ProposeTimeout = 5 * time.Second
	}
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = time.Second
	}
	if cfg.SnapshotThreshold == 0 {
		cfg.SnapshotThreshold = 8192
	}
	if cfg.TrailingLogs == 0 {
		cfg.TrailingLogs = 10240
	}
	lg := cfg.Logger
	if lg == nil {
		lg = cfg.Node.log
	}
	l := &RaftLog{
		cfg:    cfg,
		node:   cfg.Node,
		log:    lg.With(zap.Uint64("group", cfg.Group)),
		fsm:    newRaftFSM(cfg.Machine),
		done:   make(chan struct{}),
		notify: make(chan struct{}, 1),
		lost:   make(chan string, 1),
		ready:  make(chan struct{}),
	}
	l.fsm.committed = l.committedAt
	return l, nil
}

// Start opens the group: it restores the machine from the latest snapshot,
// takes the group's transport and serves the node's 'M' streams. With
// bootstrap and no Raft state yet, the node founds a new group of itself;
// its machine's current state is the group's initial state (a snapshot
// taken once it leads, and the log compacted behind it, so that the nodes
// that join start from that state). Otherwise it waits to be added (Join).
func (l *RaftLog) Start(bootstrap bool) error {
	l.starting.Store(true)
	l.start = time.Now()
	if err := os.MkdirAll(l.cfg.SnapshotDir, 0o750); err != nil {
		return err
	}
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: zapWriter{l.log},
		// A follower refuses a commit telling (committell.go) for an
		// entry it does not have yet with this warning; the teller tries
		// again.
		Exclude: func(_ hclog.Level, msg string, _ ...any) bool { return msg == "failed to get previous log" }})
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Clean(l.cfg.SnapshotDir), 2, hl)
	if err != nil {
		return err
	}
	l.snaps = snaps
	l.rs = NewRaftStore(l.cfg.Store.Log(l.cfg.LogID))
	l.logs = l.rs
	if l.cfg.LogDir != "" {
		sl, err := openSegmentStore(l.cfg.LogDir, l.cfg.Store, l.rs.l)
		if err != nil {
			return err
		}
		l.seg = sl
		l.logs = SegmentStore{sl}
		defer func() {
			if l.raft == nil {
				sl.Close()
			}
		}()
	}
	if l.cfg.Group == MetadataGroup {
		// The leader's replication, every node's apply and the commit
		// tellings read back the entries just written: from memory,
		// not from the store (a read transaction each). Definition
		// commands are small; a data group's entries carry message
		// bodies, and are not cached.
		c, err := raft.NewLogCache(metaLogCache, l.rs)
		if err != nil {
			return err
		}
		l.logs = storedLogs{c, l}
	}
	trans, err := l.node.Transport(l.cfg.Group)
	if err != nil {
		return err
	}
	l.trans = trans
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(l.node.Name())
	rc.HeartbeatTimeout = l.cfg.HeartbeatTimeout
	rc.ElectionTimeout = l.cfg.HeartbeatTimeout
	// The heartbeat timeout's tenth is Raft's heartbeat interval: 1 s
	// (heartbeats every 100–200 ms) costs half the idle CPU of 500 ms. A
	// killed leader is detected by its session ending instead
	// (failoverLoop), whose short timeouts cannot be below the lease: 3/10
	// (300 ms) keeps a lease of at least 1.5 heartbeat intervals, and lets a
	// new leader be elected about 0.5 s after a kill.
	rc.LeaderLeaseTimeout = l.cfg.HeartbeatTimeout * 3 / 10
	rc.SnapshotThreshold = l.cfg.SnapshotThreshold
	rc.TrailingLogs = l.cfg.TrailingLogs
	rc.SnapshotInterval = 10 * time.Second
	// Followers learn that an entry committed from an AppendEntries that
	// carries the commit index. The leader tells them at once after
	// applying any command (notifyLoop, committell.go), so the followers
	// apply it within a round trip: the proposer on a follower answers its
	// client then (read your writes), and a change acknowledged on the
	// leader is on every live node promptly. The commit timeout (Raft sends
	// an AppendEntries per follower every commit timeout while idle) only
	// bounds how late followers learn of a commit no telling reached, or
	// of Raft's own entries (a leader's first, a configuration; a member
	// just added is told at once too). 20 ms cost ~3% of a core on an idle
	// leader; at 1.5 s they are about a tenth of its idle frames.
	rc.CommitTimeout = 1500 * time.Millisecond
	// Commands submitted while the leader writes its log wait in a
	// buffered channel and go into the next write together (up to
	// MaxAppendEntries): proposers with several entries in flight (Begin)
	// do not wait for each other's disk writes one by one.
	rc.BatchApplyCh = true
	if l.seg != nil {
		// A data group's leader tells its proposers of a commit as it
		// is counted (BeginCommitted).
		rc.CommitHook = l.leaderCommitted
	}
	rc.Logger = hl
	l.rc = *rc
	existing, err := raft.HasExistingState(l.logs, l.rs, snaps)
	if err != nil {
		trans.Close()
		return err
	}
	r, err := raft.NewRaft(rc, l.fsm, l.logs, l.rs, snaps, trans)
	if err != nil {
		trans.Close()
		return fmt.Errorf("cluster: start group %d: %w", l.cfg.Group, err)
	}
	l.raft = r
	close(l.ready)
	l.node.setMeta(l.cfg.Group, l.serveMeta)
	l.node.setLost(l.cfg.Group, l.peerLost)
	if len(l.cfg.Servers) > 0 {
		return l.startDataGroup(existing)
	}
	if bootstrap && !existing {
		l.log.Info("founding a new cluster", zap.String("node", l.node.Name()), zap.String("addr", l.node.Addr()))
		f := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
			Suffrage: raft.Voter, ID: raft.ServerID(l.node.Name()), Address: raft.ServerAddress(l.node.Addr()),
		}}})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("cluster: bootstrap: %w", err)
		}
	}
	l.wg.Add(3)
	go l.seedSnapshot()
	go l.notifyLoop()
	go l.failoverLoop()
	return nil
}

// peerLost is told (by the node) that the session to the peer at addr
// ended. If that peer is the leader this follower knows, failoverLoop
// shortens the election timeouts until a new leader is known: a leader
// killed (its sessions reset at once) is replaced within about one lease
// timeout instead of the heartbeat timeout and then an election timeout.
func (l *RaftLog) peerLost(addr string) {
	if l.raft == nil || l.raft.State() != raft.Follower {
		return
	}
	if leader, _ := l.raft.LeaderWithID(); string(leader) != addr {
		return
	}
	select {
	case l.lost <- addr:
	default:
	}
}

// electFirst has this follower of a new group (nothing in its log but the
// founding configuration), while no leader is known, elect with the short
// timeouts of failoverLoop: a data group's preferred member founding it
// (the group woken by the first queue placed in it) stands first, so that
// the group's first leader is its preferred one and not whichever
// member's timer ran out first. The others keep the heartbeat timeout, so
// the preferred member is elected unless it is not running. A group with
// a history is left alone: a member restarting there may not hear from
// the leader it has within the short timeout (its transport does not
// offer pre-vote, so its election would unseat that leader).
func (l *RaftLog) electFirst() {
	if l.raft == nil || l.raft.State() != raft.Follower || l.raft.LastIndex() > 1 {
		return
	}
	if leader, _ := l.raft.LeaderWithID(); leader != "" {
		return
	}
	select {
	case l.lost <- "":
	default:
	}
}

// failoverLoop runs the fast elections peerLost asks for (and electFirst,
// with no lost leader: gone is empty). Raft has no call
// that starts an election on a follower; what it offers is ReloadConfig, and
// a shorter HeartbeatTimeout makes a follower check its leader's last
// contact at once and then every (random) new timeout. The shortest allowed
// is the leader lease timeout, which cannot be reloaded: a follower whose
// leader's session broke starts an election once it has not heard from it
// for that long (3/10 of HeartbeatTimeout), and its elections time out as
// soon.
// The timeouts go back once a leader other than the lost one is known, or
// after a few heartbeat timeouts. A leader still alive (only the session
// broke, and it comes back) keeps its followers: its heartbeats reach them
// well within the short timeout.
func (l *RaftLog) failoverLoop() {
	defer l.wg.Done()
	for {
		var gone string
		select {
		case <-l.done:
			return
		case gone = <-l.lost:
		}
		fast := l.rc.LeaderLeaseTimeout
		rc := l.raft.ReloadableConfig()
		rc.HeartbeatTimeout, rc.ElectionTimeout = fast, fast
		if err := l.raft.ReloadConfig(rc); err != nil {
			l.log.Warn("fast election: reload config", zap.Error(err))
			continue
		}
		if gone != "" {
			l.log.Info("the metadata leader's session broke: electing with short timeouts", zap.String("leader-addr", gone))
		} else {
			l.log.Debug("no leader yet: the preferred member elects with short timeouts")
		}
		t := time.NewTicker(fast / 10)
		deadline := time.Now().Add(4 * l.rc.HeartbeatTimeout)
		for time.Now().Before(deadline) {
			if a, _ := l.raft.LeaderWithID(); a != "" && string(a) != gone {
				break
			}
			select {
			case <-l.done:
				t.Stop()
				return
			case <-t.C:
			}
		}
		t.Stop()
		rc = l.raft.ReloadableConfig()
		rc.HeartbeatTimeout, rc.ElectionTimeout = l.rc.HeartbeatTimeout, l.rc.ElectionTimeout
		if err := l.raft.ReloadConfig(rc); err != nil {
			l.log.Warn("fast election: restore config", zap.Error(err))
		}
	}
}

// committedAt is told (on the FSM goroutine) that the command at index is
// committed, as it is about to be applied: on the leader, notifyLoop tells
// the followers at once, while the leader applies it.
func (l *RaftLog) committedAt(index uint64) {
	l.committed.Store(index)
	l.noticeSoon()
}

// noticeSoon wakes notifyLoop: a command was applied on this leader.
func (l *RaftLog) noticeSoon() {
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// commitNotice is the entry a teller appends when it cannot tell a
// follower the commit index otherwise (committell.go): a zero request id,
// which the FSM applies as a no-op.
var commitNotice = make([]byte, len(reqID{}))

// notifyLoop tells the followers the commit index after commands were
// applied on this leader (proposed here or forwarded; committell.go), so
// that every follower applies them without waiting for the commit timeout:
// one that forwarded a command answers its client, and a change
// acknowledged to a client of the leader reaches the other nodes' clients
// within a round trip (a client that acts on another node at once may
// still be ahead of it by that much). Wakeups coalesce: one telling covers
// every command applied before it.
func (l *RaftLog) notifyLoop() {
	defer l.wg.Done()
	var ts tellers
	leading := false
	for {
		select {
		case <-l.done:
			return
		case <-l.notify:
		}
		if l.raft.State() != raft.Leader {
			leading = false
			continue
		}
		if !leading {
			// The followers of this term, not of an earlier one.
			leading = true
			l.cfgChanged.Store(true)
		}
		l.tellAll(&ts, max(l.committed.Load(), l.fsm.applied.Load()))
	}
}

// seedSnapshot makes sure a group has a snapshot once this node leads it:
// the founding node's state before its first command (its definitions of
// a single node) is in no log entry, so nodes that join must start from a
// snapshot. The log is compacted behind it (no trailing entries).
func (l *RaftLog) seedSnapshot() {
	defer l.wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
		}
		if list, err := l.snaps.List(); err == nil && len(list) > 0 {
			l.seeded.Store(true)
			return
		}
		if l.raft.State() != raft.Leader {
			continue
		}
		rc := raft.ReloadableConfig{TrailingLogs: 0, SnapshotInterval: l.rc.SnapshotInterval,
			SnapshotThreshold: l.rc.SnapshotThreshold, HeartbeatTimeout: l.rc.HeartbeatTimeout, ElectionTimeout: l.rc.ElectionTimeout}
		if err := l.raft.ReloadConfig(rc); err != nil {
			l.log.Warn("seed snapshot: reload config", zap.Error(err))
			continue
		}
		// A no-op entry gives the snapshot an index to be taken at.
		err := l.raft.Apply(make([]byte, len(reqID{})), l.cfg.ProposeTimeout).Error()
		if err == nil {
			err = l.raft.Snapshot().Error()
		}
		rc.TrailingLogs = l.rc.TrailingLogs
		_ = l.raft.ReloadConfig(rc)
		if err != nil {
			l.log.Warn("seed snapshot failed; retrying", zap.Error(err))
			continue
		}
		l.log.Info("took the group's first snapshot: the state nodes that join start from")
		l.seeded.Store(true)
		return
	}
}

// Close stops the group on this node (it stays a member; Leave removes it).
func (l *RaftLog) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		l.wg.Wait()
		l.node.setMeta(l.cfg.Group, nil)
		l.node.setLost(l.cfg.Group, nil)
		if r := l.running(); r != nil {
			err = r.Shutdown().Error()
		}
		if l.trans != nil {
			l.trans.Close()
		}
		if l.seg != nil {
			l.seg.Close()
		}
		l.fsm.failWaiters()
	})
	return err
}

// CatchUp waits until this node has applied every command the group had
// committed when it was called: it appends a barrier (an entry with no
// command) through the leader and waits to apply it. A node that was down
// calls it before serving clients, so that they see the definitions made
// meanwhile. Its errors are Propose's.
func (l *RaftLog) CatchUp(ctx context.Context) error {
	_, err := l.Propose(ctx, nil)
	return err
}

// Sync waits until this node has applied every command the group's leader
// holds in its log when asked, which includes every command whose proposal
// had returned, through any node, before Sync was called (a follower may
// answer its proposer before the leader applied the command, durablecommit.go,
// but never before the leader wrote it): a read of this node's state after
// Sync sees those writes. Unlike CatchUp it appends nothing: it asks the
// leader for the index of its last command (the leader asks itself) and
// waits for this node to apply up to there. Without a known leader, or with
// one that does not answer before ctx ends (or ProposeTimeout, without a
// deadline), it fails and the caller reads what this node has.
func (l *RaftLog) Sync(ctx context.Context) error {
	r := l.running()
	if r == nil {
		return ErrClosed
	}
	var target uint64
	if r.State() == raft.Leader {
		target = l.lastCommand()
	} else {
		addr, _ := r.LeaderWithID()
		if addr == "" {
			return errNoLeader
		}
		timeout := l.cfg.ProposeTimeout
		if d, ok := ctx.Deadline(); ok {
			timeout = time.Until(d)
		}
		if timeout <= 0 {
			return context.DeadlineExceeded
		}
		resp, _, err := l.call(string(addr), metaLastCommand, nil, timeout)
		if err != nil {
			return err
		}
		if len(resp) != 8 {
			return fmt.Errorf("cluster: last command index of %d bytes", len(resp))
		}
		target = binary.BigEndian.Uint64(resp)
	}
	return l.waitApplied(ctx, target)
}

// waitApplied waits until this node's FSM has applied index.
func (l *RaftLog) waitApplied(ctx context.Context, index uint64) error {
	f := l.fsm
	if f.applied.Load() >= index {
		return nil
	}
	f.appliedWaiters.Add(1)
	defer f.appliedWaiters.Add(-1)
	for {
		// Take the signal before looking again, so that an apply after
		// the look fires it.
		sig := f.appliedSig.wait()
		if f.applied.Load() >= index {
			return nil
		}
		select {
		case <-sig:
		case <-ctx.Done():
			return ctx.Err()
		case <-l.done:
			return ErrClosed
		}
	}
}

// lastCommand is the index of the last command in this node's log (a
// command is what raftFSM applies and counts in its applied index; Raft's
// own entries, such as a new leader's no-op or a configuration, are not),
// or the applied index when no later entry is a command.
func (l *RaftLog) lastCommand() uint64 {
	applied := l.fsm.applied.Load()
	for i := l.raft.LastIndex(); i > applied; i-- {
		var e raft.Log
		if err := l.logs.GetLog(i, &e); err != nil {
			continue
		}
		if isCommand(&e) {
			return i
		}
	}
	return applied
}

// isCommand reports whether e is one of the entries raftFSM applies: a
// command or barrier proposed through RaftLog (its request id, then the
// command).
func isCommand(e *raft.Log) bool {
	return e.Type == raft.LogCommand && len(e.Data) >= len(reqID{})
}

// Propose submits cmd and waits until it is committed and applied on this
// node, so that the caller reads its own write; it returns the index and
// the machine's result. A failure is ErrNoQuorum (refused: no effect),
// ErrUnconfirmed (the outcome is unknown), ErrClosed or ctx's error.
func (l *RaftLog) Propose(ctx context.Context, cmd []byte) (Applied, error) {
	if l.running() == nil {
		// A data group woken by its first use starts on another
		// goroutine (DataGroups.Wake).
		if !l.starting.Load() {
			return Applied{}, ErrClosed
		}
		t := time.NewTimer(l.cfg.ProposeTimeout)
		select {
		case <-l.ready:
			t.Stop()
		case <-t.C:
			return Applied{}, ErrNoQuorum
		case <-ctx.Done():
			t.Stop()
			return Applied{}, ctx.Err()
		case <-l.done:
			t.Stop()
			return Applied{}, ErrClosed
		}
	}
	var id reqID
	if _, err := rand.Read(id[:]); err != nil {
		return Applied{}, err
	}
	env := make([]byte, 0, len(id)+len(cmd))
	env = append(append(env, id[:]...), cmd...)
	ch := l.fsm.wait(id)
	defer l.fsm.unwait(id)
	deadline := time.Now().Add(l.cfg.ProposeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var last error
	// maybe is set once an attempt may have reached a leader's log: the
	// command may commit, so a failure is ErrUnconfirmed.
	maybe := false
	fail := func() error {
		if maybe {
			return fmt.Errorf("%w; last: %v", ErrUnconfirmed, last)
		}
		return l.noQuorum(last)
	}
	// local is set when the last attempt never left this node (no leader
	// known, or it could not be reached): during an election the next
	// attempt comes soon, so the new leader gets it as soon as it is known.
	local := false
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			// Back off, unless the command applied meanwhile.
			d := time.Duration(min(attempt, 10)) * 20 * time.Millisecond
			if local {
				d = 10 * time.Millisecond
			}
			pause := time.NewTimer(d)
			select {
			case a := <-ch:
				pause.Stop()
				return a, nil
			case <-pause.C:
			case <-timer.C:
				pause.Stop()
				return Applied{}, fail()
			case <-ctx.Done():
				pause.Stop()
				return Applied{}, ctx.Err()
			case <-l.done:
				pause.Stop()
				return Applied{}, ErrClosed
			}
		}
		// An attempt gets a third of the time at most, so that a leader
		// lost mid-request leaves time to find the next one.
		timeout := min(time.Until(deadline), l.cfg.ProposeTimeout/3)
		var (
			err  error
			sent bool
			at   entryAt
		)
		if l.cfg.Group == MetadataGroup && l.raft.State() != raft.Leader {
			// A forward: while it waits for the leader's answer, this
			// node applies its log as far as its own writes show it
			// committed (durablecommit.go), which may take the command
			// in before the answer comes.
			res := make(chan submitted, 1)
			go func() {
				var s submitted
				s.err, s.sent, s.at = l.submit(env, timeout)
				res <- s
			}()
		forwarding:
			for {
				stored := l.stored.wait()
				l.applyDurable()
				select {
				case a := <-ch:
					return a, nil
				case s := <-res:
					err, sent, at = s.err, s.sent, s.at
					break forwarding
				case <-stored:
				case <-ctx.Done():
					return Applied{}, ctx.Err()
				case <-l.done:
					return Applied{}, ErrClosed
				}
			}
		} else {
			err, sent, at = l.submit(env, timeout)
		}
		if errors.Is(err, raft.ErrRaftShutdown) {
			return Applied{}, ErrClosed
		}
		local = err != nil && !sent
		if err != nil {
			last = err
			// Only an attempt that never left this node is known not
			// to have been taken: a leader's "not the leader" after a
			// step-down was seen (in a soak with leader kills) for a
			// command that went on to commit.
			if sent {
				maybe = true
			}
			continue
		}
		for {
			// The leader reported the entry committed: apply it (and
			// the entries before it) from this node's log as soon as
			// the log holds it, rather than wait until Raft here learns
			// of the commit (applyThrough).
			var stored <-chan struct{}
			if at.index != 0 && l.cfg.Group == MetadataGroup {
				stored = l.stored.wait()
				if l.fsm.applyThrough(l.logs, at) {
					stored, at = nil, entryAt{}
				}
			}
			select {
			case a := <-ch:
				return a, nil
			case <-stored:
				continue
			case <-timer.C:
				maybe, last = true, errors.New("committed, not yet applied on this node")
				return Applied{}, fail()
			case <-ctx.Done():
				return Applied{}, ctx.Err()
			case <-l.done:
				return Applied{}, ErrClosed
			}
		}
	}
}

func (l *RaftLog) noQuorum(last error) error {
	if last == nil {
		return ErrNoQuorum
	}
	return fmt.Errorf("%w; last: %v", ErrNoQuorum, last)
}

// Begin submits cmd behind every command this node submitted before it,
// without waiting, when this node leads the group (ok false otherwise:
// nothing was submitted, and Propose is the way). It is how a node keeps
// several proposals of its own in flight: Raft puts the commands in its
// log in the order Begin was called, and wait blocks until cmd is applied
// on this node, with its result, or fails.
//
// A command Begin submitted is never submitted again: if the leadership
// is lost meanwhile, wait goes on waiting for that entry, which the next
// leader commits if it has it. It fails with ErrNoQuorum once the entry is
// known lost (Raft never appended it, or this node applied past its index
// without it), or with ErrUnconfirmed ProposeTimeout after Begin (the
// entry may still apply later, but nobody waits for it). So the commands one caller submits with Begin apply in
// the order of its calls, or not at all: a later command never applies
// before an earlier one that applies. A caller that goes back to Propose
// must first wait for every Begin it made.
//
// Begin is called from one goroutine per caller; wait may be called from
// another, once.
func (l *RaftLog) Begin(cmd []byte) (wait func() (Applied, error), ok bool) {
	return l.BeginCommitted(cmd, nil)
}

// BeginCommitted is Begin that also calls committed, when it is not nil,
// once the command's entry is known committed on this node while it leads,
// as the commit is counted (a data group's leader: leaderCommitted),
// possibly before the command is applied. committed is not called when
// the commit is learned otherwise (the entry committed by a later leader,
// or not a data group); wait is the outcome either way. committed must not
// block: it runs on Raft's replication goroutines, in the order of the
// entries.
func (l *RaftLog) BeginCommitted(cmd []byte, committed func()) (wait func() (Applied, error), ok bool) {
	if l.raft == nil || l.raft.State() != raft.Leader {
		return nil, false
	}
	env := make([]byte, CommandHeadroom, CommandHeadroom+len(cmd))
	return l.BeginFramed(append(env, cmd...), committed)
}

// CommandHeadroom is how many bytes BeginFramed takes before a command in
// its buffer (the entry's request id).
const CommandHeadroom = len(reqID{})

// BeginFramed is BeginCommitted of the command buf[CommandHeadroom:]: it
// writes the entry's request id into buf[:CommandHeadroom] and proposes
// buf itself, so a caller that builds its command behind that much free
// room has it proposed without a copy. buf must not change afterwards.
func (l *RaftLog) BeginFramed(buf []byte, committed func()) (wait func() (Applied, error), ok bool) {
	if len(buf) < CommandHeadroom || l.raft == nil || l.raft.State() != raft.Leader {
		return nil, false
	}
	var id reqID
	if _, err := rand.Read(id[:]); err != nil {
		return nil, false
	}
	copy(buf, id[:])
	env := buf
	ch := l.fsm.wait(id)
	if committed != nil && l.rc.CommitHook != nil {
		// The entry will be past the log's last index now: nothing from
		// there on has been told (after a leader change the log may have
		// been cut below what this node told as an earlier leader).
		low := l.raft.LastIndex() + 1
		l.commitMu.Lock()
		if l.onCommitted == nil {
			l.onCommitted = make(map[reqID]commitCallback)
		}
		l.onCommitted[id] = commitCallback{f: committed, low: low}
		l.told = min(l.told, low-1)
		l.commitMu.Unlock()
	}
	start := time.Now()
	l.flying.Add(1)
	f := l.raft.Apply(env, l.cfg.ProposeTimeout)
	return func() (Applied, error) {
		defer l.fsm.unwait(id)
		if committed != nil {
			defer l.forgetCommitted(id)
		}
		err := f.Error()
		if errors.Is(err, raft.ErrRaftShutdown) {
			l.flying.Add(-1)
			return Applied{}, ErrClosed
		}
		// The followers learn of the commit from the next entry: the
		// last of this node's entries in flight asks for a commit
		// notice (notifyLoop).
		if l.flying.Add(-1) == 0 && err == nil {
			l.noticeSoon()
		}
		if err == nil {
			// Applied on this node: Raft answers a leader's future
			// after its FSM applied the entry.
			select {
			case a := <-ch:
				return a, nil
			default:
			}
		}
		// The leadership was lost. An entry Raft never appended (no
		// index) is in no log: refused. One that was appended may still
		// be committed by the next leader: it is known lost once this
		// node has applied past its index without it.
		idx := f.Index()
		if err != nil && idx == 0 {
			return Applied{}, l.noQuorum(err)
		}
		t := time.NewTimer(max(time.Until(start.Add(l.cfg.ProposeTimeout)), 0))
		defer t.Stop()
		poll := time.NewTicker(10 * time.Millisecond)
		defer poll.Stop()
		for {
			select {
			case a := <-ch:
				return a, nil
			case <-poll.C:
				if err == nil || l.fsm.applied.Load() < idx {
					continue
				}
				select {
				case a := <-ch:
					return a, nil
				default:
				}
				return Applied{}, l.noQuorum(err)
			case <-t.C:
				if err == nil {
					err = errors.New("committed, not yet applied on this node")
				}
				return Applied{}, fmt.Errorf("%w; last: %v", ErrUnconfirmed, err)
			case <-l.done:
				return Applied{}, ErrClosed
			}
		}
	}, true
}

// forgetCommitted drops the commit callback of request id, if it was not
// called.
func (l *RaftLog) forgetCommitted(id reqID) {
	l.commitMu.Lock()
	delete(l.onCommitted, id)
	l.commitMu.Unlock()
}

// commitCallback is a callback BeginCommitted registered: f, for an entry
// at index low or later.
type commitCallback struct {
	f   func()
	low uint64
}

// leaderCommitted is a data group leader's raft.Config.CommitHook: it calls
// the callbacks BeginCommitted registered for the entries up to index (read
// back from the log, from the lowest index a callback waits for: the latest
// entries are in memory), in the order of the entries.
func (l *RaftLog) leaderCommitted(index uint64) {
	l.commitMu.Lock()
	defer l.commitMu.Unlock()
	from := l.told + 1
	l.told = max(l.told, index)
	if len(l.onCommitted) == 0 {
		return
	}
	low := uint64(math.MaxUint64)
	for _, c := range l.onCommitted {
		low = min(low, c.low)
	}
	for i := max(from, low); i <= index && len(l.onCommitted) > 0; i++ {
		var e raft.Log
		if err := l.logs.GetLog(i, &e); err != nil || e.Type != raft.LogCommand || len(e.Data) < len(reqID{}) {
			continue
		}
		id := reqID(e.Data[:len(reqID{})])
		if c, ok := l.onCommitted[id]; ok {
			delete(l.onCommitted, id)
			c.f()
		}
	}
}

// ProposeFunc is Propose on a goroutine of its own, which calls done.
func (l *RaftLog) ProposeFunc(cmd []byte, done func(Applied, error)) {
	cmd = bytes.Clone(cmd)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		done(l.Propose(context.Background(), cmd))
	}()
}

// submit hands env to the leader: raft's Apply on the leader, a forward
// over an 'M' stream elsewhere. A nil error means committed; sent reports
// that the command may have reached a leader.
func (l *RaftLog) submit(env []byte, timeout time.Duration) (err error, sent bool, at entryAt) {
	if timeout <= 0 {
		return ErrNoQuorum, false, at
	}
	if l.raft.State() == raft.Leader {
		err := l.raft.Apply(env, timeout).Error()
		if err == nil {
			l.noticeSoon()
		}
		return err, true, at
	}
	addr, _ := l.raft.LeaderWithID()
	if addr == "" {
		return errNoLeader, false, at
	}
	resp, sent, err := l.call(string(addr), metaPropose, env, timeout)
	if err == nil {
		at, _ = decodeEntryAt(resp)
	}
	return err, sent, at
}

// submitted is the outcome of a submit.
type submitted struct {
	err  error
	sent bool
	at   entryAt
}

// entryAt names a committed entry by its index and term: the leader
// answers a forwarded proposal with its entry's (a leader of an older
// version answers with nothing: the zero entryAt).
type entryAt struct{ index, term uint64 }

func (a entryAt) appendTo(b []byte) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(b, a.index), a.term)
}

func decodeEntryAt(b []byte) (entryAt, bool) {
	if len(b) != 16 {
		return entryAt{}, false
	}
	return entryAt{binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])}, true
}

var errNoLeader = errors.New("no leader known")

// running returns the group's Raft once Start has made it, else nil.
func (l *RaftLog) running() *raft.Raft {
	select {
	case <-l.ready:
		return l.raft
	default:
		return nil
	}
}

// AppliedIndex is the index of the last command applied on this node.
func (l *RaftLog) AppliedIndex() uint64 { return l.fsm.applied.Load() }

// Leader returns the name and address of the group's leader as this node
// knows it (empty when none).
func (l *RaftLog) Leader() (name, addr string) {
	r := l.running()
	if r == nil {
		return "", ""
	}
	a, id := r.LeaderWithID()
	return string(id), string(a)
}

// Snapshot takes a snapshot now (tests, operators).
func (l *RaftLog) Snapshot() error { return l.raft.Snapshot().Error() }

// raftFSM is raft.FSM over a StateMachine: it unwraps each entry's
// request id, applies a request once, and hands the result to the proposer
// waiting on this node.
type raftFSM struct {
	sm      StateMachine
	applied atomic.Uint64
	// appliedSig is fired after applied grows while appliedWaiters is
	// not zero (waitApplied); the apply path costs one atomic load else.
	appliedSig     signal
	appliedWaiters atomic.Int32
	// committed is told the index of each command before it is applied
	// (RaftLog.committedAt).
	committed func(index uint64)

	mu      sync.Mutex
	waiters map[reqID]chan Applied

	// applyMu serialises the applies, snapshots and restores of Raft's
	// FSM goroutine with the applies of a proposer that applies committed
	// entries ahead of it (applyThrough).
	applyMu sync.Mutex

	// seen are the request ids of the last maxSeen commands, in order
	// (FSM goroutine).
	seen  map[reqID]struct{}
	order []reqID
	next  int
}

type reqID [16]byte

const maxSeen = 1 << 16

func newRaftFSM(sm StateMachine) *raftFSM {
	return &raftFSM{sm: sm, waiters: make(map[reqID]chan Applied), seen: make(map[reqID]struct{})}
}

func (f *raftFSM) wait(id reqID) chan Applied {
	ch := make(chan Applied, 1)
	f.mu.Lock()
	f.waiters[id] = ch
	f.mu.Unlock()
	return ch
}

func (f *raftFSM) unwait(id reqID) {
	f.mu.Lock()
	delete(f.waiters, id)
	f.mu.Unlock()
}

func (f *raftFSM) failWaiters() {
	f.mu.Lock()
	clear(f.waiters)
	f.mu.Unlock()
}

func (f *raftFSM) remember(id reqID) {
	if len(f.order) < maxSeen {
		f.order = append(f.order, id)
	} else {
		delete(f.seen, f.order[f.next])
		f.order[f.next] = id
		f.next = (f.next + 1) % maxSeen
	}
	f.seen[id] = struct{}{}
}

// Apply implements raft.FSM.
func (f *raftFSM) Apply(e *raft.Log) any {
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	if e.Index <= f.applied.Load() {
		// Applied already, ahead of Raft (applyThrough).
		return nil
	}
	f.applyLocked(e)
	return nil
}

// applyThrough applies, on a follower, the entries of its log after the
// last one applied up to at, which the leader reported committed, once
// the log holds at (the same index and term): by Raft's log matching the
// log up to there is the leader's, and all of it is committed. Raft's FSM
// goroutine skips them when it gets to them (Apply). It reports whether
// at is applied; logs is the group's log store.
func (f *raftFSM) applyThrough(logs raft.LogStore, at entryAt) bool {
	if f.applied.Load() >= at.index {
		return true
	}
	var e raft.Log
	if err := logs.GetLog(at.index, &e); err != nil || e.Term != at.term {
		return false
	}
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	for i := f.applied.Load() + 1; i <= at.index; i++ {
		var e raft.Log
		if err := logs.GetLog(i, &e); err != nil {
			return false
		}
		f.applyLocked(&e)
		f.setApplied(i)
	}
	return true
}

// setApplied records index as applied and wakes waitApplied's waiters.
func (f *raftFSM) setApplied(index uint64) {
	f.applied.Store(index)
	if f.appliedWaiters.Load() > 0 {
		f.appliedSig.fire()
	}
}

// applyLocked applies e. Hold applyMu.
func (f *raftFSM) applyLocked(e *raft.Log) {
	if !isCommand(e) {
		return
	}
	var id reqID
	copy(id[:], e.Data)
	if id == (reqID{}) {
		// The no-op of the first snapshot (seedSnapshot).
		f.setApplied(e.Index)
		return
	}
	if _, dup := f.seen[id]; dup {
		f.setApplied(e.Index)
		return
	}
	if f.committed != nil {
		f.committed(e.Index)
	}
	var res any
	if len(e.Data) == len(id) {
		// A barrier (CatchUp): no command, only the point in the log
		// its proposer waits to have applied.
		f.setApplied(e.Index)
	} else {
		res = f.sm.Apply(e.Index, e.Data[len(id):])
		f.remember(id)
		f.setApplied(e.Index)
	}
	f.mu.Lock()
	ch := f.waiters[id]
	delete(f.waiters, id)
	f.mu.Unlock()
	if ch != nil {
		ch <- Applied{Index: e.Index, Result: res}
	}
	return
}

// Snapshot implements raft.FSM: the last command index, the remembered
// request ids and the machine's snapshot.
func (f *raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	s, err := f.sm.Snapshot()
	if err != nil {
		return nil, err
	}
	ids := make([]reqID, 0, len(f.order))
	ids = append(ids, f.order[f.next:]...)
	ids = append(ids, f.order[:f.next]...)
	return &fsmSnapshot{index: f.applied.Load(), ids: ids, s: s}, nil
}

// Restore implements raft.FSM.
func (f *raftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	var hdr [12]byte
	if _, err := io.ReadFull(rc, hdr[:]); err != nil {
		return fmt.Errorf("cluster: snapshot header: %w", err)
	}
	index := binary.BigEndian.Uint64(hdr[:8])
	n := binary.BigEndian.Uint32(hdr[8:])
	if n > maxSeen {
		return fmt.Errorf("cluster: snapshot with %d request ids", n)
	}
	ids := make([]reqID, n)
	for i := range ids {
		if _, err := io.ReadFull(rc, ids[i][:]); err != nil {
			return fmt.Errorf("cluster: snapshot request ids: %w", err)
		}
	}
	if err := f.sm.Restore(index, rc); err != nil {
		return err
	}
	clear(f.seen)
	f.order, f.next = f.order[:0], 0
	for _, id := range ids {
		f.remember(id)
	}
	f.setApplied(index)
	return nil
}

type fsmSnapshot struct {
	index uint64
	ids   []reqID
	s     StateSnapshot
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	hdr := binary.BigEndian.AppendUint64(make([]byte, 0, 12+len(s.ids)*16), s.index)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(s.ids)))
	for _, id := range s.ids {
		hdr = append(hdr, id[:]...)
	}
	if _, err := sink.Write(hdr); err != nil {
		sink.Cancel()
		return err
	}
	if _, err := s.s.WriteTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() { s.s.Release() }
