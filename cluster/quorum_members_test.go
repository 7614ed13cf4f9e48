package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Tests of the membership verbs of replicated queues (delete_member,
// add_member) on real warren processes.

// memberPublisher publishes with confirms through one node, a window of
// messages at a time, until stopped; it records what was published and
// what was confirmed.
type memberPublisher struct {
	pub  string
	mu   sync.Mutex
	sent int
	acks []int64
	err  error
}

func (p *memberPublisher) confirmed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acks)
}

func (p *memberPublisher) run(ctx context.Context, ch *amqp091.Channel, queue string) {
	fail := func(err error) {
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
	}
	if err := ch.Confirm(false); err != nil {
		fail(err)
		return
	}
	const window = 20
	seq := 0
	for ctx.Err() == nil {
		confs := make([]*amqp091.DeferredConfirmation, 0, window)
		first := seq
		for range window {
			c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false, amqp091.Publishing{
				DeliveryMode: amqp091.Persistent,
				Headers:      amqp091.Table{"pub": p.pub, "seq": int64(seq)},
				Body:         []byte(fmt.Sprintf("%s-%d", p.pub, seq)),
			})
			if err != nil {
				fail(fmt.Errorf("%s: publish %d: %w", p.pub, seq, err))
				return
			}
			seq++
			confs = append(confs, c)
		}
		p.mu.Lock()
		p.sent = seq
		p.mu.Unlock()
		for i, c := range confs {
			wctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			ok, err := c.WaitContext(wctx)
			cancel()
			if err != nil {
				fail(fmt.Errorf("%s: confirm %d: %w", p.pub, first+i, err))
				return
			}
			if ok {
				p.mu.Lock()
				p.acks = append(p.acks, int64(first+i))
				p.mu.Unlock()
			}
		}
	}
}

// queueMembers reads a quorum queue's members, online members and leader
// from n's management API.
func queueMembers(t *testing.T, n *wnode, queue string) (members, online []string, leader string) {
	t.Helper()
	var q struct {
		Members []string `json:"members"`
		Online  []string `json:"online"`
		Leader  string   `json:"leader"`
	}
	if code, err := n.api("GET", "/api/queues/%2F/"+queue, nil, &q); err != nil || code != 200 {
		t.Fatalf("GET queue %s on %s: %d %v", queue, n.name, code, err)
	}
	slices.Sort(q.Members)
	slices.Sort(q.Online)
	return q.Members, q.Online, q.Leader
}

// groupsPlan reads the data groups' plan from n.
func groupsPlan(t *testing.T, n *wnode) []struct {
	ID      uint64 `json:"id"`
	Members []struct {
		Name string `json:"name"`
	} `json:"members"`
	Leaving []struct {
		Name string `json:"name"`
	} `json:"leaving"`
} {
	t.Helper()
	var p struct {
		Value json.RawMessage `json:"value"`
	}
	if code, err := n.api("GET", "/api/global-parameters/warren_data_groups", nil, &p); err != nil || code != 200 {
		t.Fatalf("GET plan on %s: %d %v", n.name, code, err)
	}
	var plan []struct {
		ID      uint64 `json:"id"`
		Members []struct {
			Name string `json:"name"`
		} `json:"members"`
		Leaving []struct {
			Name string `json:"name"`
		} `json:"leaving"`
	}
	if err := json.Unmarshal(p.Value, &plan); err != nil {
		var s string // the value may be stored as a JSON string
		if err2 := json.Unmarshal(p.Value, &s); err2 != nil || json.Unmarshal([]byte(s), &plan) != nil {
			t.Fatalf("plan on %s: %s: %v", n.name, p.Value, err)
		}
	}
	return plan
}

// TestClusterQuorumMembersChange: publishers with confirms on every node
// run while n3 is removed from the queue's data group (delete_member) and
// added back (add_member); every confirmed message is consumed, once,
// and the management API shows the members as changed. Publishes through
// n3 while it is not a member go to a member over the node link. In
// "leader", n3 leads the group when it is removed (the queue was declared
// on n3, client-local: a group n3 is the preferred leader of), so it hands
// the leadership over first.
func TestClusterQuorumMembersChange(t *testing.T) {
	t.Run("follower", func(t *testing.T) { testMembersChange(t, 0) })
	t.Run("leader", func(t *testing.T) { testMembersChange(t, 2) })
}

