package broker

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/warrenmq/warren/queue"
)

// groupWorkload records a random log of data group commands over a few
// queues: creations and deletions, publishes with publisher sequences (and
// resends), consumers, checkouts, acks, requeues, rejects and ticks.
type groupWorkload struct {
	rng  *rand.Rand
	now  int64
	keys []GroupQueueKey
	// held are the deliveries handed out and not settled, per queue, as
	// the effects tell.
	held   map[GroupQueueKey][]uint64
	cons   map[GroupQueueKey][]queue.ConsumerID
	nextID queue.ConsumerID
	pub    map[GroupQueueKey]uint64
}

func (w *groupWorkload) next() []byte {
	r := w.rng
	w.now += int64(r.IntN(20))
	k := w.keys[r.IntN(len(w.keys))]
	cmd := queue.Cmd{Now: w.now}
	switch n := r.IntN(100); {
	case n < 1:
		return GroupGoneCmd(3, queue.ConsumerID(r.IntN(4)), w.now)
	case n < 2:
		return GroupDeleteCmd(k)
	case n < 6:
		cfg := queue.DefaultConfig()
		if r.IntN(2) == 0 {
			cfg.DeliveryLimit = int64(r.IntN(3))
		}
		return GroupCreateCmd(k, cfg)
	case n < 40:
		cmd.Op, cmd.TTL = queue.OpEnqueue, -1
		cmd.Msg = &queue.Message{Exchange: "", RoutingKey: k.Name, Header: []byte{1}, Body: fmt.Appendf(nil, "m%d", r.IntN(1000))}
		cmd.Publisher = 1
		if r.IntN(10) == 0 && w.pub[k] > 0 {
			cmd.PubSeq = 1 + r.Uint64N(w.pub[k])
		} else {
			w.pub[k]++
			cmd.PubSeq = w.pub[k]
		}
	case n < 45:
		w.nextID++
		cmd.Op, cmd.Consumer, cmd.Prefetch = queue.OpAttach, w.nextID, r.IntN(4)
		w.cons[k] = append(w.cons[k], w.nextID)
	case n < 48:
		cmd.Op, cmd.Consumer = queue.OpDetach, 12345
		if cs := w.cons[k]; len(cs) > 0 {
			i := r.IntN(len(cs))
			cmd.Consumer = cs[i]
			w.cons[k] = append(cs[:i:i], cs[i+1:]...)
		}
	case n < 62:
		cmd.Op = queue.OpCheckout
	case n < 65:
		var cmds [][]byte
		for range 1 + r.IntN(3) {
			c := w.next()
			if c[0] != groupBatch {
				cmds = append(cmds, c)
			}
		}
		return GroupBatchCmd(cmds)
	case n < 90:
		hs := w.held[k]
		if len(hs) == 0 {
			cmd.Op = queue.OpTick
			break
		}
		i := r.IntN(len(hs))
		cmd.Seq = hs[i]
		w.held[k] = append(hs[:i:i], hs[i+1:]...)
		cmd.Op = [...]queue.Op{queue.OpSettle, queue.OpSettle, queue.OpReturn, queue.OpDiscard}[r.IntN(4)]
	default:
		cmd.Op = queue.OpTick
	}
	return AppendGroupQueueCmd(nil, k, &cmd)
}

// results is the results of one Apply.
func results(v any) []*GroupResult {
	if rs, ok := v.([]*GroupResult); ok {
		return rs
	}
	return []*GroupResult{v.(*GroupResult)}
}

// seen records the deliveries results hand out, and counts them.
func (w *groupWorkload) seen(rs []*GroupResult) int {
	n := 0
	for _, res := range rs {
		for _, f := range res.Effects {
			if f.Kind == queue.EffDeliver && f.Consumer != 0 {
				w.held[res.Key] = append(w.held[res.Key], f.Entry.Seq)
				n++
			}
		}
	}
	return n
}

func sameResults(a, b []*GroupResult) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameResult(a[i], b[i]) {
			return false
		}
	}
	return true
}

