package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Tests of streams replicated in data groups, on real warren processes.
//
// The fault test: publishers with confirms on every node, one named
// consumer per node reading from the first offset (acking each delivery,
// so its offset is stored) and one reading at the tail, while the node leading the stream's data group
// is SIGKILLed again and again (and restarted each time). A consumer whose
// connection breaks comes back through the next node, by name only, and
// must resume from its stored offset: at or after the offset the node
// reported stored before it reconnected, and with no gap after what it had
// read. The checker: every confirmed message read by every consumer,
// every offset read as the same message by every consumer, the tail
// readers too (replicas hold the same offsets). The failover time of each kill (the kill to the next
// confirm of a publish sent after it) is logged. WARREN_SOAK=1 runs the
// long version.

// sfRead is one delivery: the consumer, its generation, the offset and
// the message.
type sfRead struct {
	consumer string
	gen      int
	off      int64
	pub      string
	seq      int64
}

// sfResume is a consumer's reconnection: the offset the node reported
// stored for its name just before, and the first offset it then read.
type sfResume struct {
	consumer    string
	gen         int
	stored      int64 // -1: none stored
	first       int64 // -1: nothing read
	readBefore  int64 // highest offset read before (-1: none)
	reconnected string
}

type sfHistory struct {
	mu       sync.Mutex
	confirms []qfConfirm
	reads    []sfRead
	resumes  []sfResume
	kills    []time.Time
	cuts     []time.Time
}

// declareStream declares a stream through n, retrying while the data
// groups elect their leaders.
func declareStream(t *testing.T, n *wnode, name string) {
	t.Helper()
	var last error
	waitFor(t, "stream "+name+" declared", func() bool {
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
		_, last = ch.QueueDeclare(name, true, false, false, false, amqp091.Table{"x-queue-type": "stream"})
		return last == nil
	})
}

// sfPublish publishes to queue through n until ctx ends, 16 confirms
// outstanding, reconnecting (as a new publisher name) when its connection
// breaks.
func sfPublish(ctx context.Context, n *wnode, queue string, h *sfHistory) {
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
			dc, err = ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp091.Publishing{
				DeliveryMode: amqp091.Persistent, Headers: amqp091.Table{"pub": pub, "seq": seq}, Body: []byte(pub)})
			if err != nil {
				break
			}
			pending = append(pending, sent{dc, at})
			for len(pending) >= 16 && err == nil {
				var ok bool
				ok, err = pending[0].dc.WaitContext(ctx)
				if err == nil && ok {
					h.mu.Lock()
					h.confirms = append(h.confirms, qfConfirm{pub, int64(pending[0].dc.DeliveryTag - 1), pending[0].at, time.Now()})
					h.mu.Unlock()
				}
				pending = pending[1:]
			}
		}
		c.Close()
	}
}

// storedOffset asks n for the offset stored for consumer name of queue
// (-1: none).
func storedOffset(n *wnode, queue, name string) (int64, error) {
	var q struct {
		Stream *struct {
			Named []struct {
				Name   string `json:"name"`
				Offset int64  `json:"offset"`
			} `json:"consumers"`
		} `json:"stream"`
	}
	if _, err := n.api("GET", "/api/queues/%2F/"+queue, nil, &q); err != nil {
		return 0, err
	}
	if q.Stream == nil {
		return 0, errors.New("no stream record")
	}
	for _, c := range q.Stream.Named {
		if c.Name == name {
			return c.Offset, nil
		}
	}
	return -1, nil
}

