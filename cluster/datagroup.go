package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/yamux"
	"go.uber.org/zap"

	"github.com/warrenmq/warren/store"
)

// Data groups: a bounded pool of Raft groups (ids from 1) beside the
// metadata group, each replicating the state machine of the quorum queues
// placed in it. A group is a RaftLog like the metadata group, with these
// differences:
//
//   - Its members are decided by the metadata group (a GroupSpec recorded
//     there, PlanGroups); every member founds the group with the same
//     configuration (RaftLogConfig.Servers), so there is no join and no
//     first snapshot: a data group starts empty.
//   - Its requests between nodes (forwarded proposals) go on 'G' streams,
//     which name the group: 'G' group(8) op(1) len(4) payload, answered as
//     on 'M' streams.
//   - DataGroups runs the groups a node is a member of and spreads their
//     leaders: a group's preferred leader is its first member, and a node
//     that leads a group it is not the first member of hands the
//     leadership to that member while it is a voter connected to this node
//     (and tries again no sooner than transferBackoff after a failure): a
//     node that comes back takes its groups back. The hand-over waits
//     until the group is quiet (nothing applied for a whole balanceEvery):
//     Raft refuses proposals while a transfer is in progress, so handing a
//     busy group over would refuse (nack) its publishes, e.g. the first
//     ones to a queue in a group that was just woken and elected another
//     member first.

// GroupMember is a member of a data group: a node's name and cluster
// address.
type GroupMember struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
}

// GroupSpec is a data group as the metadata group records it: its id and
// members, the first the preferred leader.
//
// Epoch counts the changes made to the group's members after it was
// planned (ChangeMembers): once it is not 0 no node founds the group (a
// member that has no state for it waits for the leader to add it), and
// Leaving lists the members taken out of Members whose removal from the
// group's Raft configuration is not known to be committed yet.
type GroupSpec struct {
	ID      uint64        `json:"id"`
	Members []GroupMember `json:"members"`
	Epoch   uint64        `json:"epoch,omitempty"`
	Leaving []GroupMember `json:"leaving,omitempty"`
}

// Has reports whether node is one of the group's members (not counting
// those leaving).
func (s *GroupSpec) Has(node string) bool {
	return slices.ContainsFunc(s.Members, func(m GroupMember) bool { return m.Name == node })
}

// AddMember adds m to the group's members (last: not the preferred
// leader) and reports whether the plan changed.
func (s *GroupSpec) AddMember(m GroupMember) bool {
	if s.Has(m.Name) {
		return false
	}
	s.Members = append(slices.Clone(s.Members), m)
	s.Leaving = slices.DeleteFunc(slices.Clone(s.Leaving), func(l GroupMember) bool { return l.Name == m.Name })
	s.Epoch++
	return true
}

// RemoveMember takes node out of the group's members, into Leaving, and
// reports whether the plan changed. It refuses to remove the last member.
func (s *GroupSpec) RemoveMember(node string) (bool, error) {
	i := slices.IndexFunc(s.Members, func(m GroupMember) bool { return m.Name == node })
	if i < 0 {
		return false, nil
	}
	if len(s.Members) == 1 {
		return false, fmt.Errorf("cluster: node %s is the last member of data group %d", node, s.ID)
	}
	m := s.Members[i]
	s.Members = slices.Delete(slices.Clone(s.Members), i, i+1)
	if !slices.ContainsFunc(s.Leaving, func(l GroupMember) bool { return l.Name == node }) {
		s.Leaving = append(slices.Clone(s.Leaving), m)
	}
	s.Epoch++
	return true, nil
}

// PlanGroups places count groups of size members each (fewer when there
// are fewer nodes) over nodes: group g (from 1) takes the nodes from
// position g-1 on in name order, wrapping around, so that each node is
// the first member — the preferred leader — of as many groups as any
// other, and the members of the groups are spread alike.
func PlanGroups(nodes []GroupMember, count, size int) []GroupSpec {
	if len(nodes) == 0 || count <= 0 || size <= 0 {
		return nil
	}
	ns := slices.Clone(nodes)
	slices.SortFunc(ns, func(a, b GroupMember) int { return strings.Compare(a.Name, b.Name) })
	size = min(size, len(ns))
	specs := make([]GroupSpec, count)
	for g := range count {
		specs[g].ID = uint64(g + 1)
		for i := range size {
			specs[g].Members = append(specs[g].Members, ns[(g+i)%len(ns)])
		}
	}
	return specs
}

