package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker/brokertest"
)

func publishDedup(t *testing.T, ch *amqp091.Channel, ex, key string, mandatory bool, dedup any, hdr amqp091.Table) {
	t.Helper()
	h := amqp091.Table{}
	for k, v := range hdr {
		h[k] = v
	}
	if dedup != nil {
		h["x-deduplication-header"] = dedup
	}
	if err := ch.PublishWithContext(context.Background(), ex, key, mandatory, false,
		amqp091.Publishing{DeliveryMode: amqp091.Persistent, Headers: h, Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
}

func depth(t *testing.T, ch *amqp091.Channel, q string) int {
	t.Helper()
	// A round trip after the publishes: they are routed before it returns.
	qi, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return qi.Messages
}

func dedupSetup(t *testing.T, ch *amqp091.Channel, ex, typ string, durable bool, args amqp091.Table) string {
	t.Helper()
	if err := ch.ExchangeDeclare(ex, typ, durable, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	q := ex + "-q"
	if _, err := ch.QueueDeclare(q, durable, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q, "k", ex, false, nil); err != nil {
		t.Fatal(err)
	}
	return q
}

// TestDedupExchange: the plugin's exchange type. A message whose
// x-deduplication-header was seen is not routed (a mandatory one comes
// back); one without the header is not checked; the cache is bounded.
func TestDedupExchange(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	err := ch.ExchangeDeclare("nosize", "x-message-deduplication", false, false, false, false, nil)
	expectCode(t, err, amqp091.PreconditionFailed)
	ch = open(t, c)
	returns := ch.NotifyReturn(make(chan amqp091.Return, 4))
	q := dedupSetup(t, ch, "dd", "x-message-deduplication", false, amqp091.Table{"x-cache-size": int32(2)})
	publishDedup(t, ch, "dd", "any", false, "a", nil)
	publishDedup(t, ch, "dd", "any", false, "a", nil)
	publishDedup(t, ch, "dd", "any", false, "b", nil)
	publishDedup(t, ch, "dd", "any", false, nil, nil)
	publishDedup(t, ch, "dd", "any", false, nil, nil)
	if n := depth(t, ch, q); n != 4 {
		t.Fatalf("%d messages routed, want 4 (a, b and two without the header)", n)
	}
	publishDedup(t, ch, "dd", "any", true, "b", nil)
	select {
	case r := <-returns:
		if r.ReplyCode != amqp091.NoRoute {
			t.Fatalf("return %d", r.ReplyCode)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mandatory duplicate not returned")
	}
	// Size 2: c evicts a, which is then new again.
	publishDedup(t, ch, "dd", "any", false, "c", nil)
	publishDedup(t, ch, "dd", "any", false, "a", nil)
	if n := depth(t, ch, q); n != 6 {
		t.Fatalf("%d messages, want 6 (c, then a again after its eviction)", n)
	}
}

// TestDedupTTL: x-cache-ttl on the exchange, and the per-message
// x-cache-ttl header, end a key's uniqueness window.
func TestDedupTTL(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	// LavinMQ's form: the argument on a direct exchange, which routes as direct.
	q := dedupSetup(t, ch, "dt", "direct", false, amqp091.Table{"x-message-deduplication": true, "x-cache-ttl": int32(200)})
	publishDedup(t, ch, "dt", "k", false, "a", nil)
	publishDedup(t, ch, "dt", "k", false, "a", nil)
	publishDedup(t, ch, "dt", "other", false, "z", nil)
	publishDedup(t, ch, "dt", "k", false, "long", amqp091.Table{"x-cache-ttl": int32(60_000)})
	if n := depth(t, ch, q); n != 2 {
		t.Fatalf("%d messages, want 2", n)
	}
	time.Sleep(300 * time.Millisecond) // past the 200 ms TTL
	publishDedup(t, ch, "dt", "k", false, "a", nil)
	publishDedup(t, ch, "dt", "k", false, "long", nil)
	if n := depth(t, ch, q); n != 3 {
		t.Fatalf("%d messages, want 3 (a again after its TTL; long still inside its own)", n)
	}
}

// TestDedupPersistentCache: with x-cache-persistence=disk the cache
// survives a restart; with memory it does not.
func TestDedupPersistentCache(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	ch := open(t, dial(t, s))
	qd := dedupSetup(t, ch, "disk", "x-message-deduplication", true, amqp091.Table{"x-cache-size": int32(100), "x-cache-persistence": "disk"})
	qm := dedupSetup(t, ch, "mem", "x-message-deduplication", true, amqp091.Table{"x-cache-size": int32(100)})
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 2))
	publishDedup(t, ch, "disk", "", false, "a", nil)
	publishDedup(t, ch, "mem", "", false, "a", nil)
	<-confirms
	<-confirms
	stop()

	s, stop = startOn(t, dir)
	defer stop()
	ch = open(t, dial(t, s))
	publishDedup(t, ch, "disk", "", false, "a", nil)
	publishDedup(t, ch, "mem", "", false, "a", nil)
	if n := depth(t, ch, qd); n != 1 {
		t.Fatalf("disk cache: %d messages, want 1 (the duplicate after the restart dropped)", n)
	}
	if n := depth(t, ch, qm); n != 2 {
		t.Fatalf("memory cache: %d messages, want 2", n)
	}
}

// TestDedupHeaderValueTypes: the key of each type of header value. A
// string and a byte array of the same bytes are one key, integers of the
// same value whatever their width one key, the string "5" not the integer
// 5's; a long string is a key as any; without the header nothing is
// checked.
func TestDedupHeaderValueTypes(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	q := dedupSetup(t, ch, "types", "x-message-deduplication", false, amqp091.Table{"x-cache-size": int32(100)})
	long := strings.Repeat("long-", 100)
	for _, v := range []any{
		"k", []byte("k"), // one key
		int32(5), int64(5), int16(5), // one key
		"5",                      // another
		long, long, []byte(long), // one key
	} {
		publishDedup(t, ch, "types", "", false, v, amqp091.Table{"other": "x"})
	}
	publishDedup(t, ch, "types", "", false, nil, amqp091.Table{"other": "x"})
	publishDedup(t, ch, "types", "", false, nil, nil)
	if n := depth(t, ch, q); n != 6 {
		t.Fatalf("%d messages routed, want 6 (k, 5, \"5\", the long one and two without the header)", n)
	}
}

// TestDedupExpiredAddedAgain: a key found expired is added again as the
// newest entry, and the place it had does not evict anything.
func TestDedupExpiredAddedAgain(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	q := dedupSetup(t, ch, "again", "x-message-deduplication", false, amqp091.Table{"x-cache-size": int32(2), "x-cache-ttl": int32(200)})
	publishDedup(t, ch, "again", "", false, "a", nil)
	depth(t, ch, q)                    // a is in the cache
	time.Sleep(300 * time.Millisecond) // past a's TTL
	publishDedup(t, ch, "again", "", false, "a", amqp091.Table{"x-cache-ttl": int32(60_000)})
	publishDedup(t, ch, "again", "", false, "b", longCacheTTL)
	publishDedup(t, ch, "again", "", false, "a", nil)          // a duplicate: a is kept
	publishDedup(t, ch, "again", "", false, "c", longCacheTTL) // evicts a, the oldest
	publishDedup(t, ch, "again", "", false, "b", nil)          // a duplicate
	publishDedup(t, ch, "again", "", false, "a", nil)          // new again
	if n := depth(t, ch, q); n != 5 {
		t.Fatalf("%d messages routed, want 5 (a, a again, b, c, a after its eviction)", n)
	}
}

var longCacheTTL = amqp091.Table{"x-cache-ttl": int32(60_000)}

// TestDedupPersistentEviction: an entry evicted from a persistent cache
// is forgotten by the store too: after a restart its key is new, the
// others still duplicates.
func TestDedupPersistentEviction(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	ch := open(t, dial(t, s))
	q := dedupSetup(t, ch, "pe", "x-message-deduplication", true, amqp091.Table{"x-cache-size": int32(2), "x-cache-persistence": "disk"})
	for _, k := range []any{"a", "b", int32(3)} { // 3 evicts a
		publishDedup(t, ch, "pe", "", false, k, nil)
	}
	if n := depth(t, ch, q); n != 3 {
		t.Fatalf("%d messages, want 3", n)
	}
	stop()

	s, stop = startOn(t, dir)
	defer stop()
	ch = open(t, dial(t, s))
	for _, k := range []any{"b", int64(3), "a"} {
		publishDedup(t, ch, "pe", "", false, k, nil)
	}
	if n := depth(t, ch, q); n != 4 {
		t.Fatalf("%d messages after the restart, want 4 (b and 3 dropped, a new)", n)
	}
}