// TestQueueGroupReplay applies a random group command log to one group
// machine; a second is restored from the first's snapshot taken half way
// and applies the rest, a third applies the whole log: every command has
// the same result on each, and the three end in the same state.
func TestQueueGroupReplay(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		w := &groupWorkload{rng: rand.New(rand.NewPCG(seed, 7)), now: 1_000_000, held: map[GroupQueueKey][]uint64{},
			cons: map[GroupQueueKey][]queue.ConsumerID{}, pub: map[GroupQueueKey]uint64{}}
		for i := range 4 {
			w.keys = append(w.keys, GroupQueueKey{VHost: "/", Name: fmt.Sprint("q", i), ID: uint64(10 + i)})
		}
		a, c := NewQueueGroup(), NewQueueGroup()
		var b *QueueGroup
		const n = 6000
		deliveries := 0
		for i := uint64(1); i <= n; i++ {
			if i == n/2 {
				b = NewQueueGroup()
				if err := b.Restore(i-1, snapshotBytes(t, a)); err != nil {
					t.Fatal(err)
				}
				if b.AppliedIndex() != i-1 {
					t.Fatalf("restored at %d, want %d", b.AppliedIndex(), i-1)
				}
			}
			cmd := w.next()
			ra := results(a.Apply(i, cmd))
			deliveries += w.seen(ra)
			rc := results(c.Apply(i, cmd))
			if !sameResults(ra, rc) {
				t.Fatalf("seed %d command %d: results differ: %+v / %+v", seed, i, ra, rc)
			}
			if b != nil {
				if rb := results(b.Apply(i, cmd)); !sameResults(ra, rb) {
					t.Fatalf("seed %d command %d: restored machine's result differs: %+v / %+v", seed, i, ra, rb)
				}
			}
		}
		if deliveries == 0 {
			t.Fatal("the workload delivered nothing")
		}
		sa, sb, sc := a.snapshotBytes(), b.snapshotBytes(), c.snapshotBytes()
		if !bytes.Equal(sa, sb) || !bytes.Equal(sa, sc) {
			t.Fatalf("seed %d: states differ after the log", seed)
		}
		if len(a.Queues()) == 0 {
			t.Fatalf("seed %d: no queue left to compare", seed)
		}
	}
}

func sameResult(a, b *GroupResult) bool {
	if a.Key != b.Key || !errors.Is(a.Err, b.Err) || !errors.Is(b.Err, a.Err) || len(a.Effects) != len(b.Effects) {
		return false
	}
	for i := range a.Effects {
		x, y := a.Effects[i], b.Effects[i]
		if x.Kind != y.Kind || x.Consumer != y.Consumer || x.Publisher != y.Publisher || x.PubSeq != y.PubSeq ||
			x.Reason != y.Reason || x.Entry.Seq != y.Entry.Seq || x.Entry.Redelivered != y.Entry.Redelivered ||
			x.Entry.Deliveries != y.Entry.Deliveries || (x.Entry.Msg == nil) != (y.Entry.Msg == nil) ||
			(x.Entry.Msg != nil && !reflect.DeepEqual(x.Entry.Msg.Body, y.Entry.Msg.Body)) {
			return false
		}
	}
	return true
}

func TestQueueGroupRefusals(t *testing.T) {
	g := NewQueueGroup()
	k := GroupQueueKey{VHost: "/", Name: "q", ID: 1}
	cmd := queue.Cmd{Op: queue.OpEnqueue, TTL: -1, Msg: &queue.Message{Body: []byte("x")}}
	if r := g.Apply(1, AppendGroupQueueCmd(nil, k, &cmd)).(*GroupResult); !errors.Is(r.Err, ErrGroupNoQueue) {
		t.Fatalf("enqueue to a queue never created: %v", r.Err)
	}
	g.Apply(2, GroupCreateCmd(k, queue.DefaultConfig()))
	if r := g.Apply(3, AppendGroupQueueCmd(nil, k, &cmd)).(*GroupResult); r.Err != nil {
		t.Fatal(r.Err)
	}
	if ready, _, _, ok := g.Counts(k); !ok || ready != 1 {
		t.Fatalf("counts: %d %v", ready, ok)
	}
	// Creating it again keeps its messages; another id is another queue.
	g.Apply(4, GroupCreateCmd(k, queue.DefaultConfig()))
	other := k
	other.ID = 2
	g.Apply(5, GroupCreateCmd(other, queue.DefaultConfig()))
	if ready, _, _, _ := g.Counts(k); ready != 1 {
		t.Fatalf("ready after a second create: %d", ready)
	}
	if r := g.Apply(6, []byte{'Z', 0, 0, 0}).(*GroupResult); !errors.Is(r.Err, ErrGroupCommand) {
		t.Fatalf("bad command: %v", r.Err)
	}
	if r := g.Apply(7, GroupDeleteCmd(k)).(*GroupResult); r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, _, _, ok := g.Counts(k); ok {
		t.Fatal("deleted queue still there")
	}
	if err := NewQueueGroup().Restore(1, bytes.NewReader([]byte{5})); err == nil {
		t.Fatal("a truncated snapshot restored")
	}
}

