package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// groupSnapshotAbove reports whether one of n's data groups has a
// snapshot on disk taken at an index above min.
func groupSnapshotAbove(n *wnode, min uint64) bool {
	groups, err := os.ReadDir(filepath.Join(n.dir, "raft", "groups"))
	if err != nil {
		return false
	}
	for _, g := range groups {
		snaps, err := os.ReadDir(filepath.Join(n.dir, "raft", "groups", g.Name(), "snapshots"))
		if err != nil {
			continue
		}
		for _, s := range snaps {
			var term, index uint64
			if _, err := fmt.Sscanf(s.Name(), "%d-%d-", &term, &index); err == nil && index > min {
				return true
			}
		}
	}
	return false
}

// streamReplicas is a stream's replicas as n's /api/queues reports them.
type streamReplica struct {
	Node      string `json:"node"`
	Online    bool   `json:"online"`
	Committed int64  `json:"committed_offset"`
	Stored    int64  `json:"stored_offset"`
	Lag       int64  `json:"lag"`
}

func streamReplicas(n *wnode, queue string) ([]streamReplica, error) {
	var q struct {
		Stream *struct {
			Replicas []streamReplica `json:"replicas"`
		} `json:"stream"`
	}
	if _, err := n.api("GET", "/api/queues/%2F/"+queue, nil, &q); err != nil {
		return nil, err
	}
	if q.Stream == nil {
		return nil, fmt.Errorf("no stream record from %s", n.name)
	}
	return q.Stream.Replicas, nil
}

// TestClusterStreamSnapshotCatchUp: the API lists each member's replica
// with its offsets and lag (the stopped one not answering); a replica that was down while the
// group's log moved past its snapshot threshold is sent a snapshot when it
// comes back; it fetches the chunks below the snapshot it never had from
// another member, so the whole stream is read through it, offsets and
// messages identical to the other replicas', and stays so when the other
// two nodes are gone.
func TestClusterStreamSnapshotCatchUp(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3",
		"--cluster-snapshot-threshold", "64", "--cluster-trailing-logs", "16")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	declareStream(t, nodes[0], "sc")
	waitSameDefinitions(t, nodes...)
	leader := ""
	waitFor(t, "the stream's group leader", func() bool {
		leader = queueLeader(nodes, nil, "sc")
		return leader != ""
	})
	var away, pubNode *wnode
	for _, n := range nodes {
		switch {
		case n.name == leader:
			pubNode = n
		case away == nil:
			away = n
		}
	}
	_, ch := dial(t, pubNode)
	linkPublish(t, ch, "before", "", "sc", 100, false)
	away.kill()
	// Many rounds, each at least one group entry: the log passes the
	// snapshot threshold a few times while away is down.
	const rounds, per = 60, 20
	for r := range rounds {
		if acked := linkPublish(t, ch, fmt.Sprint("r", r), "", "sc", per, false); len(acked) != per {
			t.Fatalf("round %d: %d of %d confirmed", r, len(acked), per)
		}
	}
	waitFor(t, "a group snapshot past the away node's log", func() bool { return groupSnapshotAbove(pubNode, 100) })
	total := 100 + rounds*per
	// The API shows each member's replica: the away one not answering,
	// the others at the end.
	reps, err := streamReplicas(pubNode, "sc")
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 3 {
		t.Fatalf("replicas %+v, want 3", reps)
	}
	for _, r := range reps {
		if r.Node == away.name && r.Online || r.Node != away.name && (!r.Online || r.Committed != int64(total) || r.Lag != 0) {
			t.Fatalf("replicas with %s down: %+v", away.name, reps)
		}
	}
	away.start()
	waitForMembers(t, 3, nodes...)
	waitFor(t, "the away node has its replica back", func() bool {
		var q struct {
			Stream *struct {
				Committed int64 `json:"committed_offset"`
				Stored    int64 `json:"stored_offset"`
			} `json:"stream"`
		}
		_, err := away.api("GET", "/api/queues/%2F/sc", nil, &q)
		return err == nil && q.Stream != nil && q.Stream.Committed == int64(total) && q.Stream.Stored == int64(total)
	})
	waitFor(t, "every replica at the end through every node", func() bool {
		for _, n := range nodes {
			reps, err := streamReplicas(n, "sc")
			if err != nil || len(reps) != 3 {
				return false
			}
			for _, r := range reps {
				if !r.Online || r.Committed != int64(total) || r.Stored != int64(total) || r.Lag != 0 {
					return false
				}
			}
		}
		return true
	})
	want := readStream(t, pubNode, "sc", "", "first", total)
	check := func(what string, got []sfRead) {
		t.Helper()
		for i := range got {
			if got[i].off != int64(i) || got[i].pub != want[i].pub || got[i].seq != want[i].seq {
				t.Fatalf("%s: position %d: offset %d %s/%d, want offset %d %s/%d", what, i,
					got[i].off, got[i].pub, got[i].seq, i, want[i].pub, want[i].seq)
			}
		}
	}
	check("through the away node", readStream(t, away, "sc", "", "first", total))
	t.Logf("%s fetched chunks from the group %d times", away.name, strings.Count(away.logs.String(), "fetching replicated stream chunks"))
	// Only the away node is left: its replica alone serves the stream.
	for _, n := range nodes {
		if n != away {
			n.kill()
		}
	}
	check("through the away node alone", readStream(t, away, "sc", "", "first", total))
}

