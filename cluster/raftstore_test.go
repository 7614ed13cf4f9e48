package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftbench "github.com/hashicorp/raft/bench"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/store"
)

func openStore(t testing.TB, dir string, sync bool) *store.Store {
	t.Helper()
	log := zap.NewNop()
	if tt, ok := t.(*testing.T); ok {
		log = zaptest.NewLogger(tt, zaptest.Level(zap.WarnLevel))
	}
	st, err := store.Open(store.Config{Dir: dir, NoSync: !sync, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestRaftStoreContract checks the adapter against what Raft relies on: a
// missing log is raft.ErrLogNotFound, a missing key "not found", entries come
// back field for field, and HasExistingState sees the state.
func TestRaftStoreContract(t *testing.T) {
	st := openStore(t, t.TempDir(), false)
	defer st.Close()
	rs := NewRaftStore(st.Log(1))
	var l raft.Log
	if err := rs.GetLog(1, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog of a missing index: %v", err)
	}
	if _, err := rs.Get([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("Get of a missing key: %v", err)
	}
	if _, err := rs.GetUint64([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("GetUint64 of a missing key: %v", err)
	}
	if ok, err := raft.HasExistingState(rs, rs, raft.NewInmemSnapshotStore()); err != nil || ok {
		t.Fatalf("HasExistingState of an empty log: %v %v", ok, err)
	}
	now := time.Now()
	in := []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("conf"), AppendedAt: now},
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("cmd"), Extensions: []byte("ext"), AppendedAt: now},
		{Index: 3, Term: 2, Type: raft.LogNoop},
	}
	if err := rs.StoreLogs(in); err != nil {
		t.Fatal(err)
	}
	for _, want := range in {
		var got raft.Log
		if err := rs.GetLog(want.Index, &got); err != nil {
			t.Fatal(err)
		}
		if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type || !bytes.Equal(got.Data, want.Data) ||
			!bytes.Equal(got.Extensions, want.Extensions) || !got.AppendedAt.Equal(want.AppendedAt) {
			t.Fatalf("GetLog(%d) = %+v, want %+v", want.Index, got, want)
		}
	}
	if first, _ := rs.FirstIndex(); first != 1 {
		t.Fatalf("FirstIndex %d", first)
	}
	if last, _ := rs.LastIndex(); last != 3 {
		t.Fatalf("LastIndex %d", last)
	}
	if ok, err := raft.HasExistingState(rs, rs, raft.NewInmemSnapshotStore()); err != nil || !ok {
		t.Fatalf("HasExistingState with entries: %v %v", ok, err)
	}
	if err := rs.SetUint64([]byte("CurrentTerm"), 2); err != nil {
		t.Fatal(err)
	}
	if v, err := rs.GetUint64([]byte("CurrentTerm")); err != nil || v != 2 {
		t.Fatalf("GetUint64: %d %v", v, err)
	}
	if err := rs.DeleteRange(2, 3); err != nil {
		t.Fatal(err)
	}
	if last, _ := rs.LastIndex(); last != 1 {
		t.Fatalf("LastIndex after a suffix deletion: %d", last)
	}
}

// TestSegmentStoreContract: the segment log adapter answers as Raft
// expects, and openSegmentStore moves entries an older version kept in the
// store's log into the segment log, leaving the term and vote where they
// are.
func TestSegmentStoreContract(t *testing.T) {
	st := openStore(t, t.TempDir(), false)
	defer st.Close()
	old := NewRaftStore(st.Log(7))
	now := time.Now()
	var in []*raft.Log
	for i := uint64(1); i <= 300; i++ {
		if i > 100 && i < 150 {
			continue // a gap, as a snapshot install leaves
		}
		in = append(in, &raft.Log{Index: i, Term: 1 + i/100, Type: raft.LogCommand,
			Data: bytes.Repeat([]byte{byte(i)}, int(i)), Extensions: []byte(fmt.Sprint(i)), AppendedAt: now})
	}
	if err := old.StoreLogs(in); err != nil {
		t.Fatal(err)
	}
	if err := old.SetUint64([]byte("CurrentTerm"), 4); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	check := func(s raft.LogStore, want []*raft.Log) {
		t.Helper()
		for _, w := range want {
			var got raft.Log
			if err := s.GetLog(w.Index, &got); err != nil {
				t.Fatalf("GetLog(%d): %v", w.Index, err)
			}
			if got.Index != w.Index || got.Term != w.Term || got.Type != w.Type || !bytes.Equal(got.Data, w.Data) ||
				!bytes.Equal(got.Extensions, w.Extensions) || !got.AppendedAt.Equal(w.AppendedAt) {
				t.Fatalf("GetLog(%d) = %+v, want %+v", w.Index, got, w)
			}
		}
		var got raft.Log
		if err := s.GetLog(120, &got); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("GetLog in the gap: %v", err)
		}
		if first, _ := s.FirstIndex(); first != want[0].Index {
			t.Fatalf("FirstIndex %d", first)
		}
		if last, _ := s.LastIndex(); last != want[len(want)-1].Index {
			t.Fatalf("LastIndex %d", last)
		}
	}
	for range 2 { // moved once; the second open finds nothing to move
		sl, err := openSegmentStore(dir, st, st.Log(7))
		if err != nil {
			t.Fatal(err)
		}
		s := SegmentStore{sl}
		check(s, in)
		if first, last, err := st.Log(7).Bounds(); err != nil || first != 0 || last != 0 {
			t.Fatalf("store log after the move: %d–%d %v", first, last, err)
		}
		if v, err := old.GetUint64([]byte("CurrentTerm")); err != nil || v != 4 {
			t.Fatalf("term after the move: %d %v", v, err)
		}
		if ok, err := raft.HasExistingState(s, old, raft.NewInmemSnapshotStore()); err != nil || !ok {
			t.Fatalf("HasExistingState: %v %v", ok, err)
		}
		sl.Close()
	}
	// A move cut short (entries still in the store's log) starts again.
	if err := old.StoreLogs(in[:10]); err != nil {
		t.Fatal(err)
	}
	sl, err := openSegmentStore(dir, st, st.Log(7))
	if err != nil {
		t.Fatal(err)
	}
	s := SegmentStore{sl}
	check(s, in[:10])
	if err := s.DeleteRange(5, 10); err != nil {
		t.Fatal(err)
	}
	if last, _ := s.LastIndex(); last != 4 {
		t.Fatalf("LastIndex after a suffix deletion: %d", last)
	}
	sl.Close()
}

// listFSM is a Raft FSM that keeps the commands applied, in order.
type listFSM struct {
	mu   sync.Mutex
	cmds []string
}

func (f *listFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cmds = append(f.cmds, string(l.Data))
	return len(f.cmds)
}

func (f *listFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return listSnapshot(slices.Clone(f.cmds)), nil
}

func (f *listFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	var cmds []string
	if err := json.NewDecoder(r).Decode(&cmds); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cmds = cmds
	return nil
}

func (f *listFSM) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.cmds)
}