// sfConsume is the named consumer name: its first generation reads from
// the first offset through nodes[start]; each later one through the next
// node, by name only (resuming from the stored offset). A name starting
// with "tail-" is an unnamed consumer reading from the end instead, each
// generation. It acks every delivery.
func sfConsume(ctx context.Context, nodes []*wnode, start int, queue, name string, h *sfHistory) {
	readBefore := int64(-1)
	for gen := 0; ctx.Err() == nil; gen++ {
		n := nodes[(start+gen)%len(nodes)]
		res := sfResume{consumer: name, gen: gen, stored: -1, first: -1, readBefore: readBefore, reconnected: n.name}
		args := amqp091.Table{"x-stream-consumer-name": name}
		tail := strings.HasPrefix(name, "tail-")
		if tail {
			// A tail reader: no name, from the end each time.
			args = amqp091.Table{"x-stream-offset": "next"}
		} else if gen == 0 {
			args["x-stream-offset"] = "first"
		} else {
			stored, err := storedOffset(n, queue, name)
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			res.stored = stored
		}
		c, err := amqp091.Dial(n.url())
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			gen-- // the same generation through the next node
			start++
			continue
		}
		ch, err := c.Channel()
		var ds <-chan amqp091.Delivery
		if err == nil {
			err = ch.Qos(64, 0, false)
		}
		if err == nil {
			ds, err = ch.Consume(queue, "", false, false, false, false, args)
		}
		recorded := false
		for err == nil {
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case d, ok := <-ds:
				if !ok {
					err = errors.New("deliveries ended")
					break
				}
				off, _ := d.Headers["x-stream-offset"].(int64)
				pub, _ := d.Headers["pub"].(string)
				seq, _ := d.Headers["seq"].(int64)
				h.mu.Lock()
				if !recorded && gen > 0 && !tail {
					res.first = off
					h.resumes = append(h.resumes, res)
					recorded = true
				}
				h.reads = append(h.reads, sfRead{consumer: name, gen: gen, off: off, pub: pub, seq: seq})
				h.mu.Unlock()
				readBefore = max(readBefore, off)
				err = d.Ack(false)
			}
		}
		c.Close()
	}
}

// checkStreamHistory returns what is wrong with a history: confirmed
// messages some consumer never read, offsets read as different messages,
// resumptions that skipped or went back past the stored offset.
func checkStreamHistory(h *sfHistory, consumers []string) (missing, mismatched, badResume []string) {
	type msg struct {
		pub string
		seq int64
	}
	at := map[int64]msg{}
	read := map[string]map[msg]bool{}
	for _, c := range consumers {
		read[c] = map[msg]bool{}
	}
	for _, r := range h.reads {
		m := msg{r.pub, r.seq}
		if prev, ok := at[r.off]; ok && prev != m {
			mismatched = append(mismatched, fmt.Sprintf("offset %d: %s/%d and %s/%d (%s)", r.off, prev.pub, prev.seq, m.pub, m.seq, r.consumer))
		}
		at[r.off] = m
		if read[r.consumer] != nil {
			read[r.consumer][m] = true
		}
	}
	for _, c := range consumers {
		for _, cf := range h.confirms {
			if !read[c][msg{cf.pub, cf.seq}] {
				missing = append(missing, fmt.Sprintf("%s never read %s/%d", c, cf.pub, cf.seq))
			}
		}
	}
	for _, r := range h.resumes {
		if r.first < 0 {
			continue
		}
		if r.first > r.readBefore+1 || (r.stored >= 0 && r.first < r.stored+1) {
			badResume = append(badResume, fmt.Sprintf("%s gen %d through %s: stored %d, read up to %d before, resumed at %d",
				r.consumer, r.gen, r.reconnected, r.stored, r.readBefore, r.first))
		}
	}
	return missing, mismatched, badResume
}

func TestCheckStreamHistory(t *testing.T) {
	h := &sfHistory{
		confirms: []qfConfirm{{pub: "p", seq: 0}, {pub: "p", seq: 1}},
		reads: []sfRead{{consumer: "a", off: 0, pub: "p", seq: 0}, {consumer: "a", off: 1, pub: "p", seq: 1},
			{consumer: "b", off: 0, pub: "p", seq: 0}, {consumer: "b", gen: 1, off: 1, pub: "p", seq: 0}},
		resumes: []sfResume{{consumer: "b", gen: 1, stored: 0, first: 1, readBefore: 0}, {consumer: "a", gen: 1, stored: 5, first: 3, readBefore: 9}},
	}
	missing, mismatched, bad := checkStreamHistory(h, []string{"a", "b"})
	if len(missing) != 1 || len(mismatched) != 1 || len(bad) != 1 {
		t.Fatalf("missing %v, mismatched %v, bad resumes %v", missing, mismatched, bad)
	}
}

func TestClusterStreamFailover(t *testing.T) {
	kills, traffic := 3, 500
	if os.Getenv("WARREN_SOAK") != "" {
		kills, traffic = 20, 2000
	}
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3")
	r := sfStart(t, nodes)
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
			l := queueLeader(nodes, n, "sf")
			return l != "" && l != leader
		})
		n.start()
		waitForMembers(t, 3, nodes...)
		r.traffic(traffic)
	}
	r.check()
}

