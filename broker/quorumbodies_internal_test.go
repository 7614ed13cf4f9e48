package broker

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/queue"
	"github.com/warrenmq/warren/store"
)

// bodiesGroup returns a data group machine whose bodies beyond a window
// of keep messages go to a store of its own, and the store.
func bodiesGroup(t testing.TB, keep int) (*QueueGroup, *store.Store) {
	t.Helper()
	st, err := store.Open(store.Config{Dir: t.TempDir(), NoSync: true, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	b := &Broker{log: zaptest.NewLogger(t), cfg: Config{Store: st, QueueMemoryMessages: keep, QueueMemoryBytes: 64 << 20}}
	b.repl.init("n1")
	t.Cleanup(func() {
		b.pagers.Wait()
		st.Close()
	})
	g := NewQueueGroup()
	g.setBodies(b.newGroupBodies(1))
	return g, st
}

func bodyOf(i int) []byte { return fmt.Appendf(bytes.Repeat([]byte{'x'}, 1000), "%08d", i) }

// getAll takes every ready message of k with basic.get commands (acked
// ones settled) and returns their bodies in order.
func getAll(t *testing.T, g *QueueGroup, k GroupQueueKey, index *uint64) [][]byte {
	t.Helper()
	var out [][]byte
	for {
		*index++
		get := queue.Cmd{Op: queue.OpGet, Now: 1}
		r := g.Apply(*index, AppendGroupQueueCmd(nil, k, &get)).(*GroupResult)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if len(r.Effects) == 0 {
			return out
		}
		e := r.Effects[0].Entry
		if e.Msg == nil {
			if r.body == nil {
				t.Fatalf("message %d paged out and no body coming", e.Seq)
			}
			e.Msg = <-r.body
			if e.Msg == nil {
				t.Fatalf("message %d: body not read", e.Seq)
			}
		}
		out = append(out, e.Msg.Body)
		*index++
		ack := queue.Cmd{Op: queue.OpSettle, Seq: e.Seq, Now: 1}
		if r := g.Apply(*index, AppendGroupQueueCmd(nil, k, &ack)).(*GroupResult); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}

// storedBodies counts the bodies of group 1's queue k in st.
func storedBodies(t *testing.T, st *store.Store, k GroupQueueKey) int {
	t.Helper()
	v, err := st.OpenReplView()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	n := 0
	if err := v.Each(store.ReplID(1, k.ID), func(uint64, *store.Message) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestQueueGroupBodiesBounded: a replicated queue holding far more than its
// window keeps only the window's bodies in RAM (the heap grows by the
// index, not the bodies) and the rest in the node's store; a snapshot
// streams the stored bodies and restores on a member with a store (bodies
// to its store) and on one without (bodies back in RAM); each delivers
// every message in order with its body, and the settled messages' bodies
// leave the store.
func TestQueueGroupBodiesBounded(t *testing.T) {
	const n, keep = 20000, 100
	g, st := bodiesGroup(t, keep)
	k := GroupQueueKey{VHost: "/", Name: "deep", ID: 7}
	var index uint64 = 1
	g.Apply(index, GroupCreateCmd(k, queue.DefaultConfig()))
	before := heapInUse()
	for i := range n {
		index++
		c := queue.Cmd{Op: queue.OpEnqueue, TTL: -1, Msg: &queue.Message{RoutingKey: "deep", Header: []byte{0, 60}, Body: bodyOf(i)},
			Publisher: 1, PubSeq: uint64(i + 1)}
		if r := g.Apply(index, AppendGroupQueueCmd(nil, k, &c)).(*GroupResult); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if err := st.Flush(); err != nil {
		t.Fatal(err)
	}
	grown := int64(heapInUse()) - int64(before)
	q := g.queues[k]
	if res, _ := q.Resident(); res > keep {
		t.Fatalf("%d bodies in RAM, window %d", res, keep)
	}
	// 20,000 bodies of 1 KiB are 20 MiB; the index is 32 bytes a message.
	t.Logf("heap grew by %d", grown)
	if grown > 4<<20 {
		t.Fatalf("the heap grew by %d bytes for %d messages of 1 KiB", grown, n)
	}
	if got := storedBodies(t, st, k); got != n-keep {
		t.Fatalf("%d bodies in the store, want %d", got, n-keep)
	}

	buf := snapshotBytes(t, g)
	g2, st2 := bodiesGroup(t, keep)
	if err := g2.Restore(index, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if res, _ := g2.queues[k].Resident(); res > keep {
		t.Fatalf("restored with %d bodies in RAM, window %d", res, keep)
	}
	if got := storedBodies(t, st2, k); got != n-keep {
		t.Fatalf("restored %d bodies to the store, want %d", got, n-keep)
	}
	g3 := NewQueueGroup()
	if err := g3.Restore(index, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}

	for name, m := range map[string]*QueueGroup{"source": g, "restored with a store": g2, "restored without": g3} {
		idx := index
		got := getAll(t, m, k, &idx)
		if len(got) != n {
			t.Fatalf("%s: got %d messages, want %d", name, len(got), n)
		}
		for i, body := range got {
			if !bytes.Equal(body, bodyOf(i)) {
				t.Fatalf("%s: message %d is %.20q", name, i, body)
			}
		}
	}
	if left := storedBodies(t, st, k); left != 0 {
		t.Fatalf("%d bodies left in the store after every message was acked", left)
	}
	if left := storedBodies(t, st2, k); left != 0 {
		t.Fatalf("%d bodies left in the restored member's store", left)
	}
}

// BenchmarkQueueGroupEnqueue is the apply path of an enqueue on a data
// group's replica: without a store (every body in RAM), with a store while
// the queue is within its window (as without), and beyond it (each body
// written to the store and dropped).
func BenchmarkQueueGroupEnqueue(b *testing.B) {
	k := GroupQueueKey{VHost: "/", Name: "q", ID: 1}
	c := queue.Cmd{Op: queue.OpEnqueue, TTL: -1, Msg: &queue.Message{RoutingKey: "q", Header: []byte{0, 60}, Body: make([]byte, 16)}}
	cmd := AppendGroupQueueCmd(nil, k, &c)
	for _, mode := range []struct {
		name string
		keep int
	}{{"memory", 0}, {"store-window", 1 << 30}, {"store-paged", 1}} {
		b.Run(mode.name, func(b *testing.B) {
			g := NewQueueGroup()
			if mode.keep > 0 {
				var st *store.Store
				g, st = bodiesGroup(b, mode.keep)
				_ = st
			}
			g.Apply(1, GroupCreateCmd(k, queue.DefaultConfig()))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				g.Apply(uint64(i+2), cmd)
			}
		})
	}
}
