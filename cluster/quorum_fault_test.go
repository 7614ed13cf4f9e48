package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The fault test of replicated quorum queues: publishers with confirms and
// consumers with manual acks on every node, while the node leading the
// queue's data group is SIGKILLed again and again (and restarted each
// time). A checker over the recorded history reports lost messages
// (confirmed, never delivered), duplicates (delivered again without the
// redelivered flag) and reorderings (a consumer got a publisher's messages
// out of order, redeliveries aside); lost must be 0. The failover time of
// each kill (the kill to the next confirm) is logged. WARREN_SOAK=1 runs
// the long version.

// qfConfirm is a confirmed publish: its publisher and sequence, when it
// was sent and when the confirm came.
type qfConfirm struct {
	pub      string
	seq      int64
	sent, at time.Time
}

// qfDelivery is a delivery as a consumer recorded it.
type qfDelivery struct {
	consumer    string
	pub         string
	seq         int64
	redelivered bool
}

type qfHistory struct {
	mu         sync.Mutex
	confirms   []qfConfirm
	deliveries []qfDelivery
	kills      []time.Time
	cuts       []time.Time
	// fed is when each node's consumer last got a delivery.
	fed map[string]time.Time
}

func (h *qfHistory) confirmed(pub string, seq int64, sent time.Time) {
	h.mu.Lock()
	h.confirms = append(h.confirms, qfConfirm{pub, seq, sent, time.Now()})
	h.mu.Unlock()
}

func (h *qfHistory) delivered(d qfDelivery) {
	h.mu.Lock()
	h.deliveries = append(h.deliveries, d)
	if h.fed == nil {
		h.fed = map[string]time.Time{}
	}
	node, _, _ := strings.Cut(d.consumer, ".")
	h.fed[node] = time.Now()
	h.mu.Unlock()
}

// fedSince reports whether node's consumer got a delivery after t.
func (h *qfHistory) fedSince(node string, t time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fed[node].After(t)
}

// qfPublish publishes through n until ctx ends, 16 confirms outstanding,
// reconnecting (as a new publisher name) when its connection breaks.
func qfPublish(ctx context.Context, n *wnode, h *qfHistory) {
	for gen := 0; ctx.Err() == nil; gen++ {
		pub := fmt.Sprintf("%s.%d", n.name, gen)
		c, err := amqp091.Dial(n.url())
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		ch, err := c.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		type sent struct {
			dc *amqp091.DeferredConfirmation
			at time.Time
		}
		var pending []sent
		for seq := int64(0); err == nil && ctx.Err() == nil; seq++ {
			var dc *amqp091.DeferredConfirmation
			at := time.Now()
			dc, err = ch.PublishWithDeferredConfirmWithContext(ctx, "", "qf", false, false, amqp091.Publishing{
				DeliveryMode: amqp091.Persistent, Headers: amqp091.Table{"pub": pub, "seq": seq}, Body: []byte(pub)})
			if err != nil {
				break
			}
			pending = append(pending, sent{dc, at})
			for len(pending) >= 16 && err == nil {
				var ok bool
				ok, err = pending[0].dc.WaitContext(ctx)
				if err == nil && ok {
					h.confirmed(pub, int64(pending[0].dc.DeliveryTag-1), pending[0].at)
				}
				pending = pending[1:]
			}
		}
		c.Close()
	}
}

// qfConsume consumes from n with manual acks until ctx ends,
// reconnecting when its connection breaks.
func qfConsume(ctx context.Context, n *wnode, h *qfHistory) {
	for gen := 0; ctx.Err() == nil; gen++ {
		name := fmt.Sprintf("%s.%d", n.name, gen)
		c, err := amqp091.Dial(n.url())
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		ch, err := c.Channel()
		var ds <-chan amqp091.Delivery
		if err == nil {
			err = ch.Qos(32, 0, false)
		}
		if err == nil {
			ds, err = ch.Consume("qf", "", false, false, false, false, nil)
		}
		for err == nil {
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case d, ok := <-ds:
				if !ok {
					err = errors.New("deliveries ended")
					break
				}
				pub, _ := d.Headers["pub"].(string)
				seq, _ := d.Headers["seq"].(int64)
				h.delivered(qfDelivery{consumer: name, pub: pub, seq: seq, redelivered: d.Redelivered})
				err = d.Ack(false)
			}
		}
		c.Close()
	}
}

