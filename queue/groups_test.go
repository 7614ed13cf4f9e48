package queue

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/warrenmq/warren/amqp"
)

// groupHeader is a content header whose headers table puts a message in
// group value of header name.
func groupHeader(name, value string) []byte {
	h := amqp.ContentHeader{ClassID: 60, Properties: amqp.Properties{Headers: amqp.Table{name: value}}}
	b, err := h.AppendTo(nil)
	if err != nil {
		panic(err)
	}
	return b
}

func groupMsg(group, body string) *Message {
	m := &Message{Body: []byte(body)}
	if group != "" {
		m.Header = groupHeader("JMSXGroupID", group)
	}
	return m
}

func newGroupQueue() *Queue {
	cfg := DefaultConfig()
	cfg.GroupHeader = "JMSXGroupID"
	return NewWithConfig(cfg)
}

// groupsOf maps each delivery's body to its consumer's tag.
func deliveredTo(ds []Delivery) map[string]string {
	m := map[string]string{}
	for _, d := range ds {
		m[string(d.Entry.Msg.Body)] = d.Consumer.Tag
	}
	return m
}

func TestPeekHeader(t *testing.T) {
	h := amqp.ContentHeader{ClassID: 60, Properties: amqp.Properties{ContentType: "text/plain",
		Headers: amqp.Table{"a": int32(7), "n": amqp.Table{"x": "y"}, "JMSXGroupID": "g1", "b": []byte("raw")}}}
	b, _ := h.AppendTo(nil)
	for _, tc := range []struct {
		name string
		typ  byte
		raw  string
		ok   bool
	}{
		{"JMSXGroupID", 'S', "g1", true},
		{"b", 'x', "raw", true},
		{"a", 'I', "\x00\x00\x00\x07", true},
		{"missing", 0, "", false},
	} {
		typ, raw, ok := amqp.PeekHeader(b, tc.name)
		if ok != tc.ok || typ != tc.typ || string(raw) != tc.raw {
			t.Errorf("%s: %q %q %v", tc.name, typ, raw, ok)
		}
	}
	if _, _, ok := amqp.PeekHeader(b[:len(b)-3], "b"); ok {
		t.Error("truncated header accepted")
	}
}

// TestGroupsOneConsumerAtATime: a group's messages go to one consumer, in
// order; a consumer whose group is blocked does not hold up the others.
func TestGroupsOneConsumerAtATime(t *testing.T) {
	q := newGroupQueue()
	a := &Consumer{ID: 1, Tag: "a", Prefetch: 2}
	b := &Consumer{ID: 2, Tag: "b", Prefetch: 10}
	q.AddConsumer(a)
	q.AddConsumer(b)
	for i := 0; i < 4; i++ {
		q.Publish(groupMsg("A", fmt.Sprint("A", i)))
	}
	for i := 0; i < 3; i++ {
		q.Publish(groupMsg("B", fmt.Sprint("B", i)))
	}
	ds := q.Dispatch(nil)
	got := deliveredTo(ds)
	// a owns A (2 of its 4, prefetch 2); b must not take A's others but
	// takes all of B, though B's messages are behind A's.
	if got["A0"] != "a" || got["A1"] != "a" || got["A2"] != "" || got["A3"] != "" {
		t.Fatalf("group A: %v", got)
	}
	for _, k := range []string{"B0", "B1", "B2"} {
		if got[k] != "b" {
			t.Fatalf("group B: %v", got)
		}
	}
	if q.Ready() != 2 || q.Unacked() != 5 {
		t.Fatalf("ready %d unacked %d", q.Ready(), q.Unacked())
	}
	// b has credit but A is a's while a holds A1: nothing for b.
	if _, ok := q.Settle(ds[0].Entry.Seq); !ok {
		t.Fatal("settle")
	}
	ds = q.Dispatch(nil)
	if len(ds) != 1 || string(ds[0].Entry.Msg.Body) != "A2" || ds[0].Consumer != a {
		t.Fatalf("after one ack: %v", deliveredTo(ds))
	}
	// a cancels: A moves to b, in order, and a keeps what it holds.
	q.RemoveConsumer(a)
	ds = q.Dispatch(nil)
	if len(ds) != 1 || string(ds[0].Entry.Msg.Body) != "A3" || ds[0].Consumer != b {
		t.Fatalf("after cancel: %v", deliveredTo(ds))
	}
}