// sfRun is a running stream fault test: three nodes, a stream "sf",
// publishers and consumers on every node (sfStart).
type sfRun struct {
	t          *testing.T
	nodes      []*wnode
	byName     map[string]*wnode
	h          *sfHistory
	names      []string
	stopPub    context.CancelFunc
	stopCon    context.CancelFunc
	pubs, cons sync.WaitGroup
	stopped    bool
}

// sfStart starts the cluster of nodes, declares the stream and starts
// its clients: per node a publisher, a named consumer reading from the
// first offset and a tail reader; it returns once 100 publishes are
// confirmed.
func sfStart(t *testing.T, nodes []*wnode) *sfRun {
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	declareStream(t, nodes[0], "sf")
	waitSameDefinitions(t, nodes...)
	waitFor(t, "the stream's group has a leader", func() bool { return queueLeader(nodes, nil, "sf") != "" })
	r := &sfRun{t: t, nodes: nodes, byName: map[string]*wnode{}, h: &sfHistory{}}
	for _, n := range nodes {
		r.byName[n.name] = n
	}
	pubCtx, stopPub := context.WithCancel(context.Background())
	conCtx, stopCon := context.WithCancel(context.Background())
	r.stopPub, r.stopCon = stopPub, stopCon
	for i, n := range nodes {
		name := "c-" + n.name
		r.names = append(r.names, name)
		r.cons.Add(2)
		r.pubs.Add(1)
		go func() { defer r.cons.Done(); sfConsume(conCtx, nodes, i, "sf", name, r.h) }()
		go func() { defer r.cons.Done(); sfConsume(conCtx, nodes, i+1, "sf", "tail-"+n.name, r.h) }()
		go func() { defer r.pubs.Done(); sfPublish(pubCtx, n, "sf", r.h) }()
	}
	waitFor(t, "confirms before the first fault", func() bool {
		r.h.mu.Lock()
		defer r.h.mu.Unlock()
		return len(r.h.confirms) > 100
	})
	return r
}

// stop ends the clients (once).
func (r *sfRun) stop() {
	if r.stopped {
		return
	}
	r.stopped = true
	r.stopPub()
	r.pubs.Wait()
	r.stopCon()
	r.cons.Wait()
}

// leader waits for the stream's group leader and returns its name.
func (r *sfRun) leader() string {
	leader := ""
	waitFor(r.t, "the stream's group leader", func() bool {
		leader = queueLeader(r.nodes, nil, "sf")
		return r.byName[leader] != nil
	})
	return leader
}

// traffic waits for n more confirms.
func (r *sfRun) traffic(n int) {
	r.h.mu.Lock()
	before := len(r.h.confirms)
	r.h.mu.Unlock()
	waitFor(r.t, "confirms after the fault", func() bool {
		r.h.mu.Lock()
		defer r.h.mu.Unlock()
		return len(r.h.confirms) >= before+n
	})
}

// firstConfirms is, for each of times, how long after it the first
// confirm of a publish sent after it came.
func (h *sfHistory) firstConfirms(times []time.Time) []time.Duration {
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

// check stops publishing, lets the consumers read to the end, stops them
// and checks the history.
func (r *sfRun) check() {
	t, h := r.t, r.h
	r.stopPub()
	r.pubs.Wait()
	// The consumers read to the end (a poll that goes on to the report
	// when it gives up).
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		h.mu.Lock()
		missing, _, _ := checkStreamHistory(h, r.names)
		h.mu.Unlock()
		if len(missing) == 0 {
			break
		}
	}
	r.stop()
	missing, mismatched, badResume := checkStreamHistory(h, r.names)
	failovers := h.firstConfirms(h.kills)
	cuts := h.firstConfirms(h.cuts)
	t.Logf("%d kills, %d partitions, %d confirmed, %d reads, %d resumptions; missing %d, mismatched offsets %d, bad resumptions %d; failover per kill %v, median %v; per partition %v, median %v",
		len(h.kills), len(h.cuts), len(h.confirms), len(h.reads), len(h.resumes), len(missing), len(mismatched), len(badResume),
		failovers, median(failovers), cuts, median(cuts))
	if len(missing) > 0 {
		t.Errorf("missing: %v", head(missing))
	}
	if len(mismatched) > 0 {
		t.Errorf("mismatched: %v", head(mismatched))
	}
	if len(badResume) > 0 {
		t.Errorf("bad resumptions: %v", head(badResume))
	}
}