type listSnapshot []string

func (s listSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode([]string(s)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (listSnapshot) Release() {}

// node is one member of the test's Raft groups: one store, and per group a
// Raft instance on its own log of that store.
type node struct {
	id     int
	dir    string
	st     *store.Store
	rafts  []*raft.Raft
	fsms   []*listFSM
	trans  []*raft.InmemTransport
	snapDB []string
}

const groups = 2

func addr(node, group int) raft.ServerAddress {
	return raft.ServerAddress(fmt.Sprintf("n%d-g%d", node, group))
}

func raftConfig(id int) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(fmt.Sprintf("n%d", id))
	c.HeartbeatTimeout = 200 * time.Millisecond
	c.ElectionTimeout = 200 * time.Millisecond
	c.LeaderLeaseTimeout = 100 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.TrailingLogs = 10
	c.SnapshotThreshold = 1 << 30 // snapshots only when the test asks
	c.SnapshotInterval = time.Hour
	c.LogOutput = io.Discard
	return c
}

// start opens the node's store and starts its Raft instances, bootstrapping
// the groups when boot is set.
func (n *node) start(t *testing.T, boot bool, nodes int) {
	t.Helper()
	n.st = openStore(t, n.dir, true)
	n.rafts, n.fsms, n.trans = make([]*raft.Raft, groups), make([]*listFSM, groups), make([]*raft.InmemTransport, groups)
	for g := range groups {
		rs := NewRaftStore(n.st.Log(uint64(g + 1)))
		snaps, err := raft.NewFileSnapshotStore(n.snapDB[g], 2, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		_, tr := raft.NewInmemTransport(addr(n.id, g))
		n.trans[g], n.fsms[g] = tr, &listFSM{}
		conf := raftConfig(n.id)
		if boot {
			var servers []raft.Server
			for i := range nodes {
				servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i)), Address: addr(i, g)})
			}
			if err := raft.BootstrapCluster(conf, rs, rs, snaps, tr, raft.Configuration{Servers: servers}); err != nil {
				t.Fatal(err)
			}
		}
		r, err := raft.NewRaft(conf, n.fsms[g], rs, rs, snaps, tr)
		if err != nil {
			t.Fatal(err)
		}
		n.rafts[g] = r
	}
}

