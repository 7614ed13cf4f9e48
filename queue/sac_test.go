package queue

import "testing"

func TestConsumerPriority(t *testing.T) {
	tests := []struct {
		name      string
		consumers []*Consumer
		publish   int
		want      string // consumer tags in dispatch order
	}{
		{name: "highest first", publish: 3,
			consumers: []*Consumer{{Tag: "a", NoAck: true}, {Tag: "b", NoAck: true, Priority: 5}},
			want:      "bbb"},
		{name: "round robin among equals", publish: 4,
			consumers: []*Consumer{{Tag: "a", NoAck: true}, {Tag: "b", NoAck: true, Priority: 5}, {Tag: "c", NoAck: true, Priority: 5}},
			want:      "bcbc"},
		{name: "lower when higher blocked", publish: 4,
			consumers: []*Consumer{{Tag: "a", NoAck: true, Priority: -1}, {Tag: "b", Prefetch: 1, Priority: 5}, {Tag: "c", Prefetch: 2}},
			want:      "bcca"},
		{name: "closed gate blocks", publish: 2,
			consumers: []*Consumer{{Tag: "a", NoAck: true}, {Tag: "b", NoAck: true, Priority: 1, Gate: &gate{}}},
			want:      "aa"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New()
			for _, c := range tt.consumers {
				if err := q.AddConsumer(c); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < tt.publish; i++ {
				q.Publish(msg("m"))
			}
			got := ""
			for _, d := range q.Dispatch(nil) {
				got += d.Consumer.Tag
			}
			if got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestConsumerPriorityRemove(t *testing.T) {
	q := New()
	a := &Consumer{Tag: "a", NoAck: true}
	b := &Consumer{Tag: "b", NoAck: true, Priority: 2}
	c := &Consumer{Tag: "c", NoAck: true, Priority: 2}
	for _, x := range []*Consumer{a, b, c} {
		_ = q.AddConsumer(x)
	}
	q.Publish(msg("1"))
	q.Dispatch(nil) // b
	q.RemoveConsumer(c)
	q.RemoveConsumer(b)
	if len(q.groups) != 1 || q.prioCount != 0 {
		t.Fatalf("groups %d prioCount %d", len(q.groups), q.prioCount)
	}
	q.Publish(msg("2"))
	if ds := q.Dispatch(nil); len(ds) != 1 || ds[0].Consumer != a {
		t.Fatalf("after removal %v", ds)
	}
	if q.Consumers()[0] != a || q.ConsumerCount() != 1 {
		t.Fatal("registration order lost")
	}
}

func TestSingleActiveConsumer(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SingleActiveConsumer = true
	q := NewWithConfig(cfg)
	if q.ActiveConsumer() != nil {
		t.Fatal("active consumer without consumers")
	}
	a := &Consumer{Tag: "a", Prefetch: 1}
	b := &Consumer{Tag: "b", Prefetch: 10, Priority: 9}
	c := &Consumer{Tag: "c", NoAck: true}
	for _, x := range []*Consumer{a, b, c} {
		if err := q.AddConsumer(x); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		q.Publish(msg("m"))
	}
	ds := q.Dispatch(nil)
	if q.ActiveConsumer() != a || len(ds) != 1 || ds[0].Consumer != a {
		t.Fatalf("active %v deliveries %d", q.ActiveConsumer(), len(ds))
	}
	// The active consumer leaves with its delivery unsettled; b takes over.
	q.RemoveConsumer(a)
	if q.ActiveConsumer() != b {
		t.Fatalf("active %v, want b", q.ActiveConsumer().Tag)
	}
	q.Return(ds[0].Entry.Seq)
	got := ""
	for _, d := range q.Dispatch(nil) {
		got += d.Consumer.Tag
	}
	if got != "bbb" {
		t.Fatalf("got %q", got)
	}
	if p := New(); p.AddConsumer(&Consumer{}) != nil || p.ActiveConsumer() != nil {
		t.Fatal("not a SAC queue")
	}
}