// TestClusterStreamPartition: the stream fault test with partitions. With
// publishers and named and tail consumers on every node, the node leading
// the stream's group is cut off from the others (iptables on 127.0.0.2-4)
// and healed, then a follower (and, in the soak, the leader SIGKILLed
// too). Clients of a cut-off node get no confirm and its consumers wait
// at its replica's committed offset; once healed the replica catches up
// and they go on. The checker is the fault test's: no confirmed message
// missing for any named consumer, every offset the same message on every
// replica, resumptions at the stored offsets.
func TestClusterStreamPartition(t *testing.T) {
	needIptables(t)
	rounds, traffic, kill := 1, 300, false
	if os.Getenv("WARREN_SOAK") != "" {
		rounds, traffic, kill = 5, 2000, true
	}
	nodes := threeNodes(t, [3]string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}, "--quorum-groups", "3")
	r := sfStart(t, nodes)
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
	cut := func(n *wnode, what string) {
		heal := cutOff(t, n.ip, others(n)...)
		at := time.Now()
		r.h.mu.Lock()
		r.h.cuts = append(r.h.cuts, at)
		r.h.mu.Unlock()
		t.Logf("%s %s cut off", what, n.name)
		waitFor(t, "a leader on the majority side", func() bool {
			l := queueLeader(nodes, n, "sf")
			return l != "" && l != n.name
		})
		r.traffic(traffic)
		time.Sleep(time.Until(at.Add(5 * time.Second)))
		heal()
		waitForMembers(t, 3, nodes...)
		r.traffic(traffic)
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
		if !kill {
			continue
		}
		n := r.byName[r.leader()]
		r.h.mu.Lock()
		r.h.kills = append(r.h.kills, time.Now())
		r.h.mu.Unlock()
		n.kill()
		t.Logf("%s killed", n.name)
		waitFor(t, "a new leader", func() bool {
			l := queueLeader(nodes, n, "sf")
			return l != "" && l != n.name
		})
		n.start()
		waitForMembers(t, 3, nodes...)
		r.traffic(traffic)
	}
	r.check()
}