// TestClusterStreamInitialClusterSize: x-initial-cluster-size 1 makes a
// stream of one replica on the declaring node (no data group; its only
// member, as RabbitMQ lists it), any other
// size (and none) a stream replicated on its group's three members; the
// same for quorum queues and x-quorum-initial-group-size.
func TestClusterStreamInitialClusterSize(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	_, ch := dial(t, nodes[1])
	for name, size := range map[string]any{"one": int32(1), "two": int32(2), "five": int64(5), "default": nil,
		"q-one": int32(1), "q-two": int8(2), "q-default": nil} {
		args := amqp091.Table{"x-queue-type": "stream"}
		key := "x-initial-cluster-size"
		if strings.HasPrefix(name, "q-") {
			args["x-queue-type"], key = "quorum", "x-quorum-initial-group-size"
		}
		if size != nil {
			args[key] = size
		}
		if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	waitSameDefinitions(t, nodes...)
	for _, name := range []string{"one", "two", "five", "default", "q-one", "q-two", "q-default"} {
		var q struct {
			Node    string   `json:"node"`
			Members []string `json:"members"`
		}
		if _, err := nodes[0].api("GET", "/api/queues/%2F/"+name, nil, &q); err != nil {
			t.Fatal(err)
		}
		single := strings.HasSuffix(name, "one")
		switch {
		case single && (len(q.Members) != 1 || q.Members[0] != nodes[1].name || q.Node != nodes[1].name):
			t.Errorf("%s: node %q, members %v; want on %s alone", name, q.Node, q.Members, nodes[1].name)
		case !single && len(q.Members) != 3:
			t.Errorf("%s: members %v, want 3", name, q.Members)
		}
	}
	// The one-replica quorum queue takes messages through any node.
	_, ch0 := dial(t, nodes[0])
	if acked := linkPublish(t, ch0, "p", "", "q-one", 10, false); len(acked) != 10 {
		t.Fatalf("q-one: %d of 10 confirmed", len(acked))
	}
	consumeUntil(t, nodes[2], "q-one", 10, func(rs []linkRecord) bool { return len(rs) == 10 })
	// The one-replica stream takes messages through its node.
	if acked := linkPublish(t, ch, "p", "", "one", 10, false); len(acked) != 10 {
		t.Fatalf("%d of 10 confirmed", len(acked))
	}
	readStream(t, nodes[1], "one", "", "first", 10)
}