// queueLeader asks a running node which node leads the queue's group.
func queueLeader(nodes []*wnode, down *wnode, queue string) string {
	for _, n := range nodes {
		if n == down {
			continue
		}
		var q struct {
			Leader string `json:"leader"`
		}
		if _, err := n.api("GET", "/api/queues/%2F/"+queue, nil, &q); err == nil && q.Leader != "" {
			return q.Leader
		}
	}
	return ""
}

// checkQuorumHistory returns the lost, duplicated and reordered messages
// of a history.
func checkQuorumHistory(h *qfHistory) (lost, dup, reordered []string) {
	type key struct {
		pub string
		seq int64
	}
	got := map[key]int{}
	last := map[[2]string]int64{}
	for _, d := range h.deliveries {
		k := key{d.pub, d.seq}
		got[k]++
		if got[k] > 1 && !d.redelivered {
			dup = append(dup, fmt.Sprintf("%s/%d", d.pub, d.seq))
		}
		if d.redelivered {
			continue
		}
		ck := [2]string{d.consumer, d.pub}
		if prev, ok := last[ck]; ok && d.seq <= prev {
			reordered = append(reordered, fmt.Sprintf("%s/%d after %d at %s", d.pub, d.seq, prev, d.consumer))
		}
		last[ck] = d.seq
	}
	for _, c := range h.confirms {
		if got[key{c.pub, c.seq}] == 0 {
			lost = append(lost, fmt.Sprintf("%s/%d", c.pub, c.seq))
		}
	}
	return lost, dup, reordered
}

func TestCheckQuorumHistory(t *testing.T) {
	h := &qfHistory{
		confirms: []qfConfirm{{"a", 0, time.Time{}, time.Time{}}, {"a", 1, time.Time{}, time.Time{}}, {"a", 2, time.Time{}, time.Time{}}},
		deliveries: []qfDelivery{{"c", "a", 0, false}, {"c", "a", 2, false}, {"c", "a", 1, false},
			{"d", "a", 0, false}, {"d", "a", 2, true}},
	}
	lost, dup, reordered := checkQuorumHistory(h)
	if len(lost) != 0 || !slices.Equal(dup, []string{"a/0"}) || len(reordered) != 1 {
		t.Fatalf("lost %v dup %v reordered %v", lost, dup, reordered)
	}
	h.deliveries = h.deliveries[:1]
	if lost, _, _ := checkQuorumHistory(h); len(lost) != 2 {
		t.Fatalf("lost %v, want a/1 and a/2", lost)
	}
}

func TestClusterQuorumQueueFailover(t *testing.T) {
	kills, traffic := 3, 500
	if os.Getenv("WARREN_SOAK") != "" {
		kills, traffic = 20, 2000
	}
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3")
	r := qfStart(t, nodes)
	defer r.stop()
	for k := range kills {
		leader := r.leader()
		n := r.byName[leader]
		r.h.mu.Lock()
		r.h.kills = append(r.h.kills, time.Now())
		r.h.mu.Unlock()
		n.kill()
		t.Logf("kill %d: %s", k+1, leader)
		waitFor(t, "a new leader", func() bool {
			l := queueLeader(nodes, n, "qf")
			return l != "" && l != leader
		})
		n.start()
		waitForMembers(t, 3, nodes...)
		// Traffic goes on for a while before the next kill.
		r.traffic(traffic)
	}
	r.check()
}

// qfRun is a fault test under way: three nodes with publishers and
// consumers on each, and their history.
type qfRun struct {
	t       *testing.T
	nodes   []*wnode
	byName  map[string]*wnode
	h       *qfHistory
	stopPub func()
	stop    func()
}

