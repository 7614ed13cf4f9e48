package cluster_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Consumer groups (single active consumer per partition) of a replicated
// super stream across nodes.

// sgRead is one delivery to a member of the group: the partition, the
// offset, the message and when it came.
type sgRead struct {
	part int
	off  int64
	pub  string
	seq  int64
	at   time.Time
}

// sgMember is a member of consumer group "grp" on every partition of super
// stream "sg", through one node, acking each delivery.
type sgMember struct {
	name  string
	mu    sync.Mutex
	reads []sgRead
}

func (m *sgMember) snapshot() []sgRead {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.reads)
}

// sgJoin subscribes m through n to the partitions of sg, in order.
func sgJoin(t *testing.T, n *wnode, m *sgMember, parts int) {
	t.Helper()
	_, ch := dial(t, n)
	if err := ch.Qos(16, 0, false); err != nil {
		t.Fatal(err)
	}
	for p := range parts {
		ds, err := ch.Consume(fmt.Sprint("sg-", p), fmt.Sprint(m.name, "-", p), false, false, false, false, amqp091.Table{
			"x-single-active-consumer": true, "x-stream-consumer-name": "grp", "x-stream-offset": "first"})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for d := range ds {
				off, _ := d.Headers["x-stream-offset"].(int64)
				pub, _ := d.Headers["pub"].(string)
				seq, _ := d.Headers["seq"].(int64)
				m.mu.Lock()
				m.reads = append(m.reads, sgRead{part: p, off: off, pub: pub, seq: seq, at: time.Now()})
				m.mu.Unlock()
				_ = d.Ack(false)
			}
		}()
	}
}

// sgKey names a message.
type sgKey struct {
	pub string
	seq int64
}

// checkGroupTakeover checks what the surviving member read of partition p
// after the kill (after): starting right after stored, the group's
// acknowledged offset then, each offset once and in order, and every
// message confirmed to p (confirmed) read by a member. It returns the
// problems found.
func checkGroupTakeover(p int, stored int64, after []sgRead, all []sgRead, confirmed []sgKey) []string {
	var bad []string
	if len(after) == 0 {
		return []string{fmt.Sprintf("partition %d: nothing read after the kill", p)}
	}
	if after[0].off != stored+1 {
		bad = append(bad, fmt.Sprintf("partition %d: resumed at offset %d, stored offset %d", p, after[0].off, stored))
	}
	for i := 1; i < len(after); i++ {
		if after[i].off != after[i-1].off+1 {
			bad = append(bad, fmt.Sprintf("partition %d: offset %d after %d", p, after[i].off, after[i-1].off))
		}
	}
	read := map[sgKey]bool{}
	for _, r := range all {
		read[sgKey{r.pub, r.seq}] = true
	}
	for _, k := range confirmed {
		if !read[k] {
			bad = append(bad, fmt.Sprintf("partition %d: confirmed %s/%d never read", p, k.pub, k.seq))
		}
	}
	return bad
}

func TestCheckGroupTakeover(t *testing.T) {
	all := []sgRead{{off: 3, pub: "a", seq: 0}, {off: 4, pub: "a", seq: 1}, {off: 5, pub: "a", seq: 2}}
	if bad := checkGroupTakeover(0, 2, all, all, []sgKey{{"a", 0}, {"a", 2}}); len(bad) != 0 {
		t.Fatal(bad)
	}
	if bad := checkGroupTakeover(0, 1, all, all, nil); len(bad) != 1 {
		t.Fatalf("a gap at the resume: %v", bad)
	}
	if bad := checkGroupTakeover(0, 3, all, all, nil); len(bad) != 1 {
		t.Fatalf("a duplicate at the resume: %v", bad)
	}
	if bad := checkGroupTakeover(0, 2, []sgRead{all[0], all[2]}, all, nil); len(bad) != 1 {
		t.Fatalf("a gap: %v", bad)
	}
	if bad := checkGroupTakeover(0, 2, all, all, []sgKey{{"b", 0}}); len(bad) != 1 {
		t.Fatalf("a lost message: %v", bad)
	}
}

