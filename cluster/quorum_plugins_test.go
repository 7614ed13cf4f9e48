package cluster_test

import (
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// publishKeyed publishes message key (x-deduplication-header and a
// message group, both from key and group) through n until it is confirmed,
// on a new connection each try, so that a try lost with a killed leader is
// simply made again: what deduplication is for.
func publishKeyed(t *testing.T, n *wnode, queue, key, group string) {
	t.Helper()
	var last error
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ok, err := func() (bool, error) {
			c, err := amqp091.Dial(n.url())
			if err != nil {
				return false, err
			}
			defer c.Close()
			ch, err := c.Channel()
			if err != nil {
				return false, err
			}
			if err := ch.Confirm(false); err != nil {
				return false, err
			}
			conf, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", queue, false, false, amqp091.Publishing{
				DeliveryMode: amqp091.Persistent,
				Headers:      amqp091.Table{"x-deduplication-header": key, "JMSXGroupID": group},
				Body:         []byte(key),
			})
			if err != nil {
				return false, err
			}
			select {
			case <-conf.Done():
				return conf.Acked(), nil
			case <-time.After(10 * time.Second):
				return false, fmt.Errorf("no confirm in 10 s")
			}
		}()
		if ok {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("publish of %s through %s never confirmed: %v", key, n.name, last)
}