func testMembersChange(t *testing.T, declareOn int) {
	// Snapshots early, few entries kept behind them: n3, added back
	// with no state, catches up from the group's snapshot.
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3",
		"--cluster-snapshot-threshold", "64", "--cluster-trailing-logs", "16")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	declareQuorum(t, nodes[declareOn], "qm", nil)
	// A stream declared through the same node lands in the same data
	// group (client-local: the group that node is the preferred leader
	// of), so it loses and regains n3's replica with qm.
	declareStream(t, nodes[declareOn], "sm")
	waitSameDefinitions(t, nodes...)
	leader := nodes[declareOn].name
	waitFor(t, "qm led by "+leader, func() bool {
		_, _, l := queueMembers(t, nodes[0], "qm")
		return l == leader
	})

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	pubs := make([]*memberPublisher, len(nodes))
	for i, n := range nodes {
		_, ch := dial(t, n)
		pubs[i] = &memberPublisher{pub: "p-" + n.name}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pubs[i].run(ctx, ch, "qm")
		}()
	}
	// progress waits until every publisher has more messages confirmed
	// than at the call.
	progress := func(what string) {
		t.Helper()
		at := make([]int, len(pubs))
		for i, p := range pubs {
			at[i] = p.confirmed()
		}
		for i, p := range pubs {
			waitFor(t, p.pub+" confirms "+what, func() bool {
				p.mu.Lock()
				err := p.err
				p.mu.Unlock()
				if err != nil {
					t.Fatal(err)
				}
				return p.confirmed() > at[i]+40
			})
		}
	}
	progress("before the change")

	var mc struct {
		Group   uint64   `json:"group"`
		Members []string `json:"members"`
	}
	// delete_member through warren ctl on n2.
	out, err := exec.Command(warrenBinary(t), "ctl", "delete_member", "--url", "http://"+nodes[1].httpAddr(), "qm", "n3").CombinedOutput()
	if err != nil {
		t.Fatalf("warren ctl delete_member: %v\n%s", err, out)
	}
	if _, err := fmt.Sscanf(string(out), "data group %d", &mc.Group); err != nil || !strings.Contains(string(out), "members [n1 n2]") && !strings.Contains(string(out), "members [n2 n1]") {
		t.Fatalf("warren ctl delete_member printed %q", out)
	}
	progress("while n3 leaves")
	waitFor(t, "n3's removal committed", func() bool {
		for _, g := range groupsPlan(t, nodes[0]) {
			if g.ID == mc.Group && len(g.Leaving) == 0 {
				return true
			}
		}
		return false
	})
	for _, n := range nodes[:2] {
		waitFor(t, n.name+" shows qm's members without n3", func() bool {
			m, on, leader := queueMembers(t, n, "qm")
			return slices.Equal(m, []string{"n1", "n2"}) && slices.Equal(on, m) && slices.Contains(m, leader)
		})
	}
	progress("with n3 removed")
	// n3, with no replica of qm now, serves its clients on qm all the
	// same, through a member over the node link: queue.declare's counts,
	// basic.get, consumers.
	via := consumeThroughNonMember(t, nodes[2], "qm")
	// Publishes to the stream through n3 go to a member; its consumers
	// are refused there (a stream is read from a local replica).
	_, sch := dial(t, nodes[2])
	smAcked := linkPublish(t, sch, "s-n3", "", "sm", 50, false)
	if len(smAcked) != 50 {
		t.Fatalf("%d of 50 publishes to the stream through n3 confirmed", len(smAcked))
	}
	if err := sch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	_, err = sch.Consume("sm", "", false, false, false, false, nil)
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.PreconditionFailed || !strings.Contains(ae.Reason, "does not have a running replica on the local node") {
		t.Fatalf("consuming the stream through n3, not a member: %v", err)
	}
	// Raft snapshots every 10–20 s when over the threshold: publishing
	// goes on long enough for the group to have compacted its log.
	for at := time.Now(); time.Since(at) < 21*time.Second; {
		progress("with n3 removed")
	}

	if code, err := nodes[2].api("POST", "/api/queues/%2F/qm/members", map[string]string{"node": "n3"}, &mc); err != nil || code != 200 {
		t.Fatalf("add_member: %d %v", code, err)
	}
	if len(mc.Members) != 3 {
		t.Fatalf("add_member answered members %v", mc.Members)
	}
	for _, n := range nodes {
		waitFor(t, n.name+" shows qm's members with n3", func() bool {
			m, on, leader := queueMembers(t, n, "qm")
			return slices.Equal(m, []string{"n1", "n2", "n3"}) && slices.Equal(on, m) && slices.Contains(m, leader)
		})
	}
	progress("with n3 back")
	stop()
	wg.Wait()
	// rebalance, the publishers stopped (a group hands its leadership
	// back once it has applied nothing for a second): every group holding
	// queues is led by its preferred member once rebalance answers.
	out, err = exec.Command(warrenBinary(t), "ctl", "rebalance", "--url", "http://"+nodes[2].httpAddr(), "quorum").CombinedOutput()
	if err != nil {
		t.Fatalf("warren ctl rebalance: %v\n%s", err, out)
	}
	m := regexp.MustCompile(fmt.Sprintf(`data group %d: leader "(\w*)" \(preferred "(\w*)"\), (\d+) queues`, mc.Group)).FindStringSubmatch(string(out))
	if m == nil || m[1] == "" || m[1] != m[2] || m[3] == "0" || !strings.Contains(string(out), "groups led") {
		t.Fatalf("warren ctl rebalance printed %q", out)
	}

	confirmed := map[string][]int64{}
	published := map[string]int{}
	want := 0
	for _, p := range pubs {
		if p.err != nil {
			t.Fatal(p.err)
		}
		confirmed[p.pub], published[p.pub] = p.acks, p.sent
		want += len(p.acks)
		t.Logf("%s: %d published, %d confirmed", p.pub, p.sent, len(p.acks))
	}
	// Every confirmed message, consumed through n3, now a member again
	// (its replica caught up from the group).
	wanted := map[string]bool{}
	for pub, acks := range confirmed {
		for _, s := range acks {
			wanted[fmt.Sprint(pub, "/", s)] = true
		}
	}
	found, read := 0, 0
	for _, r := range via {
		if k := fmt.Sprint(r.pub, "/", r.seq); wanted[k] {
			delete(wanted, k)
			found++
		}
	}
	got := consumeUntil(t, nodes[2], "qm", 200, func(rs []linkRecord) bool {
		for ; read < len(rs); read++ {
			k := fmt.Sprint(rs[read].pub, "/", rs[read].seq)
			if wanted[k] {
				delete(wanted, k)
				found++
			}
		}
		return found == want
	})
	got = append(got, via...)
	if err := checkSet(confirmed, published, got); err != nil {
		t.Fatal(err)
	}
	// The stream, read from its first offset through n3 (a member again):
	// the 50 published through n3 while it was not, in order.
	for i, r := range readStream(t, nodes[2], "sm", "", "first", 50) {
		if r.pub != "s-n3" || r.seq != int64(i) || r.off != int64(i) {
			t.Fatalf("stream sm read through n3: message %d is %s/%d at offset %d", i, r.pub, r.seq, r.off)
		}
	}
	if os.Getenv("WARREN_TEST_LOGS") != "" {
		for _, n := range nodes {
			t.Logf("%s output:\n%s", n.name, n.logs.String())
		}
	}
}

