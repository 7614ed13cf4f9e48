package queue

import "testing"

func pmsg(body string, p uint8) *Message { return &Message{Body: []byte(body), Priority: p} }

func TestPriorityQueue(t *testing.T) {
	type pub struct {
		body string
		prio uint8
	}
	tests := []struct {
		name    string
		max     uint8
		publish []pub
		want    []string
	}{
		{name: "higher first, fifo within", max: 5, publish: []pub{{"a", 0}, {"b", 5}, {"c", 1}, {"d", 5}, {"e", 0}},
			want: []string{"b", "d", "c", "a", "e"}},
		{name: "capped at max", max: 2, publish: []pub{{"a", 2}, {"b", 9}, {"c", 1}},
			want: []string{"a", "b", "c"}},
		{name: "non-priority queue ignores priority", max: 0, publish: []pub{{"a", 0}, {"b", 9}},
			want: []string{"a", "b"}},
		{name: "max 255", max: 255, publish: []pub{{"a", 0}, {"b", 255}, {"c", 128}},
			want: []string{"b", "c", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxPriority = tt.max
			q := NewWithConfig(cfg)
			for _, p := range tt.publish {
				q.Publish(pmsg(p.body, p.prio))
			}
			if q.ReadyBytes() != int64(len(tt.publish)) {
				t.Fatalf("ready bytes %d", q.ReadyBytes())
			}
			_ = q.AddConsumer(&Consumer{Tag: "c", NoAck: true})
			if got := bodies(q.Dispatch(nil)); !equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			if q.Ready() != 0 || q.ReadyBytes() != 0 {
				t.Fatalf("ready %d bytes %d", q.Ready(), q.ReadyBytes())
			}
		})
	}
}

func TestPriorityRequeueAndPurge(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxPriority = 3
	q := NewWithConfig(cfg)
	c := &Consumer{Tag: "c", Prefetch: 2}
	_ = q.AddConsumer(c)
	q.Publish(pmsg("h1", 3))
	q.Publish(pmsg("l1", 1))
	ds := q.Dispatch(nil) // h1, l1
	q.Publish(pmsg("h2", 3))
	q.Publish(pmsg("l2", 1))
	q.Return(ds[1].Entry.Seq) // l1 back ahead of l2, behind h2
	q.Return(ds[0].Entry.Seq) // h1 back ahead of h2
	c.Prefetch = 0
	var got []string
	for _, d := range q.Dispatch(nil) {
		got = append(got, string(d.Entry.Msg.Body))
	}
	if !equal(got, []string{"h1", "h2", "l1", "l2"}) {
		t.Fatalf("got %v", got)
	}

	r := NewWithConfig(cfg)
	r.Restore(Entry{Msg: pmsg("r", 2), Seq: 4})
	r.Publish(pmsg("n", 0))
	var seqs []uint64
	if n := r.PurgeEach(func(e Entry) { seqs = append(seqs, e.Seq) }); n != 2 || len(seqs) != 2 || seqs[0] != 4 || seqs[1] != 5 {
		t.Fatalf("purge %d %v", n, seqs)
	}
}

func TestPriorityTTLAndDropHead(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxPriority = 2
	cfg.MessageTTL = 100
	cfg.MaxLength = 2
	q := NewWithConfig(cfg)
	q.PublishAt(pmsg("lo", 0), 1000, -1)
	q.PublishAt(pmsg("hi", 2), 1050, -1)
	if q.NextExpiry() != 1100 {
		t.Fatalf("next expiry %d", q.NextExpiry())
	}
	// Each lane expires from its own head.
	if dl := q.Expire(1100); !equal(reasons(dl), []string{"lo:expired"}) {
		t.Fatalf("expire %v", reasons(dl))
	}
	// Drop-head drops the next message to deliver, as RabbitMQ does.
	q.PublishAt(pmsg("lo2", 0), 1100, -1)
	_, _, dl := q.PublishAt(pmsg("lo3", 0), 1100, -1)
	if !equal(reasons(dl), []string{"hi:maxlen"}) {
		t.Fatalf("drop head %v", reasons(dl))
	}
}

func BenchmarkPriorityPublishDeliverAck(b *testing.B) {
	cfg := DefaultConfig()
	cfg.MaxPriority = 10
	q := NewWithConfig(cfg)
	c := &Consumer{Tag: "c", Prefetch: 100}
	_ = q.AddConsumer(c)
	ms := []*Message{pmsg("0123456789abcdef", 0), pmsg("0123456789abcdef", 5)}
	var scratch []Delivery
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		q.Publish(ms[i&1])
		scratch = q.Dispatch(scratch[:0])
		settleAll(q, scratch)
	}
}