// metaHeader is the header of a request stream of group g: 'M' for the
// metadata group, 'G' g(8) for a data group.
func metaHeader(g uint64) []byte {
	if g == MetadataGroup {
		return []byte{streamMeta}
	}
	return binary.BigEndian.AppendUint64([]byte{streamGroupMeta}, g)
}

// setMeta registers (h nil: removes) the request handler of group g.
func (n *Node) setMeta(g uint64, h LinkHandler) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if g == MetadataGroup {
		n.meta = h
		return
	}
	if h == nil {
		delete(n.groupMeta, g)
		return
	}
	if n.groupMeta == nil {
		n.groupMeta = make(map[uint64]LinkHandler)
	}
	n.groupMeta[g] = h
}

// serveGroupMeta serves a 'G' stream: it reads the group id and hands the
// stream to that group's handler (closed when the group does not run
// here: the forwarder tries again).
func (n *Node) serveGroupMeta(s *session, st *yamux.Stream) {
	var g [8]byte
	if _, err := io.ReadFull(st, g[:]); err != nil {
		st.Close()
		return
	}
	_ = st.SetReadDeadline(time.Time{})
	n.mu.Lock()
	h := n.groupMeta[binary.BigEndian.Uint64(g[:])]
	n.mu.Unlock()
	if h != nil {
		h(s.name, st)
	}
	st.Close()
}

// startDataGroup founds a data group with its configured members, unless
// it has Raft state already (Start).
func (l *RaftLog) startDataGroup(existing bool) error {
	if !existing && !l.cfg.Join {
		f := l.raft.BootstrapCluster(raft.Configuration{Servers: l.cfg.Servers})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("cluster: found group %d: %w", l.cfg.Group, err)
		}
	}
	l.seeded.Store(true)
	l.wg.Add(2)
	go l.notifyLoop()
	go l.failoverLoop()
	return nil
}

// IsLeader reports whether this node leads the group.
func (l *RaftLog) IsLeader() bool {
	r := l.running()
	return r != nil && r.State() == raft.Leader
}

// LeaderCh is raft's leadership channel of the group: true when this node
// becomes the leader, false when it stops being it. Only one reader may
// use it.
func (l *RaftLog) LeaderCh() <-chan bool { <-l.ready; return l.raft.LeaderCh() }

// DataGroupsConfig configures NewDataGroups.
type DataGroupsConfig struct {
	// Node is the started cluster node; Store keeps the groups' logs
	// (group g in store log LogBase+g) and Dir their snapshots (Dir/g<g>).
	Node    *Node
	Store   *store.Store
	LogBase uint64
	Dir     string
	// Machine returns the state machine of group g (called once per group
	// started).
	Machine func(g uint64) StateMachine
	// ProposeTimeout, HeartbeatTimeout, SnapshotThreshold and TrailingLogs
	// are those of each group's RaftLog (defaults there).
	ProposeTimeout    time.Duration
	HeartbeatTimeout  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
	Logger            *zap.Logger
}

// transferBackoff is how long a node waits after a failed leadership
// transfer of a group before trying again; balanceEvery how often it
// looks.
const (
	transferBackoff = 10 * time.Second
	balanceEvery    = time.Second
)

// DataGroups runs the data groups this node is a member of (Ensure) and
// spreads their leaders over their preferred members.
type DataGroups struct {
	cfg DataGroupsConfig
	log *zap.Logger

	mu     sync.Mutex
	groups map[uint64]*dataGroup
	closed bool
	// started is set once the balancer runs.
	started bool
	done    chan struct{}
	wg      sync.WaitGroup
}

type dataGroup struct {
	spec    GroupSpec
	log     *RaftLog
	machine *lazyMachine
	// retryAt: no leadership transfer before then; applied: the group's
	// applied index at the balancer's last look (balancer goroutine).
	retryAt time.Time
	applied uint64
}

// NewDataGroups returns the manager of this node's data groups.
func NewDataGroups(cfg DataGroupsConfig) (*DataGroups, error) {
	if cfg.Node == nil || cfg.Store == nil || cfg.Machine == nil || cfg.Dir == "" {
		return nil, errors.New("cluster: DataGroupsConfig needs a Node, a Store, a Dir and a Machine")
	}
	lg := cfg.Logger
	if lg == nil {
		lg = cfg.Node.log
	}
	return &DataGroups{cfg: cfg, log: lg, groups: make(map[uint64]*dataGroup), done: make(chan struct{})}, nil
}