// qfStart starts nodes, declares the quorum queue qf and starts a
// publisher and a consumer on every node; it returns once confirms come.
func qfStart(t *testing.T, nodes []*wnode) *qfRun {
	t.Helper()
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	declareQuorum(t, nodes[0], "qf", nil)
	waitSameDefinitions(t, nodes...)
	waitFor(t, "the queue's group has a leader", func() bool { return queueLeader(nodes, nil, "qf") != "" })

	r := &qfRun{t: t, nodes: nodes, byName: map[string]*wnode{}, h: &qfHistory{}}
	for _, n := range nodes {
		r.byName[n.name] = n
	}
	pubCtx, stopPub := context.WithCancel(context.Background())
	conCtx, stopCon := context.WithCancel(context.Background())
	var pubs, cons sync.WaitGroup
	for _, n := range nodes {
		cons.Add(1)
		pubs.Add(1)
		go func() { defer cons.Done(); qfConsume(conCtx, n, r.h) }()
		go func() { defer pubs.Done(); qfPublish(pubCtx, n, r.h) }()
	}
	r.stopPub = func() {
		stopPub()
		pubs.Wait()
	}
	r.stop = func() {
		r.stopPub()
		stopCon()
		cons.Wait()
	}
	waitFor(t, "confirms before the first fault", func() bool {
		r.h.mu.Lock()
		defer r.h.mu.Unlock()
		return len(r.h.confirms) > 100
	})
	return r
}

// leader waits for the queue's group leader and returns its name.
func (r *qfRun) leader() string {
	r.t.Helper()
	leader := ""
	waitFor(r.t, "the queue's group leader", func() bool {
		leader = queueLeader(r.nodes, nil, "qf")
		return r.byName[leader] != nil
	})
	return leader
}

// traffic waits for n more confirms.
func (r *qfRun) traffic(n int) {
	r.t.Helper()
	r.h.mu.Lock()
	before := len(r.h.confirms)
	r.h.mu.Unlock()
	waitFor(r.t, "confirms after the fault", func() bool {
		r.h.mu.Lock()
		defer r.h.mu.Unlock()
		return len(r.h.confirms) >= before+n
	})
}

// firstConfirms returns, for each of times, how long after it the first
// confirm of a publish sent after it came.
func (h *qfHistory) firstConfirms(times []time.Time) []time.Duration {
	var out []time.Duration
	for _, kt := range times {
		first := time.Duration(-1)
		for _, c := range h.confirms {
			if d := c.at.Sub(kt); c.sent.After(kt) && (first < 0 || d < first) {
				first = d
			}
		}
		if first >= 0 {
			out = append(out, first)
		}
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	if len(sorted) == 0 {
		return 0
	}
	return sorted[len(sorted)/2]
}

// check stops the publishers, lets the consumers drain the queue, stops
// them and reports the history: lost, duplicated and reordered messages
// fail the test.
func (r *qfRun) check() {
	t, h := r.t, r.h
	t.Helper()
	r.stopPub()
	// (A poll, as waitFor's, that goes on to the report when it gives up.)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		h.mu.Lock()
		lost, _, _ := checkQuorumHistory(h)
		h.mu.Unlock()
		if len(lost) == 0 {
			break
		}
	}
	// Every delivery is settled in the end: none stays held by a
	// consumer whose acks were lost, or by one that is gone.
	var left struct {
		Messages int `json:"messages"`
	}
	waitFor(t, "the queue empty on every node", func() bool {
		for _, n := range r.nodes {
			if _, err := n.api("GET", "/api/queues/%2F/qf", nil, &left); err != nil || left.Messages != 0 {
				return false
			}
		}
		return true
	})
	r.stop()
	lost, dup, reordered := checkQuorumHistory(h)
	// A kill's failover time: from the kill to the first confirm of a
	// publish sent after it; a partition's likewise, from the cut.
	failovers := h.firstConfirms(h.kills)
	cuts := h.firstConfirms(h.cuts)
	t.Logf("%d kills, %d partitions, %d confirmed, %d deliveries (%d redelivered); lost %d, duplicated %d, reordered %d; failover per kill %v, median %v; per partition %v, median %v",
		len(h.kills), len(h.cuts), len(h.confirms), len(h.deliveries), countRedelivered(h), len(lost), len(dup), len(reordered),
		failovers, median(failovers), cuts, median(cuts))
	if len(lost) > 0 {
		t.Errorf("lost: %v", head(lost))
	}
	if len(dup) > 0 {
		t.Errorf("duplicated: %v", head(dup))
	}
	if len(reordered) > 0 {
		t.Errorf("reordered: %v", head(reordered))
	}
}

