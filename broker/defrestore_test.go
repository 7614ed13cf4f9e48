package broker_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
	"github.com/warrenmq/warren/store"
)

// startStored starts a broker over a store in dir; stop closes both.
func startStored(t *testing.T, dir string) (*brokertest.Server, func()) {
	t.Helper()
	st, err := store.Open(store.Config{Dir: dir, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	s := brokertest.Start(t, &broker.Config{Store: st})
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = s.Close()
			_ = st.Close()
		}
	}
	t.Cleanup(stop)
	return s, stop
}

// commonTopology declares on s what the node and the cluster had in
// common before the node fell behind, in the same order (so with the same
// ids): two durable queues, an exchange bound to the first, a transient
// auto-delete queue.
func commonTopology(t *testing.T, s *brokertest.Server) *amqp091.Channel {
	ch := open(t, dial(t, s))
	for _, q := range []string{"restore-keep", "restore-gone"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ch.QueueDeclare("restore-auto", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("restore-x", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("restore-keep", "", "restore-x", false, nil); err != nil {
		t.Fatal(err)
	}
	return ch
}

func publishN(t *testing.T, ch *amqp091.Channel, queue string, n int) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		c, err := ch.PublishWithDeferredConfirm("", queue, false, false,
			amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: fmt.Appendf(nil, "%s-%d", queue, i)})
		if err != nil {
			t.Fatal(err)
		}
		if !c.Wait() {
			t.Fatalf("publish to %s nacked", queue)
		}
	}
}

// queueCount is a queue's ready count through a passive declare on a new
// channel of s, -1 when the queue does not exist, -2 when it is another
// connection's exclusive queue.
func queueCount(t *testing.T, s *brokertest.Server, name string) int {
	t.Helper()
	c, err := amqp091.Dial(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(name, false, false, false, false, nil)
	var ae *amqp091.Error
	if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
		return -1
	}
	if errors.As(err, &ae) && ae.Code == amqp091.ResourceLocked {
		return -2 // there, exclusive to another connection (count unknown)
	}
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// TestRestoreDefinitionsOverQueues: a node with queues holding persistent
// messages installs a definitions snapshot of a cluster that went on
// without it (a queue deleted, others declared, a binding added): its
// queue the snapshot lists keeps its messages, the deleted one is gone
// with its messages, the new ones exist and route; the node ends with
// exactly the snapshot's definitions, its clients are disconnected, and a
// restart keeps all that without installing the snapshot again.
func TestRestoreDefinitionsOverQueues(t *testing.T) {
	dir := t.TempDir()
	node, stop := startStored(t, dir)
	nch := commonTopology(t, node)
	publishN(t, nch, "restore-keep", 5)
	publishN(t, nch, "restore-gone", 3)
	closed := nch.NotifyClose(make(chan *amqp091.Error, 1))

	// The cluster: the same declarations, then what the node missed.
	cluster := brokertest.Start(t, nil)
	cch := commonTopology(t, cluster)
	if _, err := cch.QueueDelete("restore-gone", false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := cch.QueueDeclare("restore-new", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := cch.ExchangeDeclare("restore-new-x", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := cch.QueueBind("restore-new", "k", "restore-new-x", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := cch.QueueBind("restore-keep", "k", "restore-new-x", false, nil); err != nil {
		t.Fatal(err)
	}
	// An exclusive queue whose connection is on the node in the cluster's
	// view, but died with the node: the node deletes it once restored.
	exConn := dial(t, cluster)
	if _, err := open(t, exConn).QueueDeclare("restore-exclusive", false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	snap, err := cluster.SnapshotDefinitions()
	if err != nil {
		t.Fatal(err)
	}

	if err := node.RestoreDefinitionsAt(1000, snap); err != nil {
		t.Fatalf("restore over queues: %v", err)
	}
	if msg := node.DefinitionsBehind(); msg != "" {
		t.Fatalf("node reports itself behind after a restore: %s", msg)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp091.ConnectionForced {
			t.Fatalf("client connection closed with %v, want 320", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("client connection not closed by the restore")
	}
	waitFor(t, "the orphaned exclusive queue deleted", func() bool { return queueCount(t, node, "restore-exclusive") == -1 })
	if err := exConn.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the exclusive queue deleted in the cluster", func() bool { return queueCount(t, cluster, "restore-exclusive") == -1 })
	if snap, err = cluster.SnapshotDefinitions(); err != nil {
		t.Fatal(err)
	}
	got, err := node.SnapshotDefinitions()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(snap) {
		t.Fatalf("definitions after restore:\n%s\nwant\n%s", got, snap)
	}
	check := func(when string) {
		t.Helper()
		if n := queueCount(t, node, "restore-keep"); n != 5 {
			t.Fatalf("%s: restore-keep has %d messages, want 5", when, n)
		}
		if n := queueCount(t, node, "restore-gone"); n != -1 {
			t.Fatalf("%s: restore-gone exists (%d messages), want it deleted", when, n)
		}
		if n := queueCount(t, node, "restore-new"); n != 0 {
			t.Fatalf("%s: restore-new has %d, want an empty queue", when, n)
		}
	}
	check("after restore")
	// The new binding routes to the kept queue and the new one.
	ch := open(t, dial(t, node))
	if err := ch.Publish("restore-new-x", "k", true, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("routed")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the routed message", func() bool {
		return queueCount(t, node, "restore-keep") == 6 && queueCount(t, node, "restore-new") == 1
	})
	// The kept messages are the node's own, in order.
	d, _, err := ch.Get("restore-keep", true)
	if err != nil || string(d.Body) != "restore-keep-0" {
		t.Fatalf("first message of restore-keep: %q %v", d.Body, err)
	}

	stop()
	node2, _ := startStored(t, dir)
	if n := queueCount(t, node2, "restore-keep"); n != 5 {
		t.Fatalf("after restart: restore-keep has %d messages, want 5", n)
	}
	if n := queueCount(t, node2, "restore-gone"); n != -1 {
		t.Fatalf("after restart: restore-gone exists")
	}
	if n := queueCount(t, node2, "restore-new"); n != 1 {
		t.Fatalf("after restart: restore-new has %d messages, want 1", n)
	}
	// The index is recorded: the same snapshot is not installed again
	// (it would disconnect the client).
	ch2 := open(t, dial(t, node2))
	closed2 := ch2.NotifyClose(make(chan *amqp091.Error, 1))
	if err := node2.RestoreDefinitionsAt(1000, []byte("not installed again")); err != nil {
		t.Fatal(err)
	}
	if _, err := ch2.QueueDeclarePassive("restore-keep", true, false, false, false, nil); err != nil {
		t.Fatalf("after a repeated restore: %v", err)
	}
	select {
	case e := <-closed2:
		t.Fatalf("a snapshot already held was installed again (client closed: %v)", e)
	default:
	}
}
