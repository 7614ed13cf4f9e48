package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// listMachine is a StateMachine keeping the commands applied, in order.
type listMachine struct {
	mu   sync.Mutex
	cmds []string
}

func (m *listMachine) Apply(_ uint64, cmd []byte) any {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cmds = append(m.cmds, string(cmd))
	return len(m.cmds)
}

func (m *listMachine) Snapshot() (StateSnapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return listState(strings.Join(m.cmds, "\n")), nil
}

func (m *listMachine) Restore(_ uint64, r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cmds = nil
	if len(b) > 0 {
		m.cmds = strings.Split(string(b), "\n")
	}
	return nil
}

func (m *listMachine) list() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.cmds)
}

type listState string

func (s listState) WriteTo(w io.Writer) (int64, error) {
	n, err := io.WriteString(w, string(s))
	return int64(n), err
}
func (listState) Release() {}

func TestPlanGroups(t *testing.T) {
	nodes := []GroupMember{{"c", "c:1"}, {"a", "a:1"}, {"b", "b:1"}}
	specs := PlanGroups(nodes, 4, 3)
	var got []string
	first := map[string]int{}
	for _, s := range specs {
		var names []string
		for _, m := range s.Members {
			names = append(names, m.Name)
		}
		got = append(got, fmt.Sprintf("%d%v", s.ID, names))
		first[s.Members[0].Name]++
	}
	want := []string{"1[a b c]", "2[b c a]", "3[c a b]", "4[a b c]"}
	if !slices.Equal(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	if first["a"] != 2 || first["b"] != 1 || first["c"] != 1 {
		t.Fatalf("preferred leaders %v", first)
	}
	if s := PlanGroups(nodes[:2], 1, 3); len(s[0].Members) != 2 {
		t.Fatalf("a group of 3 on 2 nodes has %d members", len(s[0].Members))
	}
}

// TestDataGroups runs two data groups on three in-process nodes: every
// member founds them from the same plan, their leaders go to their
// preferred members, a proposal made on any member (forwarded over 'G'
// streams from followers) is applied on every member in the same order,
// and with the leader of a group stopped the others elect a new one and
// take proposals, with snapshots compacting the log.
func TestDataGroups(t *testing.T) {
	secret := writeSecret(t, "data-groups-secret-0123456789")
	ms := make([]*member, 3)
	for i := range ms {
		ms[i] = startMember(t, i+1, "dg", secret)
	}
	t.Cleanup(func() {
		for _, m := range ms {
			m.stop(t)
		}
	})
	var nodes []GroupMember
	for _, m := range ms {
		nodes = append(nodes, GroupMember{Name: m.node.Name(), Addr: m.node.Addr()})
	}
	specs := PlanGroups(nodes, 2, 3)
	dgs := make([]*DataGroups, 3)
	machines := make([]map[uint64]*listMachine, 3)
	for i, m := range ms {
		machines[i] = map[uint64]*listMachine{}
		mm := machines[i]
		d, err := NewDataGroups(DataGroupsConfig{Node: m.node, Store: m.st, LogBase: 100, Dir: t.TempDir(),
			Machine: func(g uint64) StateMachine {
				mm[g] = &listMachine{}
				return mm[g]
			},
			HeartbeatTimeout: 200 * time.Millisecond, ProposeTimeout: 10 * time.Second, SnapshotThreshold: 50, TrailingLogs: 10})
		if err != nil {
			t.Fatal(err)
		}
		started, err := d.Ensure(specs)
		if err != nil || len(started) != 2 {
			t.Fatalf("node %d started %v: %v", i, started, err)
		}
		if again, err := d.Ensure(specs); err != nil || len(again) != 0 {
			t.Fatalf("a second Ensure started %v: %v", again, err)
		}
		dgs[i] = d
	}
	t.Cleanup(func() {
		for _, d := range dgs {
			if d != nil {
				_ = d.Close()
			}
		}
	})
	leaderOf := func(g uint64) int {
		for i, d := range dgs {
			if d != nil && d.Group(g).IsLeader() {
				return i
			}
		}
		return -1
	}
	// The preferred leaders: group 1's first member is n1, group 2's n2.
	waitFor(t, "each group led by its preferred member", func() bool { return leaderOf(1) == 0 && leaderOf(2) == 1 })

	propose := func(i int, g uint64, cmd string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := dgs[i].Group(g).Propose(ctx, []byte(cmd)); err != nil {
			t.Fatalf("propose %q on node %d to group %d: %v", cmd, i, g, err)
		}
	}
	var want1, want2 []string
	for k := range 30 {
		for i := range dgs {
			c1, c2 := fmt.Sprintf("g1-%d-%d", i, k), fmt.Sprintf("g2-%d-%d", i, k)
			propose(i, 1, c1)
			propose(i, 2, c2)
			want1, want2 = append(want1, c1), append(want2, c2)
		}
	}
	same := func(live []int, g uint64, want []string) func() bool {
		return func() bool {
			for _, i := range live {
				if !slices.Equal(machines[i][g].list(), want) {
					return false
				}
			}
			return true
		}
	}
	waitFor(t, "group 1 applied in order on every member", same([]int{0, 1, 2}, 1, want1))
	waitFor(t, "group 2 applied in order on every member", same([]int{0, 1, 2}, 2, want2))

	// Stop group 1's leader (node 0): the other two elect a leader and go
	// on; group 2 is not disturbed.
	if err := dgs[0].Close(); err != nil {
		t.Fatal(err)
	}
	dgs[0] = nil
	waitFor(t, "a new leader of group 1", func() bool { return leaderOf(1) > 0 })
	for k := range 40 {
		c := fmt.Sprintf("after-%d", k)
		propose(1+k%2, 1, c)
		want1 = append(want1, c)
	}
	propose(2, 2, "g2-last")
	want2 = append(want2, "g2-last")
	waitFor(t, "group 1 applied on the survivors", same([]int{1, 2}, 1, want1))
	waitFor(t, "group 2 applied on the survivors", same([]int{1, 2}, 2, want2))
	// More than SnapshotThreshold entries: raft snapshots and compacts
	// the log (its first index moves past 1).
	for _, i := range []int{1, 2} {
		// (The leader may be handing its leadership to node 0, whose
		// cluster port is up: raft takes no snapshot meanwhile.)
		var err error
		waitFor(t, "a snapshot", func() bool {
			err = dgs[i].Group(1).Snapshot()
			return err == nil || strings.Contains(err.Error(), "nothing new")
		})
		var first uint64
		first, err = dgs[i].Group(1).logs.FirstIndex()
		if err != nil || first <= 1 {
			t.Fatalf("node %d: group 1's log starts at %d after a snapshot (%v)", i, first, err)
		}
	}
	if !bytes.Equal([]byte(strings.Join(machines[1][1].list(), ",")), []byte(strings.Join(want1, ","))) {
		t.Fatal("group 1 differs")
	}
}

// TestGroupSpecMembers: membership changes of a plan's group move a
// removed member to Leaving, count the changes in Epoch, take a re-added
// member out of Leaving, and refuse to remove the last member.
func TestGroupSpecMembers(t *testing.T) {
	s := GroupSpec{ID: 1, Members: []GroupMember{{"n1", "a1"}, {"n2", "a2"}, {"n3", "a3"}}}
	orig := s.Members
	if ok, err := s.RemoveMember("n3"); !ok || err != nil {
		t.Fatalf("remove n3: %v %v", ok, err)
	}
	if s.Has("n3") || len(s.Members) != 2 || len(s.Leaving) != 1 || s.Leaving[0].Name != "n3" || s.Epoch != 1 {
		t.Fatalf("after removing n3: %+v", s)
	}
	if len(orig) != 3 || orig[2].Name != "n3" {
		t.Fatalf("the plan's member list was changed in place: %+v", orig)
	}
	if ok, _ := s.RemoveMember("n3"); ok {
		t.Fatal("n3 removed twice")
	}
	if !s.AddMember(GroupMember{"n3", "a3"}) || !s.Has("n3") || len(s.Leaving) != 0 || s.Epoch != 2 {
		t.Fatalf("after adding n3 back: %+v", s)
	}
	if s.AddMember(GroupMember{"n3", "a3"}) {
		t.Fatal("n3 added twice")
	}
	one := GroupSpec{ID: 2, Members: []GroupMember{{"n1", "a1"}}}
	if ok, err := one.RemoveMember("n1"); ok || err == nil {
		t.Fatalf("the last member was removed: %v %v", ok, err)
	}
}
