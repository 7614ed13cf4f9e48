package cluster

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"
)

// gateMachine is a listMachine whose Apply waits while its gate is
// closed (nil gate: open).
type gateMachine struct {
	listMachine
	mu   sync.Mutex
	gate chan struct{}
}

func (m *gateMachine) Apply(index uint64, cmd []byte) any {
	m.mu.Lock()
	g := m.gate
	m.mu.Unlock()
	if g != nil {
		<-g
	}
	return m.listMachine.Apply(index, cmd)
}

func (m *gateMachine) hold() {
	m.mu.Lock()
	m.gate = make(chan struct{})
	m.mu.Unlock()
}

func (m *gateMachine) open() {
	m.mu.Lock()
	if m.gate != nil {
		close(m.gate)
		m.gate = nil
	}
	m.mu.Unlock()
}

// startGroupOf3 runs data group 1 on three in-process nodes with
// machines made by mk and returns the groups once node 0 leads.
func startGroupOf3(tb testing.TB, mk func(i int) StateMachine) []*DataGroups {
	tb.Helper()
	secret := writeSecret(tb, "begin-secret-0123456789abcdef")
	ms := make([]*member, 3)
	for i := range ms {
		ms[i] = startMember(tb, i+1, "begin", secret)
	}
	tb.Cleanup(func() {
		for _, m := range ms {
			m.stop(tb)
		}
	})
	var nodes []GroupMember
	for _, m := range ms {
		nodes = append(nodes, GroupMember{Name: m.node.Name(), Addr: m.node.Addr()})
	}
	specs := PlanGroups(nodes, 1, 3)
	dgs := make([]*DataGroups, 3)
	for i, m := range ms {
		d, err := NewDataGroups(DataGroupsConfig{Node: m.node, Store: m.st, LogBase: 100, Dir: tb.TempDir(),
			Machine:          func(uint64) StateMachine { return mk(i) },
			HeartbeatTimeout: 500 * time.Millisecond, ProposeTimeout: 10 * time.Second})
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := d.Ensure(specs); err != nil {
			tb.Fatal(err)
		}
		dgs[i] = d
	}
	tb.Cleanup(func() {
		for _, d := range dgs {
			_ = d.Close()
		}
	})
	waitFor(tb, "group 1 led by its preferred member", func() bool { return dgs[0].Group(1).IsLeader() })
	return dgs
}

// gatedGroupOf3 runs data group 1 on three in-process nodes with gate
// machines, and returns them and the group on its leader (node 0) and on
// a follower.
func gatedGroupOf3(t *testing.T) (machines []*gateMachine, leader, follower *RaftLog) {
	machines = make([]*gateMachine, 3)
	for i := range machines {
		machines[i] = &gateMachine{}
	}
	dgs := startGroupOf3(t, func(i int) StateMachine { return machines[i] })
	return machines, dgs[0].Group(1), dgs[1].Group(1)
}

// TestRaftLogBegin: on the leader, Begin puts commands in flight without
// waiting for any to apply (the leader's state machine is held while 40
// are begun), and they apply in the order begun, on every member, each
// caller's wait getting its own result; on a follower Begin declines.
func TestRaftLogBegin(t *testing.T) {
	machines, leader, follower := gatedGroupOf3(t)
	if _, ok := follower.Begin([]byte("x")); ok {
		t.Fatal("a follower took Begin")
	}

	machines[0].hold()
	const n = 40
	waits := make([]func() (Applied, error), n)
	var want []string
	for i := range n {
		cmd := fmt.Sprintf("c%d", i)
		w, ok := leader.Begin([]byte(cmd))
		if !ok {
			t.Fatalf("the leader declined Begin %d", i)
		}
		waits[i], want = w, append(want, cmd)
	}
	// Every command was begun while none could apply on the leader.
	if got := machines[0].list(); len(got) != 0 {
		t.Fatalf("applied on the held leader: %v", got)
	}
	machines[0].open()
	for i, w := range waits {
		a, err := w()
		if err != nil {
			t.Fatalf("wait %d: %v", i, err)
		}
		// listMachine's result is the count of commands applied.
		if a.Result != i+1 {
			t.Fatalf("command %d got result %v: out of order", i, a.Result)
		}
	}
	for i, m := range machines {
		waitFor(t, fmt.Sprintf("member %d applied the commands in order", i), func() bool { return slices.Equal(m.list(), want) })
	}
	// Propose goes on after them, on any member.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := follower.Propose(ctx, []byte("last")); err != nil {
		t.Fatal(err)
	}
	want = append(want, "last")
	for i, m := range machines {
		waitFor(t, fmt.Sprintf("member %d applied the proposal after them", i), func() bool { return slices.Equal(m.list(), want) })
	}
	// A wait begun while the leader's machine is held returns once it
	// applies.
	machines[0].hold()
	w, ok := leader.Begin([]byte("late"))
	if !ok {
		t.Fatal("the leader declined Begin")
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		machines[0].open()
	}()
	if a, err := w(); err != nil || a.Result != len(want)+1 {
		t.Fatalf("wait: result %v, %v", a.Result, err)
	}
}

