package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestCrashDelayedAndDedup SIGKILLs a real warren process with delayed
// messages waiting and persistent deduplication caches (an exchange's and
// a queue's) holding keys, all confirmed; after the restart every delayed
// message is routed once at its time (none lost, none twice), and a
// duplicate of a key inside its cache window is not let through.
func TestCrashDelayedAndDedup(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs the real binary")
	}
	const delayed, keys = 300, 100
	bin := buildWarren(t)
	dataDir := filepath.Join(t.TempDir(), "data")

	w := startWarren(t, bin, dataDir)
	url := fmt.Sprintf("amqp://guest:guest@%s/", w.addr)
	c, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ch.ExchangeDeclare("dx", "x-delayed-message", true, false, false, false, amqp091.Table{"x-delayed-type": "direct"}))
	_, err = ch.QueueDeclare("dq", true, false, false, false, nil)
	must(err)
	must(ch.QueueBind("dq", "k", "dx", false, nil))
	must(ch.ExchangeDeclare("dex", "x-message-deduplication", true, false, false, false,
		amqp091.Table{"x-cache-size": int32(10_000), "x-cache-ttl": int32(600_000), "x-cache-persistence": "disk"}))
	_, err = ch.QueueDeclare("dexq", true, false, false, false, nil)
	must(err)
	must(ch.QueueBind("dexq", "", "dex", false, nil))
	_, err = ch.QueueDeclare("ddq", true, false, false, false, amqp091.Table{"x-message-deduplication": true,
		"x-cache-size": int32(10_000), "x-cache-ttl": int32(600_000), "x-cache-persistence": "disk"})
	must(err)
	must(ch.Confirm(false))
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, delayed+2*keys))

	// Due 3 to 6 s from now: after the restart.
	start := time.Now()
	due := make(map[string]int64, delayed)
	for i := range delayed {
		d := int64(3000 + i*10)
		id := strconv.Itoa(i)
		due[id] = start.UnixMilli() + d
		must(ch.PublishWithContext(context.Background(), "dx", "k", false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, Headers: amqp091.Table{"x-delay": d}, Body: []byte(id)}))
	}
	for i := range keys {
		h := amqp091.Table{"x-deduplication-header": fmt.Sprint("key-", i)}
		must(ch.PublishWithContext(context.Background(), "dex", "", false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, Headers: h, Body: []byte("first")}))
		must(ch.PublishWithContext(context.Background(), "", "ddq", false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, Headers: h, Body: []byte("first")}))
	}
	for range delayed + 2*keys {
		if cf := <-confirms; !cf.Ack {
			t.Fatalf("publish %d nacked", cf.DeliveryTag)
		}
	}
	// The queue's messages are consumed: only the TTL windows of their
	// keys remain.
	for range keys {
		m, ok, err := ch.Get("ddq", false)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		must(m.Ack(false))
	}
	// An ack has no confirm: a round trip, then the kill.
	_, err = ch.QueueDeclarePassive("ddq", true, false, false, false, nil)
	must(err)
	if time.Since(start) > 2500*time.Millisecond {
		t.Skipf("setup took %v: the first delayed messages may have come due before the kill", time.Since(start))
	}
	w.kill()
	c.Close()

	w = startWarren(t, bin, dataDir)
	c, err = amqp091.Dial(fmt.Sprintf("amqp://guest:guest@%s/", w.addr))
	must(err)
	defer c.Close()
	ch, err = c.Channel()
	must(err)
	// An acknowledgement is not synced: the crash may have brought some
	// of ddq's messages back. Whatever is there now must not grow.
	q, err := ch.QueueDeclarePassive("ddq", true, false, false, false, nil)
	must(err)
	ddqBefore := q.Messages
	for i := range keys {
		h := amqp091.Table{"x-deduplication-header": fmt.Sprint("key-", i)}
		must(ch.PublishWithContext(context.Background(), "dex", "", false, false, amqp091.Publishing{Headers: h, Body: []byte("again")}))
		must(ch.PublishWithContext(context.Background(), "", "ddq", false, false, amqp091.Publishing{Headers: h, Body: []byte("again")}))
	}
	q, err = ch.QueueDeclarePassive("dexq", true, false, false, false, nil)
	must(err)
	if q.Messages != keys {
		t.Errorf("exchange cache: %d messages in dexq, want %d (the duplicates dropped)", q.Messages, keys)
	}
	q, err = ch.QueueDeclarePassive("ddq", true, false, false, false, nil)
	must(err)
	if q.Messages != ddqBefore {
		t.Errorf("queue cache: %d messages in ddq, want %d (the duplicates dropped)", q.Messages, ddqBefore)
	}

	d, err := ch.Consume("dq", "", true, false, false, false, nil)
	must(err)
	seen := make(map[string]bool, delayed)
	for len(seen) < delayed {
		select {
		case m := <-d:
			id := string(m.Body)
			if seen[id] {
				t.Fatalf("delayed message %s routed twice", id)
			}
			if _, ok := due[id]; !ok {
				t.Fatalf("unknown message %q", id)
			}
			if now := time.Now().UnixMilli(); now < due[id]-1 {
				t.Fatalf("delayed message %s routed %d ms early", id, due[id]-now)
			}
			seen[id] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d delayed messages routed", len(seen), delayed)
		}
	}
	// A last delayed message, due after every other: once it arrives, the
	// scheduler has passed every key stored before it, and none came twice.
	must(ch.PublishWithContext(context.Background(), "dx", "k", false, false, amqp091.Publishing{
		DeliveryMode: amqp091.Persistent, Headers: amqp091.Table{"x-delay": int32(1)}, Body: []byte("marker")}))
	for {
		select {
		case m := <-d:
			if string(m.Body) == "marker" {
				return
			}
			t.Fatalf("delayed message %s routed twice", m.Body)
		case <-time.After(30 * time.Second):
			t.Fatal("marker not routed")
		}
	}
}
