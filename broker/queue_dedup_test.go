package broker_test

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

func declareDedupQueue(t *testing.T, ch *amqp091.Channel, name string, durable bool, args amqp091.Table) {
	t.Helper()
	a := amqp091.Table{"x-message-deduplication": true}
	for k, v := range args {
		a[k] = v
	}
	if _, err := ch.QueueDeclare(name, durable, false, false, false, a); err != nil {
		t.Fatal(err)
	}
}

func queueInfoOf(t *testing.T, s *brokertest.Server, name string) broker.QueueInfo {
	t.Helper()
	qs, err := s.Queues("/")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == name {
			return q
		}
	}
	t.Fatalf("no queue %q", name)
	return broker.QueueInfo{}
}

// TestQueueDedup: on a queue, a duplicate is not enqueued while the
// original is in the queue (ready, or delivered and not acknowledged,
// requeued too); once it was acknowledged or rejected the key may come
// again. Messages without the header are not checked.
func TestQueueDedup(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareDedupQueue(t, ch, "qd", false, nil)
	publishDedup(t, ch, "", "qd", false, "a", nil)
	publishDedup(t, ch, "", "qd", false, "a", nil)
	publishDedup(t, ch, "", "qd", false, nil, nil)
	publishDedup(t, ch, "", "qd", false, nil, nil)
	publishDedup(t, ch, "", "qd", false, int32(7), nil)
	publishDedup(t, ch, "", "qd", false, int32(7), nil)
	if n := depth(t, ch, "qd"); n != 4 {
		t.Fatalf("%d messages, want 4 (a, two without the header, 7)", n)
	}
	if qi := queueInfoOf(t, s, "qd"); !qi.Dedup || qi.DedupCached != 2 || qi.DedupDropped != 2 {
		t.Fatalf("info: dedup %v cached %d dropped %d", qi.Dedup, qi.DedupCached, qi.DedupDropped)
	}
	// Delivered, not acknowledged: still in the queue.
	m, ok, err := ch.Get("qd", false)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	publishDedup(t, ch, "", "qd", false, "a", nil)
	if n := depth(t, ch, "qd"); n != 3 {
		t.Fatalf("%d ready, want 3 (a is unacknowledged, its duplicate dropped)", n)
	}
	// Requeued: still in the queue.
	if err := m.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	publishDedup(t, ch, "", "qd", false, "a", nil)
	if n := depth(t, ch, "qd"); n != 4 {
		t.Fatalf("%d ready, want 4 (a requeued, its duplicate dropped)", n)
	}
	// Acknowledged: gone, so a may come again.
	m, _, _ = ch.Get("qd", false)
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	publishDedup(t, ch, "", "qd", false, "a", nil)
	if n := depth(t, ch, "qd"); n != 4 {
		t.Fatalf("%d ready, want 4 (a acknowledged, then enqueued again)", n)
	}
}

// TestQueueDedupConfirmsAndTTL: a dropped duplicate is confirmed with an
// ack; with x-cache-ttl a key is a duplicate for that long after its
// message was enqueued, even once the message is gone.
func TestQueueDedupConfirmsAndTTL(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareDedupQueue(t, ch, "qt", false, amqp091.Table{"x-cache-ttl": int32(300)})
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 4))
	publishDedup(t, ch, "", "qt", false, "a", nil)
	publishDedup(t, ch, "", "qt", false, "a", nil)
	for range 2 {
		if c := <-confirms; !c.Ack {
			t.Fatalf("confirm %d: nack", c.DeliveryTag)
		}
	}
	m, ok, err := ch.Get("qt", true)
	if err != nil || !ok || m.MessageCount != 0 {
		t.Fatalf("get: %v %v, %d left", ok, err, m.MessageCount)
	}
	publishDedup(t, ch, "", "qt", false, "a", nil)
	<-confirms
	if n := depth(t, ch, "qt"); n != 0 {
		t.Fatalf("%d messages, want 0 (consumed, but inside the TTL)", n)
	}
	time.Sleep(400 * time.Millisecond) // past the 300 ms window
	publishDedup(t, ch, "", "qt", false, "a", nil)
	<-confirms
	if n := depth(t, ch, "qt"); n != 1 {
		t.Fatalf("%d messages, want 1 (after the TTL)", n)
	}
}

// TestQueueDedupBounded: the cache keeps x-cache-size keys; the oldest
// is forgotten first.
func TestQueueDedupBounded(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareDedupQueue(t, ch, "qb", false, amqp091.Table{"x-cache-size": int32(2)})
	for _, k := range []string{"a", "b", "c", "c", "a"} {
		publishDedup(t, ch, "", "qb", false, k, nil)
	}
	if n := depth(t, ch, "qb"); n != 4 {
		t.Fatalf("%d messages, want 4 (a forgotten when c came)", n)
	}
	if qi := queueInfoOf(t, s, "qb"); qi.DedupCached != 2 {
		t.Fatalf("cache holds %d keys, want 2", qi.DedupCached)
	}
	_, err := ch.QueueDeclare("bad", false, false, false, false, amqp091.Table{"x-message-deduplication": true, "x-cache-size": int32(0)})
	if e, ok := err.(*amqp091.Error); !ok || e.Code != 406 {
		t.Fatalf("x-cache-size 0: %v, want 406", err)
	}
}

// TestQueueDedupRestart: across a restart the keys of the messages still
// in a durable queue stay (found again from them), and with
// x-cache-persistence=disk so do the TTL windows of messages gone.
func TestQueueDedupRestart(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	ch := open(t, dial(t, s))
	declareDedupQueue(t, ch, "in", true, nil)
	declareDedupQueue(t, ch, "disk", true, amqp091.Table{"x-cache-ttl": int32(600_000), "x-cache-persistence": "disk"})
	declareDedupQueue(t, ch, "mem", true, amqp091.Table{"x-cache-ttl": int32(600_000)})
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 3))
	for _, q := range []string{"in", "disk", "mem"} {
		publishDedup(t, ch, "", q, false, "a", nil)
		<-confirms
	}
	for _, q := range []string{"disk", "mem"} {
		if _, ok, err := ch.Get(q, true); !ok || err != nil {
			t.Fatal(q, ok, err)
		}
	}
	stop()

	s, stop = startOn(t, dir)
	defer stop()
	ch = open(t, dial(t, s))
	for _, q := range []string{"in", "disk", "mem"} {
		publishDedup(t, ch, "", q, false, "a", nil)
	}
	for q, want := range map[string]int{"in": 1, "disk": 0, "mem": 1} {
		if n := depth(t, ch, q); n != want {
			t.Errorf("%s: %d messages, want %d", q, n, want)
		}
	}
	// Deleting the queue deletes its stored cache: declared again, it
	// starts empty.
	if _, err := ch.QueueDelete("disk", false, false, false); err != nil {
		t.Fatal(err)
	}
	declareDedupQueue(t, ch, "disk", true, amqp091.Table{"x-cache-ttl": int32(600_000), "x-cache-persistence": "disk"})
	publishDedup(t, ch, "", "disk", false, "a", nil)
	if n := depth(t, ch, "disk"); n != 1 {
		t.Fatalf("redeclared: %d messages, want 1", n)
	}
}