// TestGroupsMoveWhenIdle: a group whose owner has nothing unacknowledged
// of it is free; requeued messages keep their place in their group.
func TestGroupsMoveWhenIdle(t *testing.T) {
	q := newGroupQueue()
	a := &Consumer{ID: 1, Tag: "a", Prefetch: 1}
	q.AddConsumer(a)
	q.Publish(groupMsg("G", "g0"))
	q.Publish(groupMsg("G", "g1"))
	ds := q.Dispatch(nil)
	if len(ds) != 1 || string(ds[0].Entry.Msg.Body) != "g0" {
		t.Fatalf("first: %v", deliveredTo(ds))
	}
	b := &Consumer{ID: 2, Tag: "b", Prefetch: 5}
	q.AddConsumer(b)
	if ds := q.Dispatch(nil); len(ds) != 0 {
		t.Fatalf("b took a's group: %v", deliveredTo(ds))
	}
	// Requeued: g0 goes back ahead of g1, and G is free again.
	if !q.Return(ds[0].Entry.Seq) {
		t.Fatal("return")
	}
	ds = q.Dispatch(nil)
	if len(ds) != 1 || string(ds[0].Entry.Msg.Body) != "g0" || !ds[0].Entry.Redelivered {
		t.Fatalf("after requeue: %v", deliveredTo(ds))
	}
	// g1 waits while g0 is held.
	if more := q.Dispatch(nil); len(more) != 0 {
		t.Fatalf("g1 overtook g0: %v", deliveredTo(more))
	}
	q.Settle(ds[0].Entry.Seq)
	ds = q.Dispatch(nil)
	if len(ds) != 1 || string(ds[0].Entry.Msg.Body) != "g1" {
		t.Fatalf("after ack: %v", deliveredTo(ds))
	}
}

// TestGroupsUngrouped: messages without the header go to any consumer.
func TestGroupsUngrouped(t *testing.T) {
	q := newGroupQueue()
	a := &Consumer{ID: 1, Tag: "a", Prefetch: 1}
	b := &Consumer{ID: 2, Tag: "b", Prefetch: 1}
	q.AddConsumer(a)
	q.AddConsumer(b)
	q.Publish(groupMsg("", "x"))
	q.Publish(groupMsg("", "y"))
	got := deliveredTo(q.Dispatch(nil))
	if got["x"] == "" || got["y"] == "" || got["x"] == got["y"] {
		t.Fatalf("ungrouped: %v", got)
	}
}

// TestGroupsHolesAndSnapshot: messages taken from the middle leave holes
// that counts, TTL, purge and snapshots pass over.
func TestGroupsHolesAndSnapshot(t *testing.T) {
	q := newGroupQueue()
	a := &Consumer{ID: 1, Tag: "a", Prefetch: 1}
	b := &Consumer{ID: 2, Tag: "b", Prefetch: 100}
	q.AddConsumer(a)
	q.AddConsumer(b)
	for i := 0; i < 3; i++ {
		q.Publish(groupMsg("A", fmt.Sprint("A", i)))
		q.Publish(groupMsg(fmt.Sprint("B", i), fmt.Sprint("B", i)))
	}
	q.Dispatch(nil) // a: A0; b: B0, B1, B2 (from the middle)
	if q.Ready() != 2 || q.holes == 0 {
		t.Fatalf("ready %d holes %d", q.Ready(), q.holes)
	}
	snap := q.Snapshot()
	var r Queue
	if err := r.RestoreSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.Snapshot(), snap) || r.Ready() != 2 || r.Groups() != q.Groups() {
		t.Fatalf("restored: ready %d groups %d/%d", r.Ready(), r.Groups(), q.Groups())
	}
	var purged []string
	q.PurgeEach(func(e Entry) { purged = append(purged, string(e.Msg.Body)) })
	if fmt.Sprint(purged) != "[A1 A2]" || q.Ready() != 0 || q.ReadyBytes() != 0 {
		t.Fatalf("purged %v, ready %d", purged, q.Ready())
	}
}

func BenchmarkGroupsPublishDeliverAck(b *testing.B) {
	q := newGroupQueue()
	c := &Consumer{ID: 1, Prefetch: 100}
	q.AddConsumer(c)
	msgs := make([]*Message, 1000)
	for i := range msgs {
		msgs[i] = groupMsg(fmt.Sprint("group-", i), "0123456789abcdef")
	}
	var ds []Delivery
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		q.Publish(msgs[i%len(msgs)])
		ds = q.Dispatch(ds[:0])
		for _, d := range ds {
			q.Settle(d.Entry.Seq)
		}
	}
}
