package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// metaLogOn starts the metadata group's log on m: founding the group, or
// joining it through seed.
func metaLogOn(t *testing.T, m *member, seed string) (*RaftLog, *listMachine) {
	t.Helper()
	mach := &listMachine{}
	l, err := NewRaftLog(RaftLogConfig{Node: m.node, Group: MetadataGroup, Store: m.st, LogID: 1,
		SnapshotDir: t.TempDir(), Machine: mach, ProposeTimeout: 10 * time.Second,
		HeartbeatTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if err := l.Start(seed == ""); err != nil {
		t.Fatal(err)
	}
	if seed == "" {
		waitFor(t, "the founder's first snapshot", l.seeded.Load)
		return l, mach
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.Join(ctx, []string{seed}); err != nil {
		t.Fatal(err)
	}
	return l, mach
}

func voters(l *RaftLog) int {
	n := 0
	for _, s := range l.raft.GetConfiguration().Configuration().Servers {
		if s.Suffrage == raft.Voter {
			n++
		}
	}
	return n
}

func (l *RaftLog) durableIndex() uint64 {
	l.durableMu.Lock()
	defer l.durableMu.Unlock()
	return l.durable.index
}

// TestFollowerKnowsCommitFromItsWrite: in a metadata group of three voters,
// a follower that forwards commands notes them committed from its own log
// writes (durablecommit.go) and every node applies the same commands in the
// same order; once a fourth voter joins, two copies are no majority, and
// the follower notes nothing more (it waits for the leader's answer).
func TestFollowerKnowsCommitFromItsWrite(t *testing.T) {
	secret := writeSecret(t, "durable-secret-0123456789")
	ms := make([]*member, 4)
	for i := range ms {
		ms[i] = startMember(t, i+1, "durable", secret)
	}
	t.Cleanup(func() {
		for _, m := range ms {
			m.stop(t)
		}
	})
	logs := make([]*RaftLog, 4)
	machs := make([]*listMachine, 4)
	logs[0], machs[0] = metaLogOn(t, ms[0], "")
	for i := 1; i < 3; i++ {
		logs[i], machs[i] = metaLogOn(t, ms[i], ms[0].node.Addr())
	}
	waitFor(t, "three voters on node 2", func() bool { return voters(logs[1]) == 3 })
	waitFor(t, "node 1 leads", func() bool { return logs[0].raft.State() == raft.Leader })

	var want []string
	propose := func(n int) {
		t.Helper()
		for range n {
			cmd := fmt.Sprintf("c%d", len(want))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			a, err := logs[1].Propose(ctx, []byte(cmd))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, cmd)
			if got := a.Result; got == nil {
				t.Fatalf("%s: no result", cmd)
			}
			if got := machs[1].list(); !slices.Equal(got, want) {
				t.Fatalf("after Propose(%s) node 2 applied %v, want %v", cmd, got, want)
			}
		}
	}
	propose(30)
	if logs[1].durableIndex() == 0 {
		t.Fatal("the forwarding follower never knew a commit from its own log write")
	}
	for i := range 3 {
		waitFor(t, fmt.Sprintf("node %d applies all", i+1), func() bool { return slices.Equal(machs[i].list(), want) })
	}

	logs[3], machs[3] = metaLogOn(t, ms[3], ms[0].node.Addr())
	waitFor(t, "four voters on node 2", func() bool { return voters(logs[1]) == 4 })
	before := logs[1].durableIndex()
	propose(20)
	if got := logs[1].durableIndex(); got != before {
		t.Fatalf("with four voters the follower noted entry %d committed from its own write (was %d)", got, before)
	}
	for i := range 4 {
		waitFor(t, fmt.Sprintf("node %d applies all", i+1), func() bool { return slices.Equal(machs[i].list(), want) })
	}
}
