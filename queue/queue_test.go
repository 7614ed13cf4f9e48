package queue

import (
	"testing"
)

func msg(body string) *Message { return &Message{Body: []byte(body)} }

func bodies(ds []Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, string(d.Entry.Msg.Body))
	}
	return out
}

// settleAll acknowledges every delivery of ds.
func settleAll(q *Queue, ds []Delivery) {
	for i := range ds {
		q.Settle(ds[i].Entry.Seq)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

type gate struct{ open bool }

func (g *gate) Acquire(int) bool { return g.open }

func TestDispatch(t *testing.T) {
	tests := []struct {
		name      string
		consumers []*Consumer
		publish   []string
		want      []string // consumer tag + body, in dispatch order
	}{
		{
			name:    "no consumers keeps messages",
			publish: []string{"a"},
			want:    nil,
		},
		{
			name:      "round robin",
			consumers: []*Consumer{{Tag: "c1", NoAck: true}, {Tag: "c2", NoAck: true}},
			publish:   []string{"a", "b", "c", "d"},
			want:      []string{"c1a", "c2b", "c1c", "c2d"},
		},
		{
			name:      "prefetch caps deliveries",
			consumers: []*Consumer{{Tag: "c1", Prefetch: 2}},
			publish:   []string{"a", "b", "c"},
			want:      []string{"c1a", "c1b"},
		},
		{
			name:      "prefetch then the other consumer",
			consumers: []*Consumer{{Tag: "c1", Prefetch: 1}, {Tag: "c2", Prefetch: 2}},
			publish:   []string{"a", "b", "c", "d"},
			want:      []string{"c1a", "c2b", "c2c"},
		},
		{
			name:      "closed gate skips consumer",
			consumers: []*Consumer{{Tag: "c1", Gate: &gate{}}, {Tag: "c2", Gate: &gate{open: true}}},
			publish:   []string{"a", "b"},
			want:      []string{"c2a", "c2b"},
		},
		{
			name:      "no-ack ignores prefetch",
			consumers: []*Consumer{{Tag: "c1", NoAck: true, Prefetch: 1}},
			publish:   []string{"a", "b", "c"},
			want:      []string{"c1a", "c1b", "c1c"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New()
			for _, c := range tt.consumers {
				if err := q.AddConsumer(c); err != nil {
					t.Fatal(err)
				}
			}
			for _, b := range tt.publish {
				q.Publish(msg(b))
			}
			var got []string
			for _, d := range q.Dispatch(nil) {
				got = append(got, d.Consumer.Tag+string(d.Entry.Msg.Body))
			}
			if !equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			if q.Ready() != len(tt.publish)-len(tt.want) {
				t.Fatalf("ready %d after %d of %d delivered", q.Ready(), len(tt.want), len(tt.publish))
			}
		})
	}
}

func TestReturnKeepsOrder(t *testing.T) {
	q := New()
	c := &Consumer{Tag: "c", Prefetch: 3}
	if err := q.AddConsumer(c); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"1", "2", "3", "4", "5"} {
		q.Publish(msg(b))
	}
	ds := q.Dispatch(nil)
	if got := bodies(ds); !equal(got, []string{"1", "2", "3"}) {
		t.Fatalf("first dispatch %v", got)
	}
	// Return out of order: the queue must give them back in queue order,
	// ahead of 4 and 5, marked redelivered.
	q.Return(ds[2].Entry.Seq)
	q.Return(ds[0].Entry.Seq)
	if q.Unacked() != 1 || c.Unacked() != 1 {
		t.Fatalf("unacked %d/%d, want 1", q.Unacked(), c.Unacked())
	}
	q.Settle(ds[1].Entry.Seq) // "2"
	var all []Delivery
	for q.Ready() > 0 {
		ds := q.Dispatch(nil)
		if len(ds) == 0 {
			t.Fatal("no progress")
		}
		for _, d := range ds {
			q.Settle(d.Entry.Seq)
			all = append(all, d)
		}
	}
	if got := bodies(all); !equal(got, []string{"1", "3", "4", "5"}) {
		t.Fatalf("redelivery order %v", got)
	}
	if !all[0].Entry.Redelivered || !all[1].Entry.Redelivered || all[2].Entry.Redelivered {
		t.Fatalf("redelivered flags wrong: %+v", all)
	}
}

func TestExclusiveConsumer(t *testing.T) {
	q := New()
	if err := q.AddConsumer(&Consumer{Tag: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := q.AddConsumer(&Consumer{Tag: "x", Exclusive: true}); err != ErrExclusiveConsumer {
		t.Fatalf("exclusive beside another: %v", err)
	}
	q2 := New()
	if err := q2.AddConsumer(&Consumer{Tag: "x", Exclusive: true}); err != nil {
		t.Fatal(err)
	}
	if err := q2.AddConsumer(&Consumer{Tag: "b"}); err != ErrExclusiveConsumer {
		t.Fatalf("joining an exclusive consumer: %v", err)
	}
}

func TestRemoveConsumerKeepsRoundRobin(t *testing.T) {
	q := New()
	a, b, c := &Consumer{Tag: "a", NoAck: true}, &Consumer{Tag: "b", NoAck: true}, &Consumer{Tag: "c", NoAck: true}
	for _, x := range []*Consumer{a, b, c} {
		if err := q.AddConsumer(x); err != nil {
			t.Fatal(err)
		}
	}
	q.Publish(msg("1"))
	q.Publish(msg("2"))
	q.Dispatch(nil) // a, b
	if !q.RemoveConsumer(b) || q.RemoveConsumer(b) {
		t.Fatal("RemoveConsumer result wrong")
	}
	q.Publish(msg("3"))
	q.Publish(msg("4"))
	var got []string
	for _, d := range q.Dispatch(nil) {
		got = append(got, d.Consumer.Tag)
	}
	if !equal(got, []string{"c", "a"}) {
		t.Fatalf("after removal got %v", got)
	}
}

func TestGetPurgeRestore(t *testing.T) {
	q := New()
	q.Publish(msg("a"))
	q.Publish(msg("bb"))
	if q.ReadyBytes() != 3 {
		t.Fatalf("ready bytes %d", q.ReadyBytes())
	}
	e, ok := q.Get(false)
	if !ok || string(e.Msg.Body) != "a" || q.Unacked() != 1 {
		t.Fatalf("get: %v %v unacked %d", e, ok, q.Unacked())
	}
	var purged []uint64
	if n := q.PurgeEach(func(e Entry) { purged = append(purged, e.Seq) }); n != 1 || len(purged) != 1 || purged[0] != 2 {
		t.Fatalf("purge %d %v", n, purged)
	}
	if _, ok := q.Get(true); ok {
		t.Fatal("get from empty queue")
	}

	r := New()
	r.Restore(Entry{Msg: msg("x"), Seq: 7, Redelivered: true})
	if seq := r.Publish(msg("y")); seq != 8 {
		t.Fatalf("publish after restore got seq %d", seq)
	}
	e, _ = r.Get(true)
	if e.Seq != 7 || !e.Redelivered {
		t.Fatalf("restored entry %+v", e)
	}
}

func BenchmarkPublishDeliverAck(b *testing.B) {
	q := New()
	c := &Consumer{Tag: "c", Prefetch: 100}
	_ = q.AddConsumer(c)
	m := msg("0123456789abcdef")
	var scratch []Delivery
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		q.Publish(m)
		scratch = q.Dispatch(scratch[:0])
		settleAll(q, scratch)
	}
}

// TestPurgeKeepsSmallBuffer: a queue purged and filled again to the same
// depth reuses its ready list's buffer (no allocation per publish), as a
// queue drained by its consumers does.
func TestPurgeKeepsSmallBuffer(t *testing.T) {
	q := New()
	m := msg("x")
	fill := func() {
		for range 100 {
			q.Publish(m)
		}
	}
	fill()
	allocs := testing.AllocsPerRun(10, func() {
		q.Purge()
		fill()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per purge and refill, want 0", allocs)
	}
	if q.Ready() != 100 {
		t.Fatalf("ready %d", q.Ready())
	}
}

// TestUnackedBytesAndHead: the body bytes of the unacknowledged deliveries
// follow gets, settlements and returns; HeadMessage is the next to go.
func TestUnackedBytesAndHead(t *testing.T) {
	q := New()
	if q.HeadMessage() != nil {
		t.Fatal("head of an empty queue")
	}
	var ms []*Message
	for _, n := range []int{10, 20, 30} {
		m := &Message{Body: make([]byte, n)}
		ms = append(ms, m)
		q.Publish(m)
	}
	if q.HeadMessage() != ms[0] {
		t.Fatal("head is not the first published")
	}
	a, _ := q.Get(false)
	b, _ := q.Get(false)
	if got := q.UnackedBytes(); got != 30 {
		t.Fatalf("unacked bytes after two gets: %d", got)
	}
	if q.HeadMessage() != ms[2] {
		t.Fatal("head after two gets")
	}
	if _, ok := q.Settle(a.Seq); !ok {
		t.Fatal("settle")
	}
	if got := q.UnackedBytes(); got != 20 {
		t.Fatalf("unacked bytes after a settlement: %d", got)
	}
	if !q.Return(b.Seq) {
		t.Fatal("return")
	}
	if got := q.UnackedBytes(); got != 0 {
		t.Fatalf("unacked bytes after a return: %d", got)
	}
	if q.HeadMessage() != ms[1] {
		t.Fatal("a returned message is not the head again")
	}
}
