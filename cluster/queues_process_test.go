package cluster_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Tests of classic queues in a cluster of real warren processes: a queue
// lives on one node and the other nodes' clients reach it over the node
// link.

// linkRecord is one message as a consumer received it.
type linkRecord struct {
	pub         string
	seq         int64
	redelivered bool
}

// linkPublish publishes n persistent messages with confirms on ch, tagged
// pub/0..n-1, to exchange ex with key; it returns the seqs the broker
// confirmed.
func linkPublish(t *testing.T, ch *amqp091.Channel, pub, ex, key string, n int, mandatory bool) []int64 {
	t.Helper()
	acked, err := linkPublishErr(t, ch, pub, ex, key, n, mandatory)
	if err != nil {
		t.Fatal(err)
	}
	return acked
}

// linkPublishErr is linkPublish for other goroutines than the test's.
func linkPublishErr(t *testing.T, ch *amqp091.Channel, pub, ex, key string, n int, mandatory bool) ([]int64, error) {
	if err := ch.Confirm(false); err != nil {
		return nil, err
	}
	confs := make([]*amqp091.DeferredConfirmation, n)
	for i := range n {
		c, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), ex, key, mandatory, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent,
			Headers:      amqp091.Table{"pub": pub, "seq": int64(i)},
			Body:         []byte(fmt.Sprintf("%s-%d", pub, i)),
		})
		if err != nil {
			return nil, fmt.Errorf("%s: publish %d: %w", pub, i, err)
		}
		confs[i] = c
	}
	var acked []int64
	for i, c := range confs {
		ok, err := c.WaitContext(t.Context())
		if err != nil {
			return nil, fmt.Errorf("%s: confirm %d: %w", pub, i, err)
		}
		if ok {
			acked = append(acked, int64(i))
		}
	}
	return acked, nil
}

// recordOf reads a delivery's tags.
func recordOf(d amqp091.Delivery) linkRecord {
	pub, _ := d.Headers["pub"].(string)
	seq, _ := d.Headers["seq"].(int64)
	return linkRecord{pub: pub, seq: seq, redelivered: d.Redelivered}
}

// checkLinkHistory checks a consumer's history against what was confirmed:
// every confirmed message was consumed exactly once, nothing consumed was
// never published, and each publisher's messages came in the order
// published.
func checkLinkHistory(confirmed map[string][]int64, published map[string]int, consumed []linkRecord) error {
	seen := make(map[string]map[int64]int)
	last := make(map[string]int64)
	for i, r := range consumed {
		n, ok := published[r.pub]
		if !ok || r.seq < 0 || r.seq >= int64(n) {
			return fmt.Errorf("delivery %d: %s/%d was never published", i, r.pub, r.seq)
		}
		if seen[r.pub] == nil {
			seen[r.pub] = make(map[int64]int)
			last[r.pub] = -1
		}
		seen[r.pub][r.seq]++
		if seen[r.pub][r.seq] > 1 {
			return fmt.Errorf("delivery %d: %s/%d consumed twice", i, r.pub, r.seq)
		}
		if r.seq <= last[r.pub] {
			return fmt.Errorf("delivery %d: %s/%d after %s/%d: out of order", i, r.pub, r.seq, r.pub, last[r.pub])
		}
		last[r.pub] = r.seq
	}
	for pub, seqs := range confirmed {
		for _, s := range seqs {
			if seen[pub][s] != 1 {
				return fmt.Errorf("confirmed %s/%d was not consumed", pub, s)
			}
		}
	}
	return nil
}

// TestCheckLinkHistory: the checker finds loss, duplication, reordering and
// invented messages.
func TestCheckLinkHistory(t *testing.T) {
	published := map[string]int{"a": 3, "b": 2}
	confirmed := map[string][]int64{"a": {0, 1, 2}, "b": {0, 1}}
	good := []linkRecord{{"a", 0, false}, {"b", 0, false}, {"a", 1, false}, {"b", 1, false}, {"a", 2, false}}
	if err := checkLinkHistory(confirmed, published, good); err != nil {
		t.Fatalf("a good history refused: %v", err)
	}
	for name, bad := range map[string][]linkRecord{
		"lost":      good[:4],
		"twice":     append(append([]linkRecord{}, good...), linkRecord{"a", 2, false}),
		"reordered": {{"a", 1, false}, {"a", 0, false}, {"b", 0, false}, {"b", 1, false}, {"a", 2, false}},
		"invented":  append(append([]linkRecord{}, good...), linkRecord{"c", 0, false}),
	} {
		if err := checkLinkHistory(confirmed, published, bad); err == nil {
			t.Errorf("%s: history accepted", name)
		}
	}
}

// amqpCode is the AMQP reply code of err (0 if it is not an AMQP error).
func amqpCode(err error) (int, string) {
	var ae *amqp091.Error
	if errors.As(err, &ae) {
		return ae.Code, ae.Reason
	}
	return 0, ""
}