// Ensure starts the groups of specs this node is a member of and does not
// run yet, and returns the ids of those it started. A group already
// running keeps its Raft configuration (membership changes are the
// leader's, later).
func (d *DataGroups) Ensure(specs []GroupSpec) ([]uint64, error) {
	var started []uint64
	var errs []error
	for _, spec := range specs {
		dg, err := d.add(spec)
		if err != nil {
			return started, err
		}
		if dg == nil {
			continue
		}
		if err := d.run(dg); err != nil {
			if errors.Is(err, ErrClosed) {
				return started, err
			}
			errs = append(errs, err)
			continue
		}
		started = append(started, spec.ID)
	}
	return started, errors.Join(errs...)
}

// Wake returns the log of group spec.ID when this node is a member (nil
// otherwise, or once closed), and starts the group on a goroutine of its
// own if it does not run yet: proposals made meanwhile wait for the start.
// It never blocks on the start, so a caller may hold its own locks (the
// group's state machine is made on that goroutine).
func (d *DataGroups) Wake(spec GroupSpec) *RaftLog {
	if l := d.Group(spec.ID); l != nil {
		return l
	}
	dg, err := d.add(spec)
	if err != nil || dg == nil {
		return d.Group(spec.ID)
	}
	go func() {
		if err := d.run(dg); err != nil && !errors.Is(err, ErrClosed) {
			d.log.Warn("starting a data group", zap.Uint64("group", spec.ID), zap.Error(err))
		}
	}()
	return dg.log
}

// add files a log for spec, not started yet, and returns it; nil when this
// node is not a member or the group is filed already. The caller must run
// it (run): Close waits for that.
func (d *DataGroups) add(spec GroupSpec) (*dataGroup, error) {
	self := d.cfg.Node.Name()
	if spec.ID == MetadataGroup || !slices.ContainsFunc(spec.Members, func(m GroupMember) bool { return m.Name == self }) {
		return nil, nil
	}
	servers := make([]raft.Server, len(spec.Members))
	for i, m := range spec.Members {
		servers[i] = raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.Name), Address: raft.ServerAddress(m.Addr)}
	}
	m := &lazyMachine{f: func() StateMachine { return d.cfg.Machine(spec.ID) }}
	l, err := NewRaftLog(RaftLogConfig{
		Join: spec.Epoch > 0,
		Node: d.cfg.Node, Group: spec.ID, Store: d.cfg.Store, LogID: d.cfg.LogBase + spec.ID,
		SnapshotDir: filepath.Join(d.cfg.Dir, fmt.Sprintf("g%d", spec.ID)), Machine: m,
		LogDir:         filepath.Join(d.cfg.Dir, fmt.Sprintf("g%d", spec.ID), "log"),
		ProposeTimeout: d.cfg.ProposeTimeout, HeartbeatTimeout: d.cfg.HeartbeatTimeout,
		SnapshotThreshold: d.cfg.SnapshotThreshold, TrailingLogs: d.cfg.TrailingLogs,
		Servers: servers, Logger: d.log,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: data group %d: %w", spec.ID, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if d.groups[spec.ID] != nil {
		return nil, nil
	}
	l.starting.Store(true)
	dg := &dataGroup{spec: spec, log: l, machine: m}
	d.groups[spec.ID] = dg
	d.wg.Add(1)
	return dg, nil
}

// run starts a group add filed; a group that fails to start is unfiled.
func (d *DataGroups) run(dg *dataGroup) error {
	defer d.wg.Done()
	dg.machine.get()
	err := dg.log.Start(false)
	d.mu.Lock()
	if err != nil || d.closed {
		if d.groups[dg.spec.ID] == dg {
			delete(d.groups, dg.spec.ID)
		}
		closed := d.closed
		d.mu.Unlock()
		_ = dg.log.Close()
		if err != nil {
			return fmt.Errorf("cluster: data group %d: %w", dg.spec.ID, err)
		}
		if closed {
			return ErrClosed
		}
	}
	if !d.started {
		d.started = true
		d.wg.Add(1)
		go d.balance()
	}
	d.mu.Unlock()
	d.log.Info("data group started", zap.Uint64("group", dg.spec.ID), zap.Any("members", dg.spec.Members))
	if len(dg.spec.Members) > 1 && dg.spec.Members[0].Name == d.cfg.Node.Name() {
		dg.log.electFirst()
	}
	return nil
}

