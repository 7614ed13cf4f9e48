package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
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
}

func (h *qfHistory) confirmed(pub string, seq int64, sent time.Time) {
	h.mu.Lock()
	h.confirms = append(h.confirms, qfConfirm{pub, seq, sent, time.Now()})
	h.mu.Unlock()
}

func (h *qfHistory) delivered(d qfDelivery) {
	h.mu.Lock()
	h.deliveries = append(h.deliveries, d)
	h.mu.Unlock()
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
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	declareQuorum(t, nodes[0], "qf", nil)
	waitSameDefinitions(t, nodes...)
	waitFor(t, "the queue's group has a leader", func() bool { return queueLeader(nodes, nil, "qf") != "" })

	h := &qfHistory{}
	pubCtx, stopPub := context.WithCancel(context.Background())
	conCtx, stopCon := context.WithCancel(context.Background())
	var pubs, cons sync.WaitGroup
	for _, n := range nodes {
		cons.Add(1)
		pubs.Add(1)
		go func() { defer cons.Done(); qfConsume(conCtx, n, h) }()
		go func() { defer pubs.Done(); qfPublish(pubCtx, n, h) }()
	}
	stop := func() {
		stopPub()
		pubs.Wait()
		stopCon()
		cons.Wait()
	}
	defer stop()
	waitFor(t, "confirms before the first kill", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.confirms) > 100
	})
	byName := map[string]*wnode{}
	for _, n := range nodes {
		byName[n.name] = n
	}
	for k := range kills {
		leader := ""
		waitFor(t, "the queue's group leader", func() bool {
			leader = queueLeader(nodes, nil, "qf")
			return byName[leader] != nil
		})
		n := byName[leader]
		h.mu.Lock()
		h.kills = append(h.kills, time.Now())
		h.mu.Unlock()
		n.kill()
		t.Logf("kill %d: %s", k+1, leader)
		waitFor(t, "a new leader", func() bool {
			l := queueLeader(nodes, n, "qf")
			return l != "" && l != leader
		})
		n.start()
		waitForMembers(t, 3, nodes...)
		// Traffic goes on for a while before the next kill.
		h.mu.Lock()
		before := len(h.confirms)
		h.mu.Unlock()
		waitFor(t, "confirms after the restart", func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return len(h.confirms) >= before+traffic
		})
	}
	// Stop publishing; the consumers drain the queue.
	stopPub()
	pubs.Wait()
	// (A poll, as waitFor's, that goes on to the report when it gives up.)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		h.mu.Lock()
		lost, _, _ := checkQuorumHistory(h)
		h.mu.Unlock()
		if len(lost) == 0 {
			break
		}
	}
	stopCon()
	cons.Wait()
	lost, dup, reordered := checkQuorumHistory(h)
	// A kill's failover time: from the kill to the first confirm of a
	// publish sent after it.
	var failovers []time.Duration
	for _, kt := range h.kills {
		first := time.Duration(-1)
		for _, c := range h.confirms {
			if d := c.at.Sub(kt); c.sent.After(kt) && (first < 0 || d < first) {
				first = d
			}
		}
		if first >= 0 {
			failovers = append(failovers, first)
		}
	}
	sorted := slices.Clone(failovers)
	slices.Sort(sorted)
	var median time.Duration
	if len(sorted) > 0 {
		median = sorted[len(sorted)/2]
	}
	t.Logf("%d kills, %d confirmed, %d deliveries (%d redelivered); lost %d, duplicated %d, reordered %d; failover per kill %v, median %v",
		len(h.kills), len(h.confirms), len(h.deliveries), countRedelivered(h), len(lost), len(dup), len(reordered), failovers, median)
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