// TestClusterStreamGroupNodeDown: a consumer group on a super stream of
// three partitions, one member through n2 and one through n3 (joined in
// that order), has partitions 0 and 2 active on n2's member and 1 on
// n3's (partition i: member i mod 2). n3 is SIGKILLed; the group's leader
// takes n3's member out and n2's member gets partition 1 too, resuming
// right after the group's stored offset (what n3's member acknowledged):
// no confirmed message missed, none read twice.
func TestClusterStreamGroupNodeDown(t *testing.T) {
	const parts, batch = 3, 30
	nodes := threeNodes(t, localIPs, "--quorum-groups", "3")
	startCluster(t, nodes...)
	waitDataGroups(t, nodes...)
	waitFor(t, "the super stream created", func() bool {
		code, err := nodes[0].api("PUT", "/api/super-streams/%2F/sg", map[string]any{"partitions": parts}, nil)
		return err == nil && code/100 == 2
	})
	waitSameDefinitions(t, nodes...)
	waitFor(t, "partition leaders", func() bool {
		for p := range parts {
			if queueLeader(nodes, nil, fmt.Sprint("sg-", p)) == "" {
				return false
			}
		}
		return true
	})
	a, b := &sgMember{name: "a"}, &sgMember{name: "b"}
	// A consume returns once the member's join is applied (its
	// consume-ok waits for it): a's joins come before b's in every
	// partition's group.
	sgJoin(t, nodes[1], a, parts)
	sgJoin(t, nodes[2], b, parts)

	_, pch := dial(t, nodes[0])
	confirmed := make([][]sgKey, parts)
	publish := func(round int) {
		for p := range parts {
			pub := fmt.Sprintf("r%d-p%d", round, p)
			for _, s := range linkPublish(t, pch, pub, "sg", fmt.Sprint(p), batch, true) {
				confirmed[p] = append(confirmed[p], sgKey{pub, s})
			}
		}
	}
	// lastRead is the highest offset m read of partition p (-1: none).
	lastRead := func(m *sgMember, p int) int64 {
		last := int64(-1)
		for _, r := range m.snapshot() {
			if r.part == p {
				last = max(last, r.off)
			}
		}
		return last
	}
	publish(0)
	if len(confirmed[0]) != batch || len(confirmed[1]) != batch || len(confirmed[2]) != batch {
		t.Fatalf("confirmed %d/%d/%d of %d per partition", len(confirmed[0]), len(confirmed[1]), len(confirmed[2]), batch)
	}
	// The spread: 0 and 2 on a, 1 on b, each up to its last message.
	waitFor(t, "partitions 0 and 2 read by a, 1 by b", func() bool {
		return lastRead(a, 0) == batch-1 && lastRead(a, 2) == batch-1 && lastRead(b, 1) == batch-1
	})
	for _, p := range []int{0, 2} {
		if got := lastRead(b, p); got >= 0 {
			t.Fatalf("b read partition %d (up to offset %d) while a is active on it", p, got)
		}
	}
	// b acknowledged every delivery: the group's stored offset of
	// partition 1 reaches its last.
	var stored int64
	waitFor(t, "b's acks stored", func() bool {
		off, err := storedOffset(nodes[0], "sg-1", "grp")
		stored = off
		return err == nil && off == lastRead(b, 1)
	})

	nodes[2].kill()
	killed := time.Now()
	publish(1)
	for p := range parts {
		if len(confirmed[p]) != 2*batch {
			t.Fatalf("partition %d: %d of %d confirmed with n3 down", p, len(confirmed[p]), 2*batch)
		}
	}
	waitFor(t, "a reads every partition to its end", func() bool {
		return lastRead(a, 0) == 2*batch-1 && lastRead(a, 1) == 2*batch-1 && lastRead(a, 2) == 2*batch-1
	})
	t.Logf("n3 killed; a active on partition 1 from offset %d after %v", stored+1, firstAfter(a.snapshot(), 1, killed).Sub(killed))
	reads := append(a.snapshot(), b.snapshot()...)
	var bad []string
	for p := range parts {
		var after, all []sgRead
		for _, r := range reads {
			if r.part == p {
				all = append(all, r)
			}
		}
		for _, r := range a.snapshot() {
			if r.part == p && (p != 1 || r.at.After(killed)) {
				after = append(after, r)
			}
		}
		from := int64(-1) // a consumed 0 and 2 from the start
		if p == 1 {
			from = stored
		}
		bad = append(bad, checkGroupTakeover(p, from, after, all, confirmed[p])...)
	}
	if len(bad) > 0 {
		t.Fatalf("%d problems, the first: %v", len(bad), bad[:min(len(bad), 10)])
	}
}

// firstAfter is when the first read of partition p after t came.
func firstAfter(rs []sgRead, p int, t time.Time) time.Time {
	for _, r := range rs {
		if r.part == p && r.at.After(t) {
			return r.at
		}
	}
	return t
}