// lazyMachine is a group's state machine, made (DataGroupsConfig.Machine)
// when the group starts.
type lazyMachine struct {
	once sync.Once
	f    func() StateMachine
	m    StateMachine
}

func (m *lazyMachine) get() StateMachine {
	m.once.Do(func() { m.m = m.f() })
	return m.m
}

func (m *lazyMachine) Apply(index uint64, cmd []byte) any      { return m.get().Apply(index, cmd) }
func (m *lazyMachine) Snapshot() (StateSnapshot, error)        { return m.get().Snapshot() }
func (m *lazyMachine) Restore(index uint64, r io.Reader) error { return m.get().Restore(index, r) }

// Group returns the log of group g, or nil when this node does not run
// it.
func (d *DataGroups) Group(g uint64) *RaftLog {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dg := d.groups[g]; dg != nil {
		return dg.log
	}
	return nil
}

// Running returns the ids of the groups this node runs, in order.
func (d *DataGroups) Running() []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := make([]uint64, 0, len(d.groups))
	for g := range d.groups {
		ids = append(ids, g)
	}
	slices.Sort(ids)
	return ids
}

// balance hands the leadership of each group this node leads to the
// group's preferred member (its first), once a second.
func (d *DataGroups) balance() {
	defer d.wg.Done()
	t := time.NewTicker(balanceEvery)
	defer t.Stop()
	for {
		select {
		case <-d.done:
			return
		case <-t.C:
		}
		d.mu.Lock()
		groups := make([]*dataGroup, 0, len(d.groups))
		prefs := make([]GroupMember, 0, len(d.groups))
		for _, dg := range d.groups {
			if len(dg.spec.Members) == 0 {
				continue
			}
			groups = append(groups, dg)
			prefs = append(prefs, dg.spec.Members[0])
		}
		d.mu.Unlock()
		now := time.Now()
		for i, dg := range groups {
			pref := prefs[i]
			applied := dg.log.AppliedIndex()
			busy := applied != dg.applied
			dg.applied = applied
			if pref.Name == d.cfg.Node.Name() || now.Before(dg.retryAt) || busy || !dg.log.IsLeader() {
				continue
			}
			if dg.log.Members()[pref.Name] != pref.Addr || !d.cfg.Node.connected(pref.Addr) {
				continue
			}
			err := dg.log.raft.LeadershipTransferToServer(raft.ServerID(pref.Name), raft.ServerAddress(pref.Addr)).Error()
			if err != nil {
				d.log.Debug("data group leadership transfer failed", zap.Uint64("group", dg.spec.ID), zap.String("to", pref.Name), zap.Error(err))
				dg.retryAt = now.Add(transferBackoff)
				continue
			}
			d.log.Info("data group leadership handed to its preferred member", zap.Uint64("group", dg.spec.ID), zap.String("to", pref.Name))
		}
	}
}

// membersTimeout bounds a Raft membership change or leadership transfer
// Reconcile makes.
const membersTimeout = 10 * time.Second

