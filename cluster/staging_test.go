package cluster

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/warrenmq/warren/store"
)

// gatedStore is a data group's log store whose writes can be held (each
// StoreLogs waits while the gate is shut) or made to fail.
type gatedStore struct {
	SegmentStore
	mu      sync.Mutex
	open    *sync.Cond
	shut    bool
	fail    error
	waiting bool
}

func newGatedStore(t *testing.T) *gatedStore {
	sl, err := store.OpenSegmentLog(t.TempDir(), store.SegmentLogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sl.Close() })
	g := &gatedStore{SegmentStore: SegmentStore{sl}}
	g.open = sync.NewCond(&g.mu)
	return g
}

func (g *gatedStore) StoreLog(l *raft.Log) error { return g.StoreLogs([]*raft.Log{l}) }

func (g *gatedStore) StoreLogs(logs []*raft.Log) error {
	g.mu.Lock()
	for g.shut {
		g.waiting = true
		g.open.Wait()
	}
	g.waiting = false
	err := g.fail
	g.mu.Unlock()
	if err != nil {
		if len(logs) > 0 {
			g.SegmentStore.l.DropStaged(logs[0].Index) // as a failed append does
		}
		return err
	}
	return g.SegmentStore.StoreLogs(logs)
}

func (g *gatedStore) set(shut bool, fail error) {
	g.mu.Lock()
	g.shut, g.fail = shut, fail
	g.mu.Unlock()
	g.open.Broadcast()
}

func (g *gatedStore) held() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

func (g *gatedStore) last() uint64 {
	_, last := g.SegmentStore.l.Bounds()
	return last
}

// TestStagedLeaderWrite checks the change of Warren's copy of
// hashicorp/raft (raft.StagingLogStore): a leader sends new entries to its
// followers while it writes them itself, so the followers hold an entry
// durably while the leader's write of it is still held; the command is
// answered only after the leader's write; a leader whose write fails
// steps down, and the entry, held by the two followers, stays committed:
// every node ends with the same commands.
func TestStagedLeaderWrite(t *testing.T) {
	const n = 3
	stores := make([]*gatedStore, n)
	rafts := make([]*raft.Raft, n)
	fsms := make([]*listFSM, n)
	trans := make([]*raft.InmemTransport, n)
	var servers []raft.Server
	for i := range n {
		servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i)), Address: addr(i, 0)})
	}
	for i := range n {
		stores[i], fsms[i] = newGatedStore(t), &listFSM{}
		_, trans[i] = raft.NewInmemTransport(addr(i, 0))
		stable := raft.NewInmemStore()
		snaps := raft.NewInmemSnapshotStore()
		conf := raftConfig(i)
		if err := raft.BootstrapCluster(conf, stores[i], stable, snaps, trans[i], raft.Configuration{Servers: servers}); err != nil {
			t.Fatal(err)
		}
		r, err := raft.NewRaft(conf, fsms[i], stores[i], stable, snaps, trans[i])
		if err != nil {
			t.Fatal(err)
		}
		rafts[i] = r
	}
	for _, a := range trans {
		for _, b := range trans {
			if a != b {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	defer func() {
		for i, r := range rafts {
			stores[i].set(false, nil)
			_ = r.Shutdown().Error()
		}
	}()
	leader := func() int {
		for i, r := range rafts {
			if r.State() == raft.Leader {
				return i
			}
		}
		return -1
	}
	waitFor(t, "a leader", func() bool { return leader() >= 0 })
	apply := func(cmd string) error {
		for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(20 * time.Millisecond) {
			l := leader()
			if l < 0 {
				continue
			}
			err := rafts[l].Apply([]byte(cmd), 5*time.Second).Error()
			if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) {
				return err
			}
		}
		return errors.New("no leader took " + cmd)
	}
	for i := range 5 {
		if err := apply(fmt.Sprintf("c%d", i)); err != nil {
			t.Fatal(err)
		}
	}

	// The leader's write held: the followers write the entry meanwhile.
	l := leader()
	stores[l].set(true, nil)
	idx := rafts[l].LastIndex() + 1
	done := make(chan error, 1)
	go func() { done <- rafts[l].Apply([]byte("held"), 30*time.Second).Error() }()
	waitFor(t, "the leader's write to be held", stores[l].held)
	for i := range n {
		if i != l {
			waitFor(t, fmt.Sprintf("follower n%d to write entry %d", i, idx), func() bool { return stores[i].last() >= idx })
		}
	}
	if got := stores[l].last(); got >= idx {
		t.Fatalf("the leader's log holds entry %d (last %d) while its write is held", idx, got)
	}
	select {
	case err := <-done:
		t.Fatalf("the command was answered (%v) before the leader wrote it", err)
	case <-time.After(100 * time.Millisecond):
	}
	stores[l].set(false, nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// The leader's write fails: it steps down; the followers hold the
	// entry and a new leader commits it.
	l = leader()
	if l < 0 {
		waitFor(t, "a leader", func() bool { return leader() >= 0 })
		l = leader()
	}
	idx = rafts[l].LastIndex() + 1
	stores[l].set(true, errors.New("disk gone"))
	go func() { done <- rafts[l].Apply([]byte("failed write"), 30*time.Second).Error() }()
	waitFor(t, "the leader's write to be held", stores[l].held)
	for i := range n {
		if i != l {
			waitFor(t, fmt.Sprintf("follower n%d to write entry %d", i, idx), func() bool { return stores[i].last() >= idx })
		}
	}
	stores[l].set(false, errors.New("disk gone"))
	if err := <-done; err == nil {
		t.Fatal("a command whose leader write failed was answered without error")
	}
	waitFor(t, "the leader to step down", func() bool { return rafts[l].State() != raft.Leader })
	stores[l].set(false, nil)
	if err := apply("after"); err != nil {
		t.Fatal(err)
	}
	want := []string{"c0", "c1", "c2", "c3", "c4", "held", "failed write", "after"}
	for i := range n {
		waitFor(t, fmt.Sprintf("n%d to apply every command", i), func() bool {
			return len(fsms[i].list()) >= len(want)
		})
		if got := fsms[i].list(); !slices.Equal(got, want) {
			t.Errorf("n%d applied %q, want %q", i, got, want)
		}
	}
}
