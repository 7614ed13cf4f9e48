package broker_test

import (
	"context"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestTTLCountsAcrossRestart: a persistent message's expiry is journaled
// with it, so time spent while the broker was down counts: a message whose
// TTL ran out meanwhile is dead-lettered (not delivered) after the restart,
// instead of getting a whole TTL again from the restart.
func TestTTLCountsAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	ch := open(t, dial(t, s))
	if _, err := ch.QueueDeclare("dlq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("ttlq", true, false, false, false, amqp091.Table{
		"x-message-ttl":             int32(2000),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": "dlq",
	}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []amqp091.Publishing{
		{DeliveryMode: amqp091.Persistent, Body: []byte("short")},
		{DeliveryMode: amqp091.Persistent, Body: []byte("second")},
	} {
		if err := ch.PublishWithContext(context.Background(), "", "ttlq", false, false, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	stop()
	time.Sleep(2200 * time.Millisecond) // longer than the TTL, with the broker down

	s, stop = startOn(t, dir)
	defer stop()
	ch = open(t, dial(t, s))
	// Well before a TTL counted from the restart would run out.
	waitForWithin(t, time.Second, "both messages dead-lettered", func() bool {
		q, err := ch.QueueDeclarePassive("dlq", true, false, false, false, nil)
		return err == nil && q.Messages == 2
	})
	q, err := ch.QueueDeclarePassive("ttlq", true, false, false, false, nil)
	if err != nil || q.Messages != 0 {
		t.Fatalf("ttlq has %d messages after its TTL ran out during the restart (%v)", q.Messages, err)
	}
	m, ok, err := ch.Get("dlq", true)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	death, _ := m.Headers["x-death"].([]any)
	if len(death) != 1 || death[0].(amqp091.Table)["reason"] != "expired" {
		t.Fatalf("x-death %v", m.Headers["x-death"])
	}
}
