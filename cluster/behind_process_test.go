package cluster_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Tests of a node that falls behind the metadata log: SIGKILLed while the
// others go on and compact their logs past it (a low snapshot threshold
// and few trailing logs), it is sent a snapshot when it comes back, and
// installs it over its own queues.

// behindFlags make the metadata group snapshot every 16 entries and keep
// only 4 behind a snapshot.
var behindFlags = []string{"--cluster-snapshot-threshold", "16", "--cluster-trailing-logs", "4"}

// restoredLine is what a node logs once it installed a snapshot over its
// queues.
const restoredLine = "installed the cluster's definitions snapshot over this node's queues"

// snapshotAfter reports whether n's metadata group has a snapshot taken
// after at (raft names them term-index-unixmillis).
func snapshotAfter(n *wnode, at time.Time) bool {
	entries, err := os.ReadDir(filepath.Join(n.dir, "raft", "metadata", "snapshots"))
	if err != nil {
		return false
	}
	for _, e := range entries {
		var term, index, msec uint64
		if _, err := fmt.Sscanf(e.Name(), "%d-%d-%d", &term, &index, &msec); err == nil && int64(msec) > at.UnixMilli() {
			return true
		}
	}
	return false
}

// waitCompactedPast waits until both live nodes snapshot after at, so
// that whichever leads has deleted the log entries a node killed before
// at had not received (at is well after the kill: the entries made since
// outnumber the trailing logs kept).
func waitCompactedPast(t *testing.T, at time.Time, live ...*wnode) {
	t.Helper()
	for _, n := range live {
		waitFor(t, n.name+" snapshots after the changes", func() bool { return snapshotAfter(n, at) })
	}
}

// restart starts n again once its cluster port is free: while n was down,
// an outgoing connection on this machine may have been given that port.
func restart(t *testing.T, n *wnode) {
	t.Helper()
	waitFor(t, n.name+"'s cluster port free", func() bool {
		ln, err := net.Listen("tcp", n.clusterAddr)
		if err != nil {
			return false
		}
		ln.Close()
		return true
	})
	n.start()
}

