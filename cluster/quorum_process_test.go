package cluster_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Tests of quorum queues replicated in data groups, on real warren
// processes.

// waitDataGroups waits until every node has the data groups' plan.
func waitDataGroups(t *testing.T, nodes ...*wnode) {
	t.Helper()
	for _, n := range nodes {
		waitFor(t, n.name+" has the data groups plan", func() bool {
			code, _ := n.api("GET", "/api/global-parameters/warren_data_groups", nil, nil)
			return code == 200
		})
	}
}

// declareQuorum declares a quorum queue through ch's node, retrying while
// the data groups elect their leaders.
func declareQuorum(t *testing.T, n *wnode, name string, args amqp091.Table) {
	t.Helper()
	a := amqp091.Table{"x-queue-type": "quorum"}
	for k, v := range args {
		a[k] = v
	}
	var last error
	waitFor(t, "quorum queue "+name+" declared", func() bool {
		c, err := amqp091.Dial(n.url())
		if err != nil {
			last = err
			return false
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			last = err
			return false
		}
		_, last = ch.QueueDeclare(name, true, false, false, false, a)
		return last == nil
	})
}

// consumeUntil consumes from queue on n with manual acks, acking each,
// until done holds for the records, and returns them.
func consumeUntil(t *testing.T, n *wnode, queue string, prefetch int, done func([]linkRecord) bool) []linkRecord {
	t.Helper()
	_, ch := dial(t, n)
	if err := ch.Qos(prefetch, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []linkRecord
	timeout := time.After(60 * time.Second)
	for !done(got) {
		select {
		case d, ok := <-ds:
			if !ok {
				t.Fatalf("consumer on %s ended after %d messages", n.name, len(got))
			}
			got = append(got, recordOf(d))
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			have := map[string]bool{}
			for _, r := range got {
				have[fmt.Sprint(r.pub, "/", r.seq)] = true
			}
			var missing []string
			for _, p := range []string{"p-n1", "p-n2", "p-n3"} {
				for i := range 200 {
					if k := fmt.Sprint(p, "/", i); !have[k] {
						missing = append(missing, k)
					}
				}
			}
			t.Fatalf("consumer on %s got %d messages in 60s; missing %v", n.name, len(got), missing)
		}
	}
	return got
}

// TestClusterQuorumQueueReplicated: a quorum queue declared on n1 is
// replicated in a data group: messages published with confirms through
// every node are consumed through another node after n1, which the queue
// was declared on, is killed; a consumer's unacknowledged deliveries are
// returned when its node dies, and come again flagged redelivered, with
// x-delivery-count.
func TestClusterQuorumQueueReplicated(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	declareQuorum(t, nodes[0], "qq", nil)
	waitSameDefinitions(t, nodes...)

	published := map[string]int{}
	confirmed := map[string][]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for _, n := range nodes {
		_, ch := dial(t, n)
		pub := "p-" + n.name
		wg.Add(1)
		go func() {
			defer wg.Done()
			acked, err := linkPublishErr(t, ch, pub, "", "qq", 200, false)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			published[pub], confirmed[pub] = 200, acked
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for pub, acked := range confirmed {
		if len(acked) != 200 {
			t.Fatalf("%s: %d of 200 confirmed", pub, len(acked))
		}
	}

	// A consumer on n3 takes 10 messages and acks none: n3 dies with
	// them.
	_, ch3 := dial(t, nodes[2])
	if err := ch3.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	ds3, err := ch3.Consume("qq", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	for range 10 {
		select {
		case d := <-ds3:
			r := recordOf(d)
			held[fmt.Sprint(r.pub, "/", r.seq)] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("the consumer on n3 got %d messages", len(held))
		}
	}
	// n3 lists its consumer of the replicated queue.
	waitFor(t, "n3 lists its consumer of qq", func() bool {
		cs := listConsumers(t, nodes[2])
		return len(cs) == 1 && cs[0].Queue.Name == "qq" && cs[0].Prefetch == 10 && cs[0].AckRequired
	})
	nodes[2].kill()
	// n1, which the queue was declared on, dies too, after it: the
	// queue lives on in n2 with n3 restarted.
	nodes[2].start()
	nodes[0].kill()

	got := consumeUntil(t, nodes[1], "qq", 50, func(rs []linkRecord) bool { return len(rs) >= 600 })
	var redelivered int
	for _, r := range got {
		if r.redelivered {
			redelivered++
			if !held[fmt.Sprint(r.pub, "/", r.seq)] {
				t.Fatalf("%s/%d redelivered but never delivered before", r.pub, r.seq)
			}
		}
	}
	if redelivered != len(held) {
		t.Fatalf("%d messages redelivered, want the %d the dead consumer held", redelivered, len(held))
	}
	if err := checkSet(confirmed, published, got); err != nil {
		t.Fatal(err)
	}
}

// checkSet checks that the records hold every confirmed message exactly
// once and nothing else.
func checkSet(confirmed map[string][]int64, published map[string]int, rs []linkRecord) error {
	seen := map[string]map[int64]int{}
	for _, r := range rs {
		if n, ok := published[r.pub]; !ok || r.seq < 0 || r.seq >= int64(n) {
			return fmt.Errorf("%s/%d was never published", r.pub, r.seq)
		}
		if seen[r.pub] == nil {
			seen[r.pub] = map[int64]int{}
		}
		seen[r.pub][r.seq]++
		if seen[r.pub][r.seq] > 1 {
			return fmt.Errorf("%s/%d consumed twice", r.pub, r.seq)
		}
	}
	for pub, seqs := range confirmed {
		for _, s := range seqs {
			if seen[pub][s] != 1 {
				return fmt.Errorf("confirmed %s/%d lost", pub, s)
			}
		}
	}
	return nil
}

// TestClusterQuorumGetHeldByDeadNode: a message taken with basic.get
// (manual ack) through n3 is returned, flagged redelivered, once n3 dies,
// as a consumer's unacknowledged deliveries are.
func TestClusterQuorumGetHeldByDeadNode(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	declareQuorum(t, nodes[0], "qget", nil)
	waitSameDefinitions(t, nodes...)
	_, ch1 := dial(t, nodes[0])
	if _, err := linkPublishErr(t, ch1, "p", "", "qget", 1, false); err != nil {
		t.Fatal(err)
	}
	_, ch3 := dial(t, nodes[2])
	var m amqp091.Delivery
	waitFor(t, "the message got through n3", func() bool {
		var ok bool
		var err error
		m, ok, err = ch3.Get("qget", false)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})
	if m.Redelivered {
		t.Fatal("first get flagged redelivered")
	}
	nodes[2].kill()
	_, ch2 := dial(t, nodes[1])
	waitFor(t, "the message back on n2", func() bool {
		m, ok, err := ch2.Get("qget", false)
		if err != nil {
			t.Fatal(err)
		}
		if ok && !m.Redelivered {
			t.Fatalf("the message came back not flagged redelivered")
		}
		return ok
	})
}

// apiConsumer is what the tests read of an /api/consumers entry.
type apiConsumer struct {
	Tag   string `json:"consumer_tag"`
	Queue struct {
		Name string `json:"name"`
	} `json:"queue"`
	Prefetch    int  `json:"prefetch_count"`
	AckRequired bool `json:"ack_required"`
}

// listConsumers is n's /api/consumers.
func listConsumers(t *testing.T, n *wnode) []apiConsumer {
	t.Helper()
	var cs []apiConsumer
	if _, err := n.api("GET", "/api/consumers", nil, &cs); err != nil {
		t.Fatal(err)
	}
	return cs
}