func (n *node) stop(t *testing.T) {
	t.Helper()
	for _, r := range n.rafts {
		if err := r.Shutdown().Error(); err != nil {
			t.Error(err)
		}
	}
	for _, tr := range n.trans {
		tr.DisconnectAll()
	}
	if err := n.st.Close(); err != nil {
		t.Error(err)
	}
	n.rafts = nil
}

func connectAll(nodes []*node) {
	for g := range groups {
		for _, a := range nodes {
			for _, b := range nodes {
				if a != b && a.rafts != nil && b.rafts != nil {
					a.trans[g].Connect(addr(b.id, g), b.trans[g])
				}
			}
		}
	}
}

// waitFor polls cond until it holds, failing the test after a generous
// while (a hang, not a speed check).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 60*time.Second {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// leader returns the node leading group g among the running nodes.
func leader(t *testing.T, nodes []*node, g int) *node {
	t.Helper()
	var l *node
	waitFor(t, fmt.Sprintf("a leader of group %d", g), func() bool {
		for _, n := range nodes {
			if n.rafts != nil && n.rafts[g].State() == raft.Leader {
				l = n
				return true
			}
		}
		return false
	})
	return l
}

// apply applies cmd to group g through its leader, trying again on a
// leadership change (so a command may be applied twice: every node applies
// the same log all the same).
func apply(t *testing.T, nodes []*node, g int, cmd string) {
	t.Helper()
	for range 50 {
		l := leader(t, nodes, g)
		err := l.rafts[g].Apply([]byte(cmd), 10*time.Second).Error()
		if err == nil {
			return
		}
		if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrEnqueueTimeout) {
			t.Fatalf("apply %q: %v", cmd, err)
		}
	}
	t.Fatalf("apply %q: no stable leader", cmd)
}

