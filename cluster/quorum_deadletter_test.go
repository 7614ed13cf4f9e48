package cluster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Dead-lettering, message TTL and x-expires of replicated quorum queues,
// on real warren processes: the group's leader decides (ticks carry its
// time) and its node republishes each dead letter once.

// TestClusterQuorumDeadLetter: quorum queues with a dead-letter exchange
// (by argument, and by policy) dead-letter messages that expire
// (x-message-ttl, with no consumer: the leader's ticks), are rejected,
// pass x-delivery-limit, or are dropped by x-max-length, each once, into
// another quorum queue with x-death recorded.
func TestClusterQuorumDeadLetter(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	if _, err := n1.api("PUT", "/api/policies/%2F/dl-pol", map[string]any{"pattern": `^dl\.pol$`, "apply-to": "queues",
		"definition": map[string]any{"dead-letter-exchange": "", "dead-letter-routing-key": "dlq"}}, nil); err != nil {
		t.Fatal(err)
	}
	dlx := amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
	with := func(extra amqp091.Table) amqp091.Table {
		a := amqp091.Table{}
		for k, v := range dlx {
			a[k] = v
		}
		for k, v := range extra {
			a[k] = v
		}
		return a
	}
	declareQuorum(t, n1, "dlq", nil)
	declareQuorum(t, n2, "dl.ttl", with(amqp091.Table{"x-message-ttl": int32(200)}))
	declareQuorum(t, n3, "dl.rej", dlx)
	declareQuorum(t, n1, "dl.lim", with(amqp091.Table{"x-delivery-limit": int32(1)}))
	declareQuorum(t, n2, "dl.max", with(amqp091.Table{"x-max-length": int32(1)}))
	declareQuorum(t, n3, "dl.pol", nil)
	// A classic target homed on n2, for a source whose group n1 leads:
	// the dead letter crosses the node link.
	declareQuorum(t, n1, "dl.cls", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlc"})
	_, ch2 := dial(t, n2)
	if _, err := ch2.QueueDeclare("dlc", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	waitSameDefinitions(t, nodes...)

	linkPublish(t, ch2, "ttl", "", "dl.ttl", 3, false)
	linkPublish(t, ch2, "cls", "", "dl.cls", 1, false)
	linkPublish(t, ch2, "rej", "", "dl.rej", 1, false)
	linkPublish(t, ch2, "lim", "", "dl.lim", 1, false)
	linkPublish(t, ch2, "max", "", "dl.max", 2, false)
	linkPublish(t, ch2, "pol", "", "dl.pol", 1, false)

	_, ch3 := dial(t, n3)
	get := func(q string) amqp091.Delivery {
		var m amqp091.Delivery
		waitFor(t, "a message from "+q, func() bool {
			var ok bool
			var err error
			m, ok, err = ch3.Get(q, false)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		})
		return m
	}
	if err := get("dl.rej").Reject(false); err != nil {
		t.Fatal(err)
	}
	if err := get("dl.pol").Nack(false, false); err != nil {
		t.Fatal(err)
	}
	if err := get("dl.cls").Reject(false); err != nil {
		t.Fatal(err)
	}
	for range 2 { // delivered twice, over the limit of 1
		if err := get("dl.lim").Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}

	want := map[string]string{"ttl-0": "expired", "ttl-1": "expired", "ttl-2": "expired", "rej-0": "rejected",
		"lim-0": "delivery_limit", "max-0": "maxlen", "pol-0": "rejected"}
	got := map[string]string{}
	_, ch1 := dial(t, n1)
	ds, err := ch1.Consume("dlq", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.After(60 * time.Second)
	for len(got) < len(want) {
		select {
		case d := <-ds:
			body := string(d.Body)
			if _, dup := got[body]; dup {
				t.Fatalf("%s dead-lettered twice", body)
			}
			reason, _ := d.Headers["x-first-death-reason"].(string)
			got[body] = reason
			deaths, _ := d.Headers["x-death"].([]any)
			if len(deaths) != 1 {
				t.Fatalf("%s: x-death %v", body, d.Headers["x-death"])
			}
			queue, _ := deaths[0].(amqp091.Table)["queue"].(string)
			if !strings.HasPrefix(queue, "dl.") {
				t.Fatalf("%s: x-death names queue %q", body, queue)
			}
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatalf("dead letters after 60s: %v, want %v", got, want)
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("dead letters %v, want %v", got, want)
		}
	}
	var m amqp091.Delivery
	waitFor(t, "the dead letter in dlc", func() bool {
		var ok bool
		m, ok, err = ch2.Get("dlc", true)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})
	if string(m.Body) != "cls-0" || m.Headers["x-first-death-reason"] != "rejected" {
		t.Fatalf("dlc: %q %v", m.Body, m.Headers)
	}
	// Nothing is left behind in the sources, and nothing more came.
	for _, q := range []string{"dl.ttl", "dl.rej", "dl.lim", "dl.pol", "dl.cls", "dlq", "dlc"} {
		waitFor(t, q+" empty", func() bool {
			var info struct {
				Messages int `json:"messages"`
			}
			_, err := n1.api("GET", "/api/queues/%2F/"+q, nil, &info)
			return err == nil && info.Messages == 0
		})
	}
	var info struct {
		Messages int `json:"messages"`
	}
	if _, err := n1.api("GET", "/api/queues/%2F/dl.max", nil, &info); err != nil || info.Messages != 1 {
		t.Fatalf("dl.max holds %d messages (%v), want its last", info.Messages, err)
	}
}

// TestClusterQuorumExpires: a quorum queue with x-expires, unused, is
// deleted on every node; one with consumers is kept.
func TestClusterQuorumExpires(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	declareQuorum(t, nodes[1], "exp.unused", amqp091.Table{"x-expires": int32(500)})
	declareQuorum(t, nodes[1], "exp.used", amqp091.Table{"x-expires": int32(2000)})
	_, ch := dial(t, nodes[2])
	if _, err := ch.Consume("exp.used", "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		waitFor(t, "exp.unused gone on "+n.name, func() bool {
			ok, err := passive(n, "exp.unused")
			return err == nil && !ok
		})
	}
	// exp.used outlives its x-expires: its consumer keeps it in use.
	time.Sleep(3 * time.Second)
	var names []string
	for _, n := range nodes {
		ok, err := passive(n, "exp.used")
		if err != nil || !ok {
			names = append(names, fmt.Sprint(n.name, ": ", ok, " ", err))
		}
	}
	if len(names) > 0 {
		t.Fatalf("exp.used, in use, is gone: %v", names)
	}
}

// TestClusterQuorumDeadLetterPagedOut: messages of a replicated quorum
// queue paged out to the members' stores (a window of 10) that expire are
// dead-lettered with their bodies, each once.
func TestClusterQuorumDeadLetterPagedOut(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "1", "--queue-memory-messages", "10")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	declareQuorum(t, nodes[0], "pdlq", nil)
	declareQuorum(t, nodes[0], "pttl", amqp091.Table{"x-message-ttl": int32(1500),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "pdlq"})
	waitSameDefinitions(t, nodes...)
	_, ch := dial(t, nodes[1])
	const n = 100
	if acked := linkPublish(t, ch, "p", "", "pttl", n, false); len(acked) != n {
		t.Fatalf("%d of %d confirmed", len(acked), n)
	}
	_, ch3 := dial(t, nodes[2])
	ds, err := ch3.Consume("pdlq", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for len(seen) < n {
		select {
		case d := <-ds:
			r := recordOf(d)
			if want := fmt.Sprintf("p-%d", r.seq); string(d.Body) != want {
				t.Fatalf("dead letter %d: body %q, want %q", r.seq, d.Body, want)
			}
			if seen[r.seq] {
				t.Fatalf("dead letter %d twice", r.seq)
			}
			seen[r.seq] = true
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%d of %d dead letters", len(seen), n)
		}
	}
}
