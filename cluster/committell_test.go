package cluster

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// dataGroupsOn makes a DataGroups on each member, each with machines of
// its own (machines[i][g]).
func dataGroupsOn(t *testing.T, ms []*member) ([]*DataGroups, []map[uint64]*listMachine) {
	t.Helper()
	dgs := make([]*DataGroups, len(ms))
	machines := make([]map[uint64]*listMachine, len(ms))
	for i, m := range ms {
		mm := map[uint64]*listMachine{}
		machines[i] = mm
		d, err := NewDataGroups(DataGroupsConfig{Node: m.node, Store: m.st, LogBase: 100, Dir: t.TempDir(),
			Machine: func(g uint64) StateMachine {
				mm[g] = &listMachine{}
				return mm[g]
			},
			HeartbeatTimeout: 200 * time.Millisecond, ProposeTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		dgs[i] = d
		t.Cleanup(func() { _ = d.Close() })
	}
	return dgs, machines
}

func threeMembers(t *testing.T, cluster string) ([]*member, []GroupSpec) {
	t.Helper()
	secret := writeSecret(t, cluster+"-secret-0123456789")
	ms := make([]*member, 3)
	for i := range ms {
		ms[i] = startMember(t, i+1, cluster, secret)
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
	return ms, PlanGroups(nodes, 1, 3)
}

// TestCommitToldWithoutNotice: commands proposed through a follower are
// applied on it (Propose returns) without a commit notice entry for each:
// the leader tells the followers the commit index with an AppendEntries of
// no entry (committell.go), so the log holds the commands and (at most)
// a few notices of the teller's fallback.
func TestCommitToldWithoutNotice(t *testing.T) {
	ms, specs := threeMembers(t, "tell")
	dgs, machines := dataGroupsOn(t, ms)
	for _, d := range dgs {
		if _, err := d.Ensure(specs); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "node 0 leads", func() bool { return dgs[0].Group(1).IsLeader() })
	const n = 40
	var want []string
	for k := range n {
		cmd := fmt.Sprintf("c%d", k)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := dgs[1].Group(1).Propose(ctx, []byte(cmd))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, cmd)
		// Read your writes: applied on the proposer when Propose returns.
		if got := machines[1][1].list(); !slices.Equal(got, want) {
			t.Fatalf("after %d proposals node 1 applied %v", k+1, got)
		}
	}
	rs := dgs[1].Group(1).logs
	first, err := rs.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := rs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	notices := 0
	for i := first; i <= last; i++ {
		var e raft.Log
		if err := rs.GetLog(i, &e); err != nil {
			t.Fatal(err)
		}
		if e.Type == raft.LogCommand && bytes.Equal(e.Data, commitNotice) {
			notices++
		}
	}
	if notices > n/4 {
		t.Fatalf("%d commit notices in the log for %d forwarded commands", notices, n)
	}
}

// TestDataGroupWake: Wake returns a group's log at once and starts it on a
// goroutine of its own; a proposal made on it waits for the start and for
// the other members, which start later, and is then applied everywhere.
// A node that is not a member gets nil.
func TestDataGroupWake(t *testing.T) {
	ms, specs := threeMembers(t, "wake")
	dgs, machines := dataGroupsOn(t, ms)
	l := dgs[0].Wake(specs[0])
	if l == nil || dgs[0].Wake(specs[0]) != l {
		t.Fatal("Wake did not return the one log of the group")
	}
	if got := dgs[1].Running(); len(got) != 0 {
		t.Fatalf("node 1 runs %v before it was asked to", got)
	}
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := l.Propose(ctx, []byte("first"))
		res <- err
	}()
	for _, d := range dgs[1:] {
		if _, err := d.Ensure(specs); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	for i := range dgs {
		waitFor(t, fmt.Sprintf("node %d applied the proposal", i), func() bool {
			m := machines[i][1]
			return m != nil && slices.Equal(m.list(), []string{"first"})
		})
	}
	other := startMember(t, 9, "wake", writeSecret(t, "wake-secret-0123456789"))
	t.Cleanup(func() { other.stop(t) })
	od, _ := dataGroupsOn(t, []*member{other})
	if od[0].Wake(specs[0]) != nil {
		t.Fatal("a node that is not a member woke the group")
	}
}