// publishConfirmed publishes n persistent messages to queue through ch
// (in confirm mode) and waits for their confirms.
func publishConfirmed(t *testing.T, ch *amqp091.Channel, queue string, n int) {
	t.Helper()
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

// readyOn is the ready count of queue through a passive declare on n.
func readyOn(n *wnode, queue string) (int, error) {
	c, err := amqp091.Dial(n.url())
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return 0, err
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	return q.Messages, err
}

// nodeBehind is the definitions_behind field of n's own /api/nodes item.
func nodeBehind(n *wnode) (bool, string, error) {
	var items []map[string]any
	if _, err := n.api("GET", "/api/nodes", nil, &items); err != nil {
		return false, "", err
	}
	for _, it := range items {
		if it["name"] == n.name {
			b, ok := it["definitions_behind"].(bool)
			if !ok {
				return false, "", fmt.Errorf("/api/nodes item of %s has no definitions_behind: %v", n.name, it)
			}
			msg, _ := it["definitions_error"].(string)
			return b, msg, nil
		}
	}
	return false, "", fmt.Errorf("/api/nodes of %s does not list it", n.name)
}

// checkCaughtUp checks that n, restarted after falling behind, installed
// a snapshot over its queues, has the cluster's definitions, still holds
// want messages in its queue keep, says it is not behind, and serves a
// declaration that every node then knows.
func checkCaughtUp(t *testing.T, n *wnode, nodes []*wnode, keep string, want int, declared string) string {
	t.Helper()
	waitFor(t, n.name+" installs the snapshot", func() bool { return strings.Contains(n.logs.String(), restoredLine) })
	waitFor(t, n.name+" serves a declaration", func() bool {
		c, err := amqp091.Dial(n.url())
		if err != nil {
			return false
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			return false
		}
		_, err = ch.QueueDeclare(declared, true, false, false, false, nil)
		if err != nil {
			t.Logf("declare through %s: %v", n.name, err)
		}
		return err == nil
	})
	for _, o := range nodes {
		waitFor(t, declared+" known to "+o.name, func() bool {
			ok, err := passive(o, declared)
			return ok && err == nil
		})
	}
	defs := waitSameDefinitions(t, nodes...)
	for _, o := range nodes {
		got, err := readyOn(o, keep)
		if err != nil || got != want {
			t.Fatalf("%s on %s: %d messages (%v), want %d", keep, o.name, got, err, want)
		}
	}
	behind, msg, err := nodeBehind(n)
	if err != nil || behind {
		t.Fatalf("%s reports itself behind: %v %q (%v)", n.name, behind, msg, err)
	}
	return defs
}

// TestClusterBehindNodeCatchesUp: n2 holds a classic queue with messages
// and another; SIGKILLed, it misses the deletion of the second queue, a
// new queue and a hundred exchanges, and the others compact their logs
// past it. Restarted, it installs their snapshot: its first queue keeps
// its messages, the deleted one is gone, the new ones are there, and it
// serves declarations again. A second restart keeps all that.
func TestClusterBehindNodeCatchesUp(t *testing.T) {
	nodes := threeNodes(t, localIPs, behindFlags...)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	startCluster(t, nodes...)
	_, ch := dial(t, n2)
	for _, q := range []string{"behind-keep", "behind-gone"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "behind-keep", 10)
	publishConfirmed(t, ch, "behind-gone", 3)
	waitSameDefinitions(t, nodes...)

	n2.kill()
	_, ch1 := dial(t, n1)
	if _, err := ch1.QueueDelete("behind-gone", false, false, false); err != nil {
		t.Fatalf("deleting n2's queue through n1 while n2 is down: %v", err)
	}
	if _, err := ch1.QueueDeclare("behind-new", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := n3.api("PUT", fmt.Sprintf("/api/exchanges/%%2F/behind-x-%d", i), map[string]any{"type": "fanout", "durable": true}, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitCompactedPast(t, time.Now(), n1, n3)

	restart(t, n2)
	defs := checkCaughtUp(t, n2, nodes, "behind-keep", 10, "behind-after")
	for _, want := range []string{"behind-new", "behind-x-99", "behind-after"} {
		if !strings.Contains(defs, `"`+want+`"`) {
			t.Fatalf("definitions lack %s:\n%s", want, defs)
		}
	}
	if strings.Contains(defs, "behind-gone") {
		t.Fatalf("definitions still hold behind-gone:\n%s", defs)
	}
	if ok, err := passive(n2, "behind-gone"); ok || err != nil {
		t.Fatalf("behind-gone on n2: exists %v (%v)", ok, err)
	}

	n2.kill()
	restart(t, n2)
	waitRestored(t, n2, defs, "n2 after a restart")
	if got, err := readyOn(n2, "behind-keep"); err != nil || got != 10 {
		t.Fatalf("behind-keep after a restart: %d (%v), want 10", got, err)
	}
}

// loopClient declares and deletes queues through one node until stop,
// reconnecting after any error, as `warren bench failover` does.
type loopClient struct {
	n    *wnode
	id   string
	ok   atomic.Int64
	conn *amqp091.Connection
	ch   *amqp091.Channel
}

func (c *loopClient) run(stop <-chan struct{}) {
	defer func() {
		if c.conn != nil {
			c.conn.Close()
		}
	}()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		if c.ch == nil {
			conn, err := amqp091.Dial(c.n.url())
			if err == nil {
				c.conn = conn
				c.ch, err = conn.Channel()
			}
			if err != nil {
				if c.conn != nil {
					c.conn.Close()
				}
				c.conn, c.ch = nil, nil
				time.Sleep(20 * time.Millisecond)
				continue
			}
		}
		name := fmt.Sprintf("loop-%s-%d", c.id, i)
		_, err := c.ch.QueueDeclare(name, true, false, false, false, nil)
		if err == nil {
			c.ok.Add(1)
			_, err = c.ch.QueueDelete(name, false, false, false)
		}
		if err != nil {
			c.conn.Close()
			c.conn, c.ch = nil, nil
		}
	}
}

// TestClusterBehindNodeDuringDeclareLoop: clients declare and delete queues
// through every node (the failover phase of scripts/cluster-perf.sh) while
// n2, which holds a classic queue with messages, is SIGKILLed, the others
// compact past it, and n2 comes back: it installs their snapshot, keeps its
// queue's messages, and its clients get declare-ok again.
func TestClusterBehindNodeDuringDeclareLoop(t *testing.T) {
	nodes := threeNodes(t, localIPs, behindFlags...)
	n2 := nodes[1]
	startCluster(t, nodes...)
	_, ch := dial(t, n2)
	if _, err := ch.QueueDeclare("loop-keep", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "loop-keep", 10)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var clients []*loopClient
	for i, n := range nodes {
		for j := range 2 {
			c := &loopClient{n: n, id: fmt.Sprintf("%d-%d", i+1, j)}
			clients = append(clients, c)
			wg.Go(func() { c.run(stop) })
		}
	}
	stopped := false
	stopLoop := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	t.Cleanup(stopLoop)
	okOn := func(node int) int64 {
		return clients[2*node].ok.Load() + clients[2*node+1].ok.Load()
	}
	for i := range nodes {
		waitFor(t, fmt.Sprintf("declares through n%d", i+1), func() bool { return okOn(i) > 20 })
	}

	n2.kill()
	before := okOn(0) + okOn(2)
	waitFor(t, "declares while n2 is down", func() bool { return okOn(0)+okOn(2) > before+100 })
	waitCompactedPast(t, time.Now(), nodes[0], nodes[2])

	restart(t, n2)
	waitFor(t, n2.name+" installs the snapshot", func() bool { return strings.Contains(n2.logs.String(), restoredLine) })
	after := okOn(1)
	waitFor(t, "declare-ok through n2 in the loop", func() bool { return okOn(1) > after+10 })
	stopLoop()
	checkCaughtUp(t, n2, nodes, "loop-keep", 10, "loop-after")
}