// consumeThroughNonMember uses queue q through n, which is not a member of
// q's data group: queue.declare (passive) and the management API count its
// messages, basic.get
// takes one (acked) and another (rejected, requeued), a consumer with
// manual acks takes 100 and acks them, then its channel closes with some
// deliveries unacked (they go back to the queue). It returns what was
// acked.
func consumeThroughNonMember(t *testing.T, n *wnode, q string) []linkRecord {
	t.Helper()
	_, ch := dial(t, n)
	dq, err := ch.QueueDeclarePassive(q, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"})
	if err != nil {
		t.Fatalf("queue.declare through %s: %v", n.name, err)
	}
	if dq.Messages == 0 {
		t.Fatalf("queue.declare through %s counts no messages in %s", n.name, q)
	}
	var qi struct {
		Ready int `json:"messages_ready"`
	}
	if code, err := n.api("GET", "/api/queues/%2F/"+q, nil, &qi); err != nil || code != 200 || qi.Ready == 0 {
		t.Fatalf("GET queue %s on %s: %d %v, %d messages ready", q, n.name, code, err, qi.Ready)
	}
	var got []linkRecord
	d, ok, err := ch.Get(q, false)
	if err != nil || !ok {
		t.Fatalf("basic.get through %s: %v %v", n.name, ok, err)
	}
	got = append(got, recordOf(d))
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	if d, ok, err = ch.Get(q, false); err != nil || !ok {
		t.Fatalf("second basic.get through %s: %v %v", n.name, ok, err)
	}
	if err := d.Reject(true); err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(20, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q, "via", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("basic.consume through %s: %v", n.name, err)
	}
	timeout := time.After(30 * time.Second)
	for len(got) < 101 {
		select {
		case d, ok := <-ds:
			if !ok {
				t.Fatalf("consumer through %s ended after %d messages", n.name, len(got))
			}
			got = append(got, recordOf(d))
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatalf("consumer through %s got %d messages in 30s", n.name, len(got))
		}
	}
	// Some more delivered, never acked: back to the queue when the
	// channel closes.
	for range 5 {
		select {
		case <-ds:
		case <-timeout:
			t.Fatalf("consumer through %s stalled", n.name)
		}
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	return got
}
