package cluster_test

import (
	"fmt"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// dlxCounts reads a queue's ready messages and its dead letters awaiting
// their targets' confirms (messages_dlx) from n's management API; dlx is
// nil when the API does not report them.
func dlxCounts(n *wnode, queue string) (ready int, dlx *int, err error) {
	var q struct {
		Ready int  `json:"messages_ready"`
		DLX   *int `json:"messages_dlx"`
	}
	_, err = n.api("GET", "/api/queues/%2F/"+queue, nil, &q)
	return q.Ready, q.DLX, err
}

// TestClusterQuorumDeadLetterAtLeastOnce: a quorum queue with
// x-dead-letter-strategy at-least-once (and x-overflow reject-publish)
// keeps its dead letters while they cannot be delivered — no route at
// first, then a target queue on a node that is down — across a SIGKILL of
// its group's leader, and every one of them, expired or rejected, reaches
// the target once it is back (at least once). The same queue with
// x-overflow drop-head falls back to at most once: its dead letters with
// no route are gone.
func TestClusterQuorumDeadLetterAtLeastOnce(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "1", "--queue-memory-messages", "10")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	byName := map[string]*wnode{}
	for _, n := range nodes {
		byName[n.name] = n
	}
	dl := amqp091.Table{"x-dead-letter-exchange": "dlx.alo", "x-dead-letter-routing-key": "alo",
		"x-dead-letter-strategy": "at-least-once"}
	with := func(extra amqp091.Table) amqp091.Table {
		a := amqp091.Table{}
		for k, v := range dl {
			a[k] = v
		}
		for k, v := range extra {
			a[k] = v
		}
		return a
	}
	_, ch1 := dial(t, nodes[0])
	if err := ch1.ExchangeDeclare("dlx.alo", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	declareQuorum(t, nodes[0], "alo.ttl", with(amqp091.Table{"x-overflow": "reject-publish", "x-message-ttl": int32(300)}))
	declareQuorum(t, nodes[1], "alo.rej", with(amqp091.Table{"x-overflow": "reject-publish"}))
	declareQuorum(t, nodes[2], "amo.ttl", with(amqp091.Table{"x-overflow": "drop-head", "x-message-ttl": int32(300)}))
	waitSameDefinitions(t, nodes...)
	leaderName := ""
	waitFor(t, "the group's leader", func() bool { leaderName = queueLeader(nodes, nil, "alo.ttl"); return leaderName != "" })
	leader := byName[leaderName]
	var others []*wnode
	for _, n := range nodes {
		if n != leader {
			others = append(others, n)
		}
	}
	// The dead letters' target: a classic queue on the leader's node,
	// not bound yet.
	_, chL := dial(t, leader)
	if _, err := chL.QueueDeclare("alo.dlq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	waitSameDefinitions(t, nodes...)

	const nTTL, nRej = 60, 5
	_, chP := dial(t, others[0])
	if acked := linkPublish(t, chP, "ttl", "", "alo.ttl", nTTL, false); len(acked) != nTTL {
		t.Fatalf("alo.ttl: %d of %d confirmed", len(acked), nTTL)
	}
	if acked := linkPublish(t, chP, "amo", "", "amo.ttl", nTTL, false); len(acked) != nTTL {
		t.Fatalf("amo.ttl: %d of %d confirmed", len(acked), nTTL)
	}
	if acked := linkPublish(t, chP, "rej", "", "alo.rej", nRej, false); len(acked) != nRej {
		t.Fatalf("alo.rej: %d of %d confirmed", len(acked), nRej)
	}
	_, chG := dial(t, others[1])
	for i := range nRej {
		var m amqp091.Delivery
		waitFor(t, fmt.Sprint("message ", i, " of alo.rej"), func() bool {
			var ok bool
			var err error
			if m, ok, err = chG.Get("alo.rej", false); err != nil {
				t.Fatal(err)
			}
			return ok
		})
		if err := m.Reject(false); err != nil {
			t.Fatal(err)
		}
	}
	// No route: the dead letters wait in their queues; amo.ttl's are gone.
	for q, want := range map[string]int{"alo.ttl": nTTL, "alo.rej": nRej, "amo.ttl": 0} {
		waitFor(t, fmt.Sprintf("%s holds %d dead letters", q, want), func() bool {
			ready, dlx, err := dlxCounts(others[0], q)
			return err == nil && ready == 0 && dlx != nil && *dlx == want
		})
	}

	// The group's leader dies; the target (on its node) with it.
	leader.kill()
	t.Logf("killed %s, the group's leader", leaderName)
	waitFor(t, "a new leader", func() bool {
		l := queueLeader(others, nil, "alo.ttl")
		return l != "" && l != leaderName
	})
	// Bound now, to a queue whose node is down and to a quorum queue:
	// still kept until both have them.
	declareQuorum(t, others[0], "alo.qdlq", nil)
	_, chB := dial(t, others[0])
	for _, q := range []string{"alo.dlq", "alo.qdlq"} {
		if err := chB.QueueBind(q, "alo", "dlx.alo", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	for q, want := range map[string]int{"alo.ttl": nTTL, "alo.rej": nRej} {
		_, dlx, err := dlxCounts(others[1], q)
		if err != nil || dlx == nil || *dlx != want {
			t.Fatalf("%s after the leader's death: %v dead letters kept (%v), want %d", q, dlx, err, want)
		}
	}

	leader.start()
	waitForMembers(t, 3, nodes...)
	for _, q := range []string{"alo.ttl", "alo.rej"} {
		waitFor(t, q+" has no dead letter left", func() bool {
			_, dlx, err := dlxCounts(others[0], q)
			return err == nil && dlx != nil && *dlx == 0
		})
	}
	for _, target := range []string{"alo.dlq", "alo.qdlq"} {
		_, chC := dial(t, leader)
		seen := map[string]int{}
		var reasons = map[string]string{}
		waitFor(t, "every dead letter in "+target, func() bool {
			for {
				m, ok, err := chC.Get(target, true)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				body := string(m.Body)
				seen[body]++
				reasons[body], _ = m.Headers["x-first-death-reason"].(string)
			}
			return len(seen) >= nTTL+nRej
		})
		dups := 0
		for i := range nTTL {
			b := fmt.Sprintf("ttl-%d", i)
			if seen[b] == 0 || reasons[b] != "expired" {
				t.Fatalf("%s: %s seen %d times, reason %q", target, b, seen[b], reasons[b])
			}
			dups += seen[b] - 1
		}
		for i := range nRej {
			b := fmt.Sprintf("rej-%d", i)
			if seen[b] == 0 || reasons[b] != "rejected" {
				t.Fatalf("%s: %s seen %d times, reason %q", target, b, seen[b], reasons[b])
			}
			dups += seen[b] - 1
		}
		for b := range seen {
			if strings.HasPrefix(b, "amo-") {
				t.Fatalf("%s: %s, dead-lettered at most once with no route, arrived", target, b)
			}
		}
		t.Logf("%s: %d dead letters, %d duplicates", target, nTTL+nRej, dups)
	}
}