// TestRaftGroupsOnStore runs two 3-node Raft groups, each node keeping the
// logs of both groups in its one store (real syncs), through a snapshot with
// log compaction, a leader shutdown and restart from its store, and checks that
// every node ends with the same commands, all of them.
func TestRaftGroupsOnStore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Raft groups")
	}
	const size = 3
	nodes := make([]*node, size)
	for i := range nodes {
		nodes[i] = &node{id: i, dir: t.TempDir(), snapDB: []string{t.TempDir(), t.TempDir()}}
		nodes[i].start(t, true, size)
	}
	connectAll(nodes)
	defer func() {
		for _, n := range nodes {
			if n.rafts != nil {
				n.stop(t)
			}
		}
	}()
	var want [groups][]string
	for i := range 60 {
		for g := range groups {
			cmd := fmt.Sprintf("g%d-%d", g, i)
			apply(t, nodes, g, cmd)
			want[g] = append(want[g], cmd)
		}
	}
	// A snapshot on every node compacts its logs (DeleteRange of a prefix).
	for _, n := range nodes {
		for g := range groups {
			waitFor(t, "the node to apply everything", func() bool { return len(n.fsms[g].list()) >= len(want[g]) })
			if err := n.rafts[g].Snapshot().Error(); err != nil {
				t.Fatalf("snapshot n%d g%d: %v", n.id, g, err)
			}
			first, _, err := n.st.Log(uint64(g + 1)).Bounds()
			if err != nil || first <= 1 {
				t.Fatalf("n%d g%d log starts at %d after a snapshot (%v), want compacted", n.id, g, first, err)
			}
		}
	}
	// The leader of group 0 goes down; the others elect a new one and go on.
	old := leader(t, nodes, 0)
	old.stop(t)
	for i := 60; i < 90; i++ {
		for g := range groups {
			cmd := fmt.Sprintf("g%d-%d", g, i)
			apply(t, nodes, g, cmd)
			want[g] = append(want[g], cmd)
		}
	}
	// It comes back from its store and catches up.
	old.start(t, false, size)
	connectAll(nodes)
	for g := range groups {
		cmd := fmt.Sprintf("g%d-last", g)
		apply(t, nodes, g, cmd)
		want[g] = append(want[g], cmd)
	}
	for g := range groups {
		ref := nodes[0].fsms[g]
		waitFor(t, fmt.Sprintf("group %d to agree", g), func() bool {
			l := ref.list()
			if len(l) == 0 || l[len(l)-1] != fmt.Sprintf("g%d-last", g) {
				return false
			}
			for _, n := range nodes[1:] {
				if !slices.Equal(n.fsms[g].list(), l) {
					return false
				}
			}
			return true
		})
		got := ref.list()
		for _, cmd := range want[g] {
			if !slices.Contains(got, cmd) {
				t.Fatalf("group %d lost command %q", g, cmd)
			}
		}
	}
}

// BenchmarkRaftLogStore runs Raft's own LogStore and StableStore benchmarks
// (github.com/hashicorp/raft/bench) on the adapters (the store's log, and a
// data group's segment log), with real syncs.
func BenchmarkRaftLogStore(b *testing.B) {
	for name, fn := range map[string]func(*testing.B, raft.LogStore){
		"FirstIndex": raftbench.FirstIndex, "LastIndex": raftbench.LastIndex, "GetLog": raftbench.GetLog,
		"StoreLog": raftbench.StoreLog, "StoreLogs": raftbench.StoreLogs, "DeleteRange": raftbench.DeleteRange,
	} {
		b.Run(name, func(b *testing.B) {
			st := openStore(b, b.TempDir(), true)
			defer st.Close()
			fn(b, NewRaftStore(st.Log(1)))
		})
	}
	// (StoreLog and DeleteRange store index 0, which no Raft log has and
	// a segment log refuses.)
	for name, fn := range map[string]func(*testing.B, raft.LogStore){
		"FirstIndex": raftbench.FirstIndex, "LastIndex": raftbench.LastIndex, "GetLog": raftbench.GetLog,
		"StoreLogs": raftbench.StoreLogs,
	} {
		b.Run("segments/"+name, func(b *testing.B) {
			sl, err := store.OpenSegmentLog(b.TempDir(), store.SegmentLogOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer sl.Close()
			fn(b, SegmentStore{sl})
		})
	}
	for name, fn := range map[string]func(*testing.B, raft.StableStore){
		"Set": raftbench.Set, "Get": raftbench.Get, "SetUint64": raftbench.SetUint64, "GetUint64": raftbench.GetUint64,
	} {
		b.Run(name, func(b *testing.B) {
			st := openStore(b, b.TempDir(), true)
			defer st.Close()
			fn(b, NewRaftStore(st.Log(1)))
		})
	}
}