// Reconcile brings the running groups in line with specs, the plan as
// changed by membership verbs (GroupSpec.Epoch):
//
//   - a group this node runs but is no longer a member of: while it is
//     in Leaving, this node hands the group's leadership to a member if
//     it leads it (the leader then removes it); once it is in neither
//     Members nor Leaving (its removal is committed), the group is
//     stopped here and its Raft log and snapshots deleted: the ids are
//     returned in dropped;
//   - a group this node leads: the plan's members missing from its Raft
//     configuration are added (AddVoter: they catch up from the leader's
//     snapshot and log), the servers not in the plan removed
//     (RemoveServer), and the Leaving members no longer in the
//     configuration returned in removed (group id to names) for the
//     caller to take out of the plan.
//
// It runs on the caller's goroutine and may block for membersTimeout per
// change.
func (d *DataGroups) Reconcile(specs []GroupSpec) (removed map[uint64][]string, dropped []uint64) {
	self := d.cfg.Node.Name()
	for _, spec := range specs {
		d.mu.Lock()
		dg := d.groups[spec.ID]
		if dg != nil {
			dg.spec = spec
		}
		d.mu.Unlock()
		if dg == nil || dg.log.running() == nil {
			continue
		}
		leaving := slices.ContainsFunc(spec.Leaving, func(m GroupMember) bool { return m.Name == self })
		if !spec.Has(self) {
			if leaving {
				d.handOver(dg, spec)
				continue
			}
			d.drop(dg)
			dropped = append(dropped, spec.ID)
			continue
		}
		if !dg.log.IsLeader() {
			continue
		}
		cfg := dg.log.Members()
		if cfg == nil {
			continue
		}
		for _, m := range spec.Members {
			if _, ok := cfg[m.Name]; ok {
				continue
			}
			err := dg.log.raft.AddVoter(raft.ServerID(m.Name), raft.ServerAddress(m.Addr), 0, membersTimeout).Error()
			dg.log.membersChanged()
			d.log.Info("data group member added", zap.Uint64("group", spec.ID), zap.String("node", m.Name), zap.Error(err))
		}
		for name := range cfg {
			if name == self || spec.Has(name) {
				continue
			}
			err := dg.log.raft.RemoveServer(raft.ServerID(name), 0, membersTimeout).Error()
			dg.log.membersChanged()
			d.log.Info("data group member removed", zap.Uint64("group", spec.ID), zap.String("node", name), zap.Error(err))
		}
		if !dg.log.IsLeader() {
			continue
		}
		cfg = dg.log.Members()
		for _, m := range spec.Leaving {
			if _, ok := cfg[m.Name]; !ok && cfg != nil {
				if removed == nil {
					removed = map[uint64][]string{}
				}
				removed[spec.ID] = append(removed[spec.ID], m.Name)
			}
		}
	}
	return removed, dropped
}

// handOver transfers the leadership of dg, which this node leads and is
// leaving, to a member of spec connected to this node.
func (d *DataGroups) handOver(dg *dataGroup, spec GroupSpec) {
	if !dg.log.IsLeader() {
		return
	}
	cfg := dg.log.Members()
	for _, m := range spec.Members {
		if cfg[m.Name] != m.Addr || !d.cfg.Node.connected(m.Addr) {
			continue
		}
		err := dg.log.raft.LeadershipTransferToServer(raft.ServerID(m.Name), raft.ServerAddress(m.Addr)).Error()
		d.log.Info("leaving data group: leadership handed over", zap.Uint64("group", spec.ID), zap.String("to", m.Name), zap.Error(err))
		if err == nil {
			return
		}
	}
}

// drop stops dg on this node, whose removal from the group is committed,
// and deletes its Raft log and snapshots.
func (d *DataGroups) drop(dg *dataGroup) {
	d.mu.Lock()
	if d.groups[dg.spec.ID] != dg {
		d.mu.Unlock()
		return
	}
	delete(d.groups, dg.spec.ID)
	d.mu.Unlock()
	if err := dg.log.Close(); err != nil {
		d.log.Warn("stopping a data group this node left", zap.Uint64("group", dg.spec.ID), zap.Error(err))
	}
	if err := d.cfg.Store.Log(d.cfg.LogBase + dg.spec.ID).Remove(); err != nil {
		d.log.Warn("deleting the log of a data group this node left", zap.Uint64("group", dg.spec.ID), zap.Error(err))
	}
	if err := os.RemoveAll(filepath.Join(d.cfg.Dir, fmt.Sprintf("g%d", dg.spec.ID))); err != nil {
		d.log.Warn("deleting the snapshots of a data group this node left", zap.Uint64("group", dg.spec.ID), zap.Error(err))
	}
	d.log.Info("left data group: its replica dropped", zap.Uint64("group", dg.spec.ID))
}

// Close stops this node's groups (they stay members).
func (d *DataGroups) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	groups := d.groups
	d.groups = map[uint64]*dataGroup{}
	d.mu.Unlock()
	d.wg.Wait()
	var errs []error
	for _, dg := range groups {
		errs = append(errs, dg.log.Close())
	}
	return errors.Join(errs...)
}

// connected reports whether this node has a live session with the node at
// addr.
func (n *Node) connected(addr string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.peers[addr]
	return p != nil && p.sess != nil && !p.sess.ys.IsClosed()
}