// BenchmarkDataGroupPropose: commands of 1 KiB proposed to a data group
// of three in-process nodes on one machine (real Raft, stores with fsync
// off, the cluster port over loopback), from its leader: one at a time
// (Propose), or up to 8 in flight (Begin).
func BenchmarkDataGroupPropose(b *testing.B) {
	for _, inflight := range []int{1, 8} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			dgs := startGroupOf3(b, func(int) StateMachine { return countMachine{} })
			l := dgs[0].Group(1)
			cmd := make([]byte, 1024)
			waits := make(chan func() (Applied, error), inflight)
			done := make(chan error, 1)
			go func() {
				for w := range waits {
					if _, err := w(); err != nil {
						done <- err
						for range waits {
						}
						return
					}
				}
				done <- nil
			}()
			b.ReportAllocs()
			b.SetBytes(int64(len(cmd)))
			b.ResetTimer()
			for range b.N {
				if inflight == 1 {
					if _, err := l.Propose(context.Background(), cmd); err != nil {
						b.Fatal(err)
					}
					continue
				}
				w, ok := l.Begin(cmd)
				if !ok {
					b.Fatal("not the leader")
				}
				waits <- w
			}
			close(waits)
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// countMachine applies commands by doing nothing with them.
type countMachine struct{}

func (countMachine) Apply(index uint64, cmd []byte) any { return nil }
func (countMachine) Snapshot() (StateSnapshot, error)   { return listState(""), nil }
func (countMachine) Restore(uint64, io.Reader) error    { return nil }

// TestRaftLogCatchUp: CatchUp on a follower whose state machine is held
// returns only once the follower has applied every command committed
// before the call, and the barrier it appends reaches no state machine.
func TestRaftLogCatchUp(t *testing.T) {
	machines := make([]*gateMachine, 3)
	for i := range machines {
		machines[i] = &gateMachine{}
	}
	dgs := startGroupOf3(t, func(i int) StateMachine { return machines[i] })
	leader, follower := dgs[0].Group(1), dgs[2].Group(1)
	machines[2].hold()
	const n = 10
	var want []string
	for i := range n {
		cmd := fmt.Sprintf("c%d", i)
		if _, err := leader.Propose(t.Context(), []byte(cmd)); err != nil {
			t.Fatal(err)
		}
		want = append(want, cmd)
	}
	done := make(chan error, 1)
	go func() { done <- follower.CatchUp(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("CatchUp returned (%v) while the follower could apply nothing", err)
	case <-time.After(300 * time.Millisecond):
	}
	machines[2].open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := machines[2].list(); !slices.Equal(got, want) {
		t.Fatalf("the follower applied %q when CatchUp returned, want %q", got, want)
	}
	if _, err := leader.Propose(t.Context(), []byte("after")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every member applies the next command", func() bool {
		for _, m := range machines {
			if got := m.list(); !slices.Equal(got, append(slices.Clone(want), "after")) {
				return false
			}
		}
		return true
	})
}

// TestRaftLogBeginCommitted: a data group's leader tells BeginCommitted's
// callbacks of their entries' commit as Raft counts it, in the order
// begun, once each, while its own state machine is held (so before the
// commands apply there); the waits then get the applied results as Begin's
// do.
func TestRaftLogBeginCommitted(t *testing.T) {
	machines, leader, follower := gatedGroupOf3(t)
	if _, ok := follower.BeginCommitted([]byte("x"), func() { t.Error("a follower's callback was called") }); ok {
		t.Fatal("a follower took BeginCommitted")
	}

	machines[0].hold()
	const n = 40
	var mu sync.Mutex
	var told []int
	waits := make([]func() (Applied, error), n)
	for i := range n {
		w, ok := leader.BeginCommitted(fmt.Appendf(nil, "c%d", i), func() {
			mu.Lock()
			told = append(told, i)
			mu.Unlock()
		})
		if !ok {
			t.Fatalf("the leader declined BeginCommitted %d", i)
		}
		waits[i] = w
	}
	waitFor(t, "every commit told while the leader's machine is held", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(told) == n
	})
	if got := machines[0].list(); len(got) != 0 {
		t.Fatalf("applied on the held leader: %v", got)
	}
	mu.Lock()
	for i, v := range told {
		if v != i {
			t.Fatalf("commits told in the order %v", told)
		}
	}
	mu.Unlock()
	machines[0].open()
	for i, w := range waits {
		if a, err := w(); err != nil || a.Result != i+1 {
			t.Fatalf("wait %d: result %v, %v", i, a.Result, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != n {
		t.Fatalf("%d callbacks for %d commands", len(told), n)
	}
}
