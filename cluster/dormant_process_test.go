package cluster_test

import (
	"fmt"
	"regexp"
	"testing"
)

// startedGroups returns the ids of the data groups a node's log says it
// started.
func startedGroups(n *wnode) []string {
	var ids []string
	for _, m := range startedRE.FindAllStringSubmatch(n.logs.String(), -1) {
		ids = append(ids, m[1])
	}
	return ids
}

var startedRE = regexp.MustCompile(`"msg":"data group started"[^\n]*?"group":(\d+)`)

// TestClusterDataGroupsDormant: planned data groups that hold no queue do
// not run (no Raft group, no heartbeats); the group a quorum queue is
// placed in starts on its members, and serves the queue.
func TestClusterDataGroupsDormant(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	declareQuorum(t, nodes[0], "dq", nil)
	waitFor(t, "the queue's group started on every member", func() bool {
		for _, n := range nodes {
			if len(startedGroups(n)) == 0 {
				return false
			}
		}
		return true
	})
	// A round trip through the queue's group, from every node.
	for _, n := range nodes {
		_, ch := dial(t, n)
		if acked, err := linkPublishErr(t, ch, "p-"+n.name, "", "dq", 1, false); err != nil || len(acked) != 1 {
			t.Fatalf("publish through %s: %v confirmed, %v", n.name, acked, err)
		}
	}
	got := consumeUntil(t, nodes[1], "dq", 3, func(r []linkRecord) bool { return len(r) == 3 })
	if len(got) != 3 {
		t.Fatalf("consumed %d of 3", len(got))
	}
	group := startedGroups(nodes[0])[0]
	for _, n := range nodes {
		if ids := startedGroups(n); len(ids) != 1 || ids[0] != group {
			t.Fatalf("%s started data groups %v; want only the queue's group %s (the others hold no queue)", n.name, ids, group)
		}
	}
}

// TestClusterGroupWakesLedByPreferred: a quorum queue declared through a
// node (leader locator client-local, the default) goes to a dormant group
// that node is the preferred member of, and the group's first leader, as
// it wakes, is that node: its publishes are proposed there and not
// forwarded to whichever member's election timer ran out first. Each node
// declares one; the leader is read as soon as one is known, before the
// rebalancing (which waits for a quiet group) could move it.
func TestClusterGroupWakesLedByPreferred(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	for i, n := range nodes {
		q := fmt.Sprintf("pref-%d", i)
		declareQuorum(t, n, q, nil)
		leader := ""
		waitFor(t, "a leader for "+q, func() bool {
			leader = queueLeader(nodes, nil, q)
			return leader != ""
		})
		if leader != n.name {
			t.Errorf("%s, declared through %s, woke led by %s", q, n.name, leader)
		}
	}
}
