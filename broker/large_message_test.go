package broker_test

import (
	"bytes"
	"context"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// patterned is n bytes that show a misplaced or missing piece.
func patterned(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 1024 {
		b[i] = byte(i/1024) ^ seed
		b[min(i+1, n-1)] = byte(i/(1024*256)) + seed
	}
	return b
}

// TestLargePersistentMessagesConfirmedAndKept: persistent messages over
// Badger's 64 MiB value limit, up to the 128 MiB maximum, published to a
// durable queue are confirmed (ack, not nack), consumed intact, and survive a
// restart.
func TestLargePersistentMessagesConfirmedAndKept(t *testing.T) {
	if testing.Short() {
		t.Skip("large messages")
	}
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	c := dial(t, s)
	ch := open(t, c)
	if _, err := ch.QueueDeclare("big", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	sizes := []int{70 << 20, 128 << 20}
	for i, n := range sizes {
		body := patterned(n, byte(i))
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "big", false, false,
			amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
			t.Fatalf("message of %d bytes: confirmed %v (want ack), %v", n, ok, err)
		}
	}
	m, ok, err := ch.Get("big", false)
	if err != nil || !ok || !bytes.Equal(m.Body, patterned(sizes[0], 0)) {
		t.Fatalf("get before restart: ok %v, %d bytes, %v", ok, len(m.Body), err)
	}
	m.Body = nil
	if err := m.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	stop()

	s, stop = startOn(t, dir)
	defer stop()
	ch = open(t, dial(t, s))
	for i, n := range sizes {
		m, ok, err := ch.Get("big", false)
		if err != nil || !ok || !bytes.Equal(m.Body, patterned(n, byte(i))) {
			t.Fatalf("get %d after restart: ok %v, %d bytes, %v", i, ok, len(m.Body), err)
		}
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLargeStreamMessageConfirmedAndKept: a stream message over Badger's
// 64 MiB value limit is confirmed, read back intact and kept across a
// restart.
func TestLargeStreamMessageConfirmedAndKept(t *testing.T) {
	if testing.Short() {
		t.Skip("large messages")
	}
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	c := dial(t, s)
	ch := open(t, c)
	declareStream(t, ch, "s", nil)
	body := patterned(70<<20, 7)
	if !publishOneConfirmed(t, ch, "s", string(body)) {
		t.Fatal("large stream message nacked")
	}
	if !publishOneConfirmed(t, ch, "s", "after") {
		t.Fatal("small stream message nacked")
	}
	check := func(c *amqp091.Connection, when string) {
		cch, d := consumeStream(t, c, "s", 10, amqp091.Table{"x-stream-offset": "first"})
		m := recv(t, d)
		if !bytes.Equal(m.Body, body) || offsetOf(t, m) != 0 {
			t.Fatalf("%s: first delivery has %d bytes at offset %d", when, len(m.Body), offsetOf(t, m))
		}
		if m := recv(t, d); string(m.Body) != "after" || offsetOf(t, m) != 1 {
			t.Fatalf("%s: second delivery %q at offset %d", when, m.Body, offsetOf(t, m))
		}
		_ = cch.Close()
	}
	check(c, "before restart")
	_ = c.Close()
	stop()
	s, stop = startOn(t, dir)
	defer stop()
	check(dial(t, s), "after restart")
}
