package cluster_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// groupSnapshots returns the snapshots of data group 1 in n's data dir.
func groupSnapshots(n *wnode) []string {
	s, _ := filepath.Glob(filepath.Join(n.dir, "raft", "groups", "g1", "snapshots", "*", "state.bin"))
	return s
}

// TestClusterQuorumDeepCatchUp: with a window of 50 bodies per queue and
// snapshots every 16 entries (4 kept behind), a member stopped while
// 3,000 messages are published to a quorum queue comes back after the
// leader took a snapshot and truncated its log, so it catches up by
// snapshot, with the bodies the others hold in their stores (its replica
// keeps 50 bodies in RAM, as the others do); another member restarted
// recovers the queue with its bodies in its store; then the
// leader dies, and a consumer on the member that caught up gets every
// message, in order, with its body.
func TestClusterQuorumDeepCatchUp(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "1", "--queue-memory-messages", "50",
		"--cluster-snapshot-threshold", "16", "--cluster-trailing-logs", "4")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	declareQuorum(t, nodes[0], "deep", nil)
	waitSameDefinitions(t, nodes...)
	n1, n3 := nodes[0], nodes[2]
	n3.kill()

	const rounds, per = 30, 100
	_, ch := dial(t, n1)
	for r := range rounds {
		acked := linkPublish(t, ch, fmt.Sprint("r", r), "", "deep", per, false)
		if len(acked) != per {
			t.Fatalf("round %d: %d of %d confirmed", r, len(acked), per)
		}
	}
	// The leader takes a snapshot (raft looks every 10-20 s) and
	// truncates its log behind it. Publishes are batched, many to an
	// entry, but each round waits for its confirms: at least one entry a
	// round, past the threshold.
	waitFor(t, "a snapshot of the data group on n1", func() bool { return len(groupSnapshots(n1)) > 0 })

	n3.start()
	var qi struct {
		Messages int `json:"messages"`
		PagedOut int `json:"messages_paged_out"`
	}
	waitFor(t, "n3 holds the 3,000 messages", func() bool {
		_, err := n3.api("GET", "/api/queues/%2F/deep", nil, &qi)
		return err == nil && qi.Messages == rounds*per
	})
	// Its replica keeps 50 bodies in RAM, the rest in its store.
	if qi.PagedOut != rounds*per-50 {
		t.Fatalf("n3 has %d messages paged out, want %d", qi.PagedOut, rounds*per-50)
	}
	if len(groupSnapshots(n3)) == 0 {
		t.Fatal("n3 caught up without a snapshot")
	}
	// A member killed and restarted recovers the queue from its snapshot
	// and log, its bodies in its store again, not in RAM.
	n2 := nodes[1]
	n2.kill()
	n2.start()
	var qi2 struct {
		Messages int `json:"messages"`
		PagedOut int `json:"messages_paged_out"`
	}
	waitFor(t, "n2 holds the 3,000 messages again", func() bool {
		_, err := n2.api("GET", "/api/queues/%2F/deep", nil, &qi2)
		return err == nil && qi2.Messages == rounds*per
	})
	if qi2.PagedOut != rounds*per-50 {
		t.Fatalf("restarted n2 has %d messages paged out, want %d", qi2.PagedOut, rounds*per-50)
	}
	n1.kill()

	_, c3 := dial(t, n3)
	if err := c3.Qos(100, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := c3.Consume("deep", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.After(90 * time.Second)
	for i := range rounds * per {
		select {
		case d, ok := <-ds:
			if !ok {
				t.Fatalf("the consumer on n3 ended after %d messages", i)
			}
			want := fmt.Sprintf("r%d-%d", i/per, i%per)
			if string(d.Body) != want {
				t.Fatalf("message %d is %q, want %q", i, d.Body, want)
			}
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatalf("the consumer on n3 got %d of %d messages in 90 s", i, rounds*per)
		}
	}
}