// readStream reads queue through n from offset first (by consumer name
// name when set), acking each delivery, until it has read want messages;
// it returns the message at each offset, read in order.
func readStream(t *testing.T, n *wnode, queue, name string, offset any, want int) []sfRead {
	t.Helper()
	_, ch := dial(t, n)
	if err := ch.Qos(100, 0, false); err != nil {
		t.Fatal(err)
	}
	args := amqp091.Table{}
	if offset != nil {
		args["x-stream-offset"] = offset
	}
	if name != "" {
		args["x-stream-consumer-name"] = name
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, args)
	if err != nil {
		t.Fatal(err)
	}
	var got []sfRead
	timeout := time.After(60 * time.Second)
	for len(got) < want {
		select {
		case d, ok := <-ds:
			if !ok {
				t.Fatalf("consumer on %s ended after %d messages", n.name, len(got))
			}
			off, _ := d.Headers["x-stream-offset"].(int64)
			pub, _ := d.Headers["pub"].(string)
			seq, _ := d.Headers["seq"].(int64)
			got = append(got, sfRead{consumer: n.name, off: off, pub: pub, seq: seq})
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatalf("consumer on %s read %d of %d messages in 60s", n.name, len(got), want)
		}
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestClusterStreamReplicated: a stream declared on n1 is replicated: 12
// MB of messages published with confirms through every node are read from
// the first offset through every node (from each node's store, past the
// in-memory tail) as the same messages at the same offsets; a named
// consumer that read part of it through n2 resumes through n3 after its
// last acknowledged offset; n1, killed and restarted, reads the whole
// stream again from its own store.
func TestClusterStreamReplicated(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	declareStream(t, nodes[0], "sr")
	waitSameDefinitions(t, nodes...)

	const per = 1000
	body := make([]byte, 4096)
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		_, ch := dial(t, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ch.Confirm(false); err != nil {
				errs <- err
				return
			}
			pub := "p-" + n.name
			confs := make([]*amqp091.DeferredConfirmation, per)
			for i := range per {
				c, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", "sr", false, false, amqp091.Publishing{
					DeliveryMode: amqp091.Persistent, Headers: amqp091.Table{"pub": pub, "seq": int64(i)}, Body: body})
				if err != nil {
					errs <- err
					return
				}
				confs[i] = c
			}
			for i, c := range confs {
				if ok, err := c.WaitContext(t.Context()); err != nil || !ok {
					errs <- fmt.Errorf("%s: confirm %d: %v %v", pub, i, ok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := per * len(nodes)
	check := func(what string, rs []sfRead) {
		t.Helper()
		seen := map[string]bool{}
		for i, r := range rs {
			if r.off != int64(i) {
				t.Fatalf("%s: read offset %d at position %d", what, r.off, i)
			}
			seen[fmt.Sprint(r.pub, "/", r.seq)] = true
		}
		if len(seen) != total {
			t.Fatalf("%s: %d distinct messages, want %d", what, len(seen), total)
		}
	}
	var first []sfRead
	for _, n := range nodes {
		rs := readStream(t, n, "sr", "", "first", total)
		check("through "+n.name, rs)
		if first == nil {
			first = rs
			continue
		}
		for i := range rs {
			if rs[i].pub != first[i].pub || rs[i].seq != first[i].seq {
				t.Fatalf("offset %d: %s/%d through %s, %s/%d through %s", i, rs[i].pub, rs[i].seq, n.name, first[i].pub, first[i].seq, nodes[0].name)
			}
		}
	}

	// A consumer through n2 is listed there, with its stream fields.
	_, ch2 := dial(t, nodes[1])
	if err := ch2.Qos(5, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch2.Consume("sr", "listed", false, false, false, false, amqp091.Table{"x-stream-offset": "first"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "n2 lists its stream consumer", func() bool {
		cs := listConsumers(t, nodes[1])
		return len(cs) == 1 && cs[0].Queue.Name == "sr" && cs[0].Tag == "listed" && cs[0].Prefetch == 5
	})
	if err := ch2.Cancel("listed", false); err != nil {
		t.Fatal(err)
	}

	// A named consumer reads 1000 messages through n2 and acks them.
	readStream(t, nodes[1], "sr", "named", "first", 1000)
	waitFor(t, "the named offset stored on n3", func() bool {
		off, err := storedOffset(nodes[2], "sr", "named")
		return err == nil && off == 999
	})
	rest := readStream(t, nodes[2], "sr", "named", nil, total-1000)
	if rest[0].off != 1000 || rest[len(rest)-1].off != int64(total-1) {
		t.Fatalf("the named consumer resumed through n3 at offset %d (to %d), want 1000", rest[0].off, rest[len(rest)-1].off)
	}

	nodes[0].kill()
	nodes[0].start()
	waitForMembers(t, 3, nodes...)
	var again []sfRead
	waitFor(t, "n1 has its replica back", func() bool {
		var q struct {
			Stream *struct {
				Committed int64 `json:"committed_offset"`
				Stored    int64 `json:"stored_offset"`
			} `json:"stream"`
		}
		_, err := nodes[0].api("GET", "/api/queues/%2F/sr", nil, &q)
		return err == nil && q.Stream != nil && q.Stream.Committed == int64(total) && q.Stream.Stored == int64(total)
	})
	again = readStream(t, nodes[0], "sr", "", "first", total)
	check("through n1 restarted", again)
}

// TestClusterSuperStreamBalanced: the six partitions of a super stream
// created through n1 are replicated streams whose group leaders are
// spread over the three nodes, two each.
func TestClusterSuperStreamBalanced(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	waitFor(t, "the super stream created", func() bool {
		code, err := nodes[0].api("PUT", "/api/super-streams/%2F/ss", map[string]any{"partitions": 6}, nil)
		return err == nil && code/100 == 2
	})
	waitSameDefinitions(t, nodes...)
	var leaders map[string]int
	waitFor(t, "partition leaders two per node", func() bool {
		leaders = map[string]int{}
		for i := range 6 {
			leaders[queueLeader(nodes, nil, fmt.Sprint("ss-", i))]++
		}
		for _, n := range nodes {
			if leaders[n.name] != 2 {
				return false
			}
		}
		return true
	})
	// Each partition takes what its binding key routes to it.
	_, ch := dial(t, nodes[1])
	for i := range 6 {
		acked := linkPublish(t, ch, fmt.Sprint("p", i), "ss", fmt.Sprint(i), 10, true)
		if len(acked) != 10 {
			t.Fatalf("partition %d: %d of 10 confirmed", i, len(acked))
		}
	}
	for i := range 6 {
		rs := readStream(t, nodes[2], fmt.Sprint("ss-", i), "", "first", 10)
		for _, r := range rs {
			if r.pub != fmt.Sprint("p", i) {
				t.Fatalf("partition %d holds %s/%d", i, r.pub, r.seq)
			}
		}
	}
}