// TestQueueGroupGone: the consumers of a node that is gone are detached
// and what they held goes to the other consumers, redelivered; a checkout
// follows enqueues and attaches without being proposed.
func TestQueueGroupGone(t *testing.T) {
	g := NewQueueGroup()
	k := GroupQueueKey{VHost: "/", Name: "q", ID: 1}
	g.Apply(1, GroupCreateCmd(k, queue.DefaultConfig()))
	a, b := queue.ConsumerID(0x0101), queue.ConsumerID(0x0202)
	attach := queue.Cmd{Op: queue.OpAttach, Consumer: a, Prefetch: 1}
	g.Apply(2, AppendGroupQueueCmd(nil, k, &attach))
	pub := queue.Cmd{Op: queue.OpEnqueue, TTL: -1, Msg: &queue.Message{Body: []byte("m1")}, Publisher: 9, PubSeq: 1}
	r := g.Apply(3, AppendGroupQueueCmd(nil, k, &pub)).(*GroupResult)
	var kinds []queue.EffectKind
	for _, f := range r.Effects {
		kinds = append(kinds, f.Kind)
	}
	if len(kinds) != 2 || kinds[0] != queue.EffConfirm || kinds[1] != queue.EffDeliver || r.Effects[1].Consumer != a {
		t.Fatalf("enqueue effects %+v", r.Effects)
	}
	attach.Consumer = b
	if r := g.Apply(4, AppendGroupQueueCmd(nil, k, &attach)).(*GroupResult); len(r.Effects) != 0 {
		t.Fatalf("attach of b delivered %+v", r.Effects)
	}
	rs := g.Apply(5, GroupGoneCmd(0xff00, 0x0100, 100)).([]*GroupResult)
	if len(rs) != 1 || len(rs[0].Effects) != 1 {
		t.Fatalf("gone results %+v", rs)
	}
	f := rs[0].Effects[0]
	if f.Kind != queue.EffDeliver || f.Consumer != b || !f.Entry.Redelivered || f.Entry.Deliveries != 2 {
		t.Fatalf("gone effect %+v", f)
	}
	if _, unacked, consumers, _ := g.Counts(k); unacked != 1 || consumers != 1 {
		t.Fatalf("after gone: %d unacked, %d consumers", unacked, consumers)
	}
	// A resend of publish 1 is confirmed, not enqueued again.
	r = g.Apply(6, AppendGroupQueueCmd(nil, k, &pub)).(*GroupResult)
	if ready, _, _, _ := g.Counts(k); ready != 0 || len(r.Effects) != 1 || r.Effects[0].Kind != queue.EffConfirm {
		t.Fatalf("resend: ready %d effects %+v", ready, r.Effects)
	}
}

// TestQueueGroupRestoreAfterGone: a node that catches up from a snapshot
// taken after the group detached its consumers ('O') never applies the
// detach, so the group calls it back once restored, and the consumer is
// absent from what it restored; attaching it again works once, and a
// second attach of the same consumer (its first attach racing the
// snapshot) changes nothing.
func TestQueueGroupRestoreAfterGone(t *testing.T) {
	leader := NewQueueGroup()
	k := GroupQueueKey{VHost: "/", Name: "q", ID: 1}
	leader.Apply(1, GroupCreateCmd(k, queue.DefaultConfig()))
	a := queue.ConsumerID(0x0101)
	attach := queue.Cmd{Op: queue.OpAttach, Consumer: a, Prefetch: 1}
	leader.Apply(2, AppendGroupQueueCmd(nil, k, &attach))
	pub := queue.Cmd{Op: queue.OpEnqueue, TTL: -1, Msg: &queue.Message{Body: []byte("m1")}, Publisher: 9, PubSeq: 1}
	leader.Apply(3, AppendGroupQueueCmd(nil, k, &pub))
	leader.Apply(4, GroupGoneCmd(0xff00, 0x0100, 100))
	buf := snapshotBytes(t, leader)

	// The cut-off node had applied up to the attach (index 2).
	node := NewQueueGroup()
	node.Apply(1, GroupCreateCmd(k, queue.DefaultConfig()))
	node.Apply(2, AppendGroupQueueCmd(nil, k, &attach))
	if !node.attachedIDs()[a] {
		t.Fatal("consumer not attached before the restore")
	}
	calls := 0
	node.OnRestore(func() {
		calls++
		if node.attachedIDs()[a] {
			t.Error("the restored state still has the consumer the group detached")
		}
	})
	if err := node.Restore(4, buf); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("restore callback called %d times", calls)
	}
	if ready, unacked, consumers, _ := node.Counts(k); ready != 1 || unacked != 0 || consumers != 0 {
		t.Fatalf("restored: %d ready, %d unacked, %d consumers", ready, unacked, consumers)
	}
	// Attached again (twice: the second is a no-op), it is fed the
	// message the group returned.
	r := node.Apply(5, AppendGroupQueueCmd(nil, k, &attach)).(*GroupResult)
	node.Apply(6, AppendGroupQueueCmd(nil, k, &attach))
	if _, _, consumers, _ := node.Counts(k); consumers != 1 {
		t.Fatalf("after two attaches of one consumer: %d consumers", consumers)
	}
	if len(r.Effects) != 1 || r.Effects[0].Kind != queue.EffDeliver || r.Effects[0].Consumer != a || !r.Effects[0].Entry.Redelivered {
		t.Fatalf("attach after restore: effects %+v", r.Effects)
	}
}

// snapshotBytes writes out a snapshot of g.
func snapshotBytes(t *testing.T, g *QueueGroup) *bytes.Buffer {
	t.Helper()
	snap, err := g.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return &buf
}