// passiveErr is the outcome of a passive declaration of queue on n.
func passiveErr(n *wnode, queue string) error {
	c, err := amqp091.Dial(n.url())
	if err != nil {
		return err
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	return err
}

// queueNode is the node the management API of n gives for a queue.
func queueNode(n *wnode, name string) (string, error) {
	var q struct {
		Node string `json:"node"`
	}
	_, err := n.api("GET", "/api/queues/%2F/"+queryEscape(name), nil, &q)
	return q.Node, err
}

// TestClusterQueueOnOneNode: three warren processes; topology declared on
// n1 (the queue's home); two publishers with confirms through n2, a
// consumer with manual acks on n3: every confirmed message is consumed
// exactly once, in order per publisher. A consumer on n3 whose connection
// closes with unacked messages: they are redelivered, flagged. Queues
// declared with x-queue-leader-locator=balanced spread over the nodes.
// SIGKILL of n1: its queue is unavailable on n2 and n3 as in RabbitMQ
// (404 on passive declare and consume, publishes dropped or returned with
// mandatory); n1 restarted on its data dir serves it again with its
// durable confirmed messages.
func TestClusterQueueOnOneNode(t *testing.T) {
	nodes := threeNodes(t, localIPs)
	startCluster(t, nodes...)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]

	_, cha := dial(t, n1)
	if err := cha.ExchangeDeclare("lk.x", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"lk.q", "lk.r"} {
		if _, err := cha.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := cha.QueueBind(q, q, "lk.x", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		var node string
		waitFor(t, "lk.q and lk.r on "+n.name, func() bool {
			var err error
			node, err = queueNode(n, "lk.q")
			ok, _ := passive(n, "lk.r")
			return err == nil && ok
		})
		if node != "n1" {
			t.Fatalf("lk.q on %s: node %q, want n1", n.name, node)
		}
	}

	// Publish through n2, consume through n3.
	_, chc := dial(t, n3)
	if err := chc.Qos(20, 0, false); err != nil {
		t.Fatal(err)
	}
	dels, err := chc.Consume("lk.q", "c3", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		consumed []linkRecord
	)
	go func() {
		for d := range dels {
			mu.Lock()
			consumed = append(consumed, recordOf(d))
			mu.Unlock()
			_ = d.Ack(false)
		}
	}()
	const perPub = 300
	pubs := []string{"p1", "p2"}
	confirmed := make(map[string][]int64)
	published := make(map[string]int)
	var wg sync.WaitGroup
	var cmu sync.Mutex
	var pubErr error
	for _, pub := range pubs {
		_, ch := dial(t, n2)
		published[pub] = perPub
		wg.Add(1)
		go func() {
			defer wg.Done()
			acked, err := linkPublishErr(t, ch, pub, "lk.x", "lk.q", perPub, false)
			cmu.Lock()
			confirmed[pub] = acked
			if err != nil {
				pubErr = err
			}
			cmu.Unlock()
		}()
	}
	wg.Wait()
	if pubErr != nil {
		t.Fatal(pubErr)
	}
	for _, pub := range pubs {
		if len(confirmed[pub]) != perPub {
			t.Fatalf("%s: %d of %d publishes confirmed", pub, len(confirmed[pub]), perPub)
		}
	}
	waitFor(t, "the confirmed messages consumed on n3", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(consumed) >= len(pubs)*perPub
	})
	// Nothing more arrives: the queue is empty on its home node.
	waitFor(t, "lk.q empty and acknowledged", func() bool {
		var q struct {
			Messages int `json:"messages"`
		}
		_, err := n1.api("GET", "/api/queues/%2F/lk.q", nil, &q)
		return err == nil && q.Messages == 0
	})
	mu.Lock()
	history := append([]linkRecord(nil), consumed...)
	mu.Unlock()
	if err := checkLinkHistory(confirmed, published, history); err != nil {
		t.Fatal(err)
	}
	for i, r := range history {
		if r.redelivered {
			t.Fatalf("delivery %d (%s/%d) flagged redelivered with nothing to redeliver", i, r.pub, r.seq)
		}
	}
	if err := chc.Cancel("c3", false); err != nil {
		t.Fatal(err)
	}

	// Unacked messages of a consumer on n3 whose connection closes are
	// redelivered, flagged.
	_, chp := dial(t, n2)
	if acked := linkPublish(t, chp, "r", "lk.x", "lk.r", 5, false); len(acked) != 5 {
		t.Fatalf("%d of 5 publishes to lk.r confirmed", len(acked))
	}
	cu, chu := dial(t, n3)
	du, err := chu.Consume("lk.r", "unacked", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		select {
		case d := <-du:
			if r := recordOf(d); r.seq != int64(i) || r.redelivered {
				t.Fatalf("lk.r delivery %d: %+v", i, r)
			}
		case <-time.After(30 * time.Second):
			var q struct {
				Messages  int `json:"messages"`
				Consumers int `json:"consumers"`
			}
			_, qerr := n1.api("GET", "/api/queues/%2F/lk.r", nil, &q)
			var bs []map[string]any
			_, berr := n2.api("GET", "/api/exchanges/%2F/lk.x/bindings/source", nil, &bs)
			var views []string
			for _, n := range nodes {
				var v map[string]any
				_, err := n.api("GET", "/api/queues/%2F/lk.r", nil, &v)
				views = append(views, fmt.Sprintf("%s: %v %v", n.name, v, err))
			}
			t.Fatalf("lk.r: %d of 5 delivered (on n1: %d messages, %d consumers, %v; lk.x's bindings on n2: %v %v)\n%s",
				i, q.Messages, q.Consumers, qerr, bs, berr, strings.Join(views, "\n"))
		}
	}
	cu.Close()
	_, chr := dial(t, n3)
	dr, err := chr.Consume("lk.r", "again", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		select {
		case d := <-dr:
			if r := recordOf(d); r.seq != int64(i) || !r.redelivered {
				t.Fatalf("lk.r redelivery %d: %+v, want seq %d flagged redelivered", i, r, i)
			}
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("lk.r: %d of 5 redelivered", i)
		}
	}

	// Balanced placement: queues declared through n2 spread over the
	// three nodes (n1 already has two).
	_, chb := dial(t, n2)
	var balanced []string
	for i := range 7 {
		name := fmt.Sprintf("lk.bal-%d", i)
		if _, err := chb.QueueDeclare(name, true, false, false, false, amqp091.Table{"x-queue-leader-locator": "balanced"}); err != nil {
			t.Fatal(err)
		}
		balanced = append(balanced, name)
	}
	count := map[string]int{}
	for _, name := range append([]string{"lk.q", "lk.r"}, balanced...) {
		var node string
		waitFor(t, name+" on n3", func() bool {
			var err error
			node, err = queueNode(n3, name)
			return err == nil
		})
		count[node]++
	}
	if len(count) != 3 || count["n1"] != 3 || count["n2"] != 3 || count["n3"] != 3 {
		t.Fatalf("queues per node after balanced declarations: %v, want 3 on each of n1, n2, n3", count)
	}

	// Durable confirmed messages waiting on n1, then n1 is killed.
	if acked := linkPublish(t, chp, "k", "lk.x", "lk.q", 50, false); len(acked) != 50 {
		t.Fatalf("%d of 50 publishes before the kill confirmed", len(acked))
	}
	n1.kill()
	for _, n := range []*wnode{n2, n3} {
		waitFor(t, "lk.q reported down on "+n.name, func() bool {
			code, reason := amqpCode(passiveErr(n, "lk.q"))
			return code == amqp091.NotFound && strings.Contains(reason, "home node 'n1' of durable queue 'lk.q'") &&
				strings.Contains(reason, "is down or inaccessible")
		})
		_, ch := dial(t, n)
		_, err := ch.Consume("lk.q", "", false, false, false, false, nil)
		if code, reason := amqpCode(err); code != amqp091.NotFound || !strings.Contains(reason, "down or inaccessible") {
			t.Fatalf("consume of lk.q on %s with n1 down: %v", n.name, err)
		}
	}
	// Publishes routed only to lk.q: returned with mandatory, dropped
	// without; confirmed either way, as RabbitMQ does.
	_, chm := dial(t, n2)
	returns := chm.NotifyReturn(make(chan amqp091.Return, 10))
	if acked := linkPublish(t, chm, "m", "lk.x", "lk.q", 3, true); len(acked) != 3 {
		t.Fatalf("%d of 3 mandatory publishes to a down queue confirmed", len(acked))
	}
	for i := range 3 {
		select {
		case r := <-returns:
			if r.ReplyCode != amqp091.NoRoute {
				t.Fatalf("return %d: %d %s", i, r.ReplyCode, r.ReplyText)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of 3 mandatory publishes to a down queue returned", i)
		}
	}
	_, chd := dial(t, n3)
	if acked := linkPublish(t, chd, "d", "lk.x", "lk.q", 3, false); len(acked) != 3 {
		t.Fatalf("%d of 3 publishes to a down queue confirmed", len(acked))
	}

	// n1 restarted on its data dir: lk.q serves again, with exactly its
	// 50 confirmed messages.
	n1.start()
	waitFor(t, "lk.q back on n3", func() bool {
		ok, _ := passive(n3, "lk.q")
		return ok
	})
	_, chg := dial(t, n3)
	var got []linkRecord
	for {
		d, ok, err := chg.Get("lk.q", false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, recordOf(d))
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	all := make([]int64, 50)
	for i := range all {
		all[i] = int64(i)
	}
	if err := checkLinkHistory(map[string][]int64{"k": all}, map[string]int{"k": 50}, got); err != nil || len(got) != 50 {
		t.Fatalf("lk.q after n1's restart: %d messages %v: %v", len(got), got, err)
	}
}