// TestClusterQuorumQueuePartition: the fault test with partitions and a
// graceful restart. With publishers and consumers on every node, the
// node leading the queue's group is cut off from the others (iptables on
// 127.0.0.2-4) and healed, then a follower, then the leader's node is
// stopped with SIGTERM and started again (and, in the soak, the leader
// SIGKILLed). Clients on a
// cut-off node get no confirm (their publishes time out as nacks, or their
// connection breaks) and the checker counts only confirmed publishes: a
// message confirmed is never lost, whichever node confirmed it; the
// consumers of the cut-off node have their deliveries returned by the
// majority and, once healed, are fed again.
func TestClusterQuorumQueuePartition(t *testing.T) {
	needIptables(t)
	rounds, traffic, kill := 1, 200, false
	if os.Getenv("WARREN_SOAK") != "" {
		rounds, traffic, kill = 5, 2000, true
	}
	nodes := threeNodes(t, [3]string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}, "--quorum-groups", "3")
	r := qfStart(t, nodes)
	defer r.stop()
	others := func(n *wnode) []string {
		var ips []string
		for _, o := range nodes {
			if o != n {
				ips = append(ips, o.ip)
			}
		}
		return ips
	}
	// returned counts the log lines of the nodes' leaders returning what
	// n's consumers held.
	returned := func(n *wnode) int {
		c := 0
		for _, o := range nodes {
			for _, l := range strings.Split(o.logs.String(), "\n") {
				if strings.Contains(l, "returning the deliveries of a node that is gone") && strings.Contains(l, `"peer":"`+n.name+`"`) {
					c++
				}
			}
		}
		return c
	}
	cut := func(n *wnode, what string) {
		before := returned(n)
		heal := cutOff(t, n.ip, others(n)...)
		at := time.Now()
		r.h.mu.Lock()
		r.h.cuts = append(r.h.cuts, at)
		r.h.mu.Unlock()
		t.Logf("%s %s cut off", what, n.name)
		waitFor(t, "a leader on the majority side", func() bool {
			l := queueLeader(nodes, n, "qf")
			return l != "" && l != n.name
		})
		r.traffic(traffic)
		// Long enough for the majority to return what the cut-off
		// node's consumer held: its session ends within 11 s (pings
		// every second, unanswered for 10 s), and the group's leader
		// returns its consumers' deliveries 3 s after that.
		waitFor(t, "the cut-off node's deliveries returned", func() bool { return returned(n) > before })
		time.Sleep(time.Until(at.Add(5 * time.Second)))
		heal()
		healed := time.Now()
		waitForMembers(t, 3, nodes...)
		r.traffic(traffic)
		// Every node's consumer is fed again, the cut-off one's too.
		for _, o := range nodes {
			waitFor(t, o.name+"'s consumer fed after the heal", func() bool { return r.h.fedSince(o.name, healed) })
		}
	}
	for range rounds {
		cut(r.byName[r.leader()], "leader")
		leader := r.leader()
		for _, n := range nodes {
			if n.name != leader {
				cut(n, "follower")
				break
			}
		}
		// A graceful restart of the leader's node.
		n := r.byName[r.leader()]
		n.stop()
		t.Logf("%s stopped", n.name)
		r.traffic(traffic / 5)
		n.start()
		waitForMembers(t, 3, nodes...)
		r.traffic(traffic)
		if !kill {
			continue // TestClusterQuorumQueueFailover kills
		}
		n = r.byName[r.leader()]
		r.h.mu.Lock()
		r.h.kills = append(r.h.kills, time.Now())
		r.h.mu.Unlock()
		n.kill()
		t.Logf("%s killed", n.name)
		waitFor(t, "a new leader", func() bool {
			l := queueLeader(nodes, n, "qf")
			return l != "" && l != n.name
		})
		n.start()
		waitForMembers(t, 3, nodes...)
		r.traffic(traffic)
	}
	r.check()
}

func countRedelivered(h *qfHistory) int {
	n := 0
	for _, d := range h.deliveries {
		if d.redelivered {
			n++
		}
	}
	return n
}

func head(s []string) []string { return s[:min(len(s), 10)] }