// TestClusterQuorumDedupAndGroupsLeaderKill: a replicated quorum queue
// with x-message-deduplication and x-message-group-header keeps its cache
// and its groups in the replicated state, so a leader kill changes
// neither: every key published before the kill and published again after
// it, through another node, is consumed exactly once; keys sent again
// inside the cache's window after they were consumed are dropped too; and
// each group's messages come in the order they were published.
func TestClusterQuorumDedupAndGroupsLeaderKill(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	declareQuorum(t, nodes[0], "dq", amqp091.Table{
		"x-message-deduplication": true, "x-cache-size": int32(1000), "x-cache-ttl": int32(600_000),
		"x-message-group-header": "JMSXGroupID",
	})
	waitSameDefinitions(t, nodes...)

	key := func(i int) string { return fmt.Sprintf("k%03d", i) }
	group := func(i int) string { return fmt.Sprintf("g%d", i%4) }
	const before, after = 60, 30
	for i := range before {
		publishKeyed(t, nodes[1], "dq", key(i), group(i))
	}
	leader := queueLeader(nodes, nil, "dq")
	var dead *wnode
	for _, n := range nodes {
		if n.name == leader {
			dead = n
		}
	}
	if dead == nil {
		t.Fatalf("no node leads dq's group (leader %q)", leader)
	}
	dead.kill()
	var via *wnode
	for _, n := range nodes {
		if n != dead {
			via = n
			break
		}
	}
	// Every key again, through a survivor, then new ones.
	for i := range before + after {
		publishKeyed(t, via, "dq", key(i), group(i))
	}
	dead.start()

	_, ch := dial(t, via)
	if err := ch.Qos(20, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume("dq", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	lastInGroup := map[string]string{}
	recv := func(want int) {
		t.Helper()
		for len(seen) < want {
			select {
			case d, ok := <-ds:
				if !ok {
					t.Fatal("consumer closed")
				}
				k := string(d.Body)
				if d.Redelivered && seen[k] > 0 {
					// Held by no dead node here (the consumer is on a
					// survivor), so a redelivery is a fault too.
					t.Fatalf("%s redelivered", k)
				}
				seen[k]++
				if seen[k] > 1 {
					t.Fatalf("%s consumed twice: a duplicate got through", k)
				}
				g, _ := d.Headers["JMSXGroupID"].(string)
				if prev := lastInGroup[g]; prev != "" && prev > k {
					t.Fatalf("group %s: %s after %s", g, k, prev)
				}
				lastInGroup[g] = k
				if err := d.Ack(false); err != nil {
					t.Fatal(err)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("consumed %d of %d keys", len(seen), want)
			}
		}
	}
	recv(before + after)
	// Sent again inside the window, after they were consumed: dropped on
	// every node, the restarted one included.
	for i := range 10 {
		publishKeyed(t, nodes[i%3], "dq", key(i), group(i))
	}
	publishKeyed(t, dead, "dq", "last", "g0")
	recv(before + after + 1)
	for i := range before + after {
		if seen[key(i)] != 1 {
			t.Fatalf("%s consumed %d times", key(i), seen[key(i)])
		}
	}
}

// TestClusterDelayedNodeKill: delayed messages are kept by the node that
// took their publish; that node SIGKILLed before they are due, and the
// leader of their target quorum queue's group with it, loses none: after
// the restart each is routed once, not before its time, and consumed
// through another node.
func TestClusterDelayedNodeKill(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	declareQuorum(t, nodes[0], "later", nil)
	_, ch := dial(t, nodes[1])
	if err := ch.ExchangeDeclare("dx", "x-delayed-message", true, false, false, false, amqp091.Table{"x-delayed-type": "direct"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("later", "later", "dx", false, nil); err != nil {
		t.Fatal(err)
	}
	waitSameDefinitions(t, nodes...)

	const n = 100
	const delay = 4000 // ms: the kill and restart come before it
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(delay * time.Millisecond)
	confs := make([]*amqp091.DeferredConfirmation, n)
	for i := range n {
		c, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "dx", "later", false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent,
			Headers:      amqp091.Table{"x-delay": int32(delay)},
			Body:         []byte(fmt.Sprintf("m%03d", i)),
		})
		if err != nil {
			t.Fatal(err)
		}
		confs[i] = c
	}
	for i, c := range confs {
		if ok, err := c.WaitContext(t.Context()); err != nil || !ok {
			t.Fatalf("delayed publish %d: acked %v, %v", i, ok, err)
		}
	}
	// The node holding them dies, and so does the queue's leader (it may
	// be the same node).
	leader := queueLeader(nodes, nil, "later")
	nodes[1].kill()
	for _, nd := range nodes {
		if nd.name == leader && nd != nodes[1] {
			nd.kill()
			nd.start()
		}
	}
	nodes[1].start()

	consumer := nodes[2]
	if leader == "n3" {
		consumer = nodes[0]
	}
	_, cch := dial(t, consumer)
	ds, err := cch.Consume("later", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for len(seen) < n {
		select {
		case d := <-ds:
			if time.Now().Before(due) {
				t.Fatalf("%s delivered %v before its time", d.Body, time.Until(due))
			}
			seen[string(d.Body)]++
			if seen[string(d.Body)] > 1 && !d.Redelivered {
				t.Fatalf("%s routed twice", d.Body)
			}
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%d of %d delayed messages arrived", len(seen), n)
		}
	}
	// Nothing more comes: none was routed twice.
	select {
	case d := <-ds:
		t.Fatalf("%s arrived again (redelivered %v)", d.Body, d.Redelivered)
	case <-time.After(2 * time.Second):
	}
}

// TestClusterDelayedFiredUnconfirmedKill: a delayed message's record is
// deleted only once the target confirms the routed copy. The messages come
// due on the node holding them while their target quorum queue's group
// has lost its majority (its other two members are SIGKILLed), so no copy
// can be confirmed; that node is SIGKILLed after the due time. Once the
// three are back, every message arrives at least once (it is routed again
// from its record), none before its time, the first arrivals in due
// order.
func TestClusterDelayedFiredUnconfirmedKill(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	declareQuorum(t, nodes[0], "later", nil)
	leader := queueLeader(nodes, nil, "later")
	// The node that takes the publishes is not the group's leader: with
	// the other two down, the group has no leader and cannot confirm.
	var holder *wnode
	for _, nd := range nodes {
		if nd.name != leader {
			holder = nd
			break
		}
	}
	_, ch := dial(t, holder)
	if err := ch.ExchangeDeclare("dx", "x-delayed-message", true, false, false, false, amqp091.Table{"x-delayed-type": "direct"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("later", "later", "dx", false, nil); err != nil {
		t.Fatal(err)
	}
	waitSameDefinitions(t, nodes...)

	const n = 50
	const delay = 3000 // ms: the other two are down before it
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(delay * time.Millisecond)
	confs := make([]*amqp091.DeferredConfirmation, n)
	for i := range n {
		c, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "dx", "later", false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent,
			Headers:      amqp091.Table{"x-delay": int32(delay)},
			Body:         []byte(fmt.Sprintf("m%03d", i)),
		})
		if err != nil {
			t.Fatal(err)
		}
		confs[i] = c
	}
	for i, c := range confs {
		if ok, err := c.WaitContext(t.Context()); err != nil || !ok {
			t.Fatalf("delayed publish %d: acked %v, %v", i, ok, err)
		}
	}
	var others []*wnode
	for _, nd := range nodes {
		if nd != holder {
			nd.kill()
			others = append(others, nd)
		}
	}
	if time.Now().After(due) {
		t.Fatalf("the other nodes were killed %v after the messages were due", time.Since(due))
	}
	// The messages come due and are routed (the scheduler's lateness is
	// well under a second); their copies cannot be confirmed. Then the
	// holder dies too.
	time.Sleep(time.Until(due.Add(1500 * time.Millisecond)))
	holder.kill()
	for _, nd := range others {
		nd.start()
	}
	holder.start()

	_, cch := dial(t, others[0])
	ds, err := cch.Consume("later", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	last := ""
	for len(seen) < n {
		select {
		case d := <-ds:
			b := string(d.Body)
			if time.Now().Before(due) {
				t.Fatalf("%s delivered %v before its time", b, time.Until(due))
			}
			if seen[b] == 0 {
				if b < last {
					t.Fatalf("%s first arrived after %s", b, last)
				}
				last = b
			}
			seen[b]++
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%d of %d delayed messages arrived: lost when fired to a target that never confirmed", len(seen), n)
		}
	}
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	t.Logf("all %d arrived; %d duplicates (at-least-once across the crash)", n, dups)
}
