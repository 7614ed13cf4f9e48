package broker_test

import (
	"context"
	"math"
	"strconv"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker/brokertest"
)

func hashSetup(t *testing.T, ch *amqp091.Channel, ex, typ string, args amqp091.Table, binds map[string]string) {
	t.Helper()
	if err := ch.ExchangeDeclare(ex, typ, false, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	for q, key := range binds {
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q, key, ex, false, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func queueDepths(t *testing.T, ch *amqp091.Channel, names ...string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, n := range names {
		q, err := ch.QueueDeclarePassive(n, false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = q.Messages
	}
	return out
}

func publishAll(t *testing.T, ch *amqp091.Channel, ex string, n int, p func(i int) (string, amqp091.Publishing)) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		key, pub := p(i)
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), ex, key, false, false, pub)
		if err != nil {
			t.Fatal(err)
		}
		if i == n-1 {
			if !dc.Wait() {
				t.Fatal("nacked")
			}
		}
	}
}

// TestConsistentHashExchange: binding keys are weights; each queue's share
// of 10,000 distinct routing keys is within 3% of its weight's share, and
// one key always reaches one queue.
func TestConsistentHashExchange(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	hashSetup(t, ch, "ch", "x-consistent-hash", nil, map[string]string{"h1": "1", "h2": "2", "h3": "3"})
	const n = 10_000
	publishAll(t, ch, "ch", n, func(i int) (string, amqp091.Publishing) {
		return "order-" + strconv.Itoa(i), amqp091.Publishing{}
	})
	got := queueDepths(t, ch, "h1", "h2", "h3")
	for q, w := range map[string]float64{"h1": 1, "h2": 2, "h3": 3} {
		if share := float64(got[q]) / n; math.Abs(share-w/6) > 0.03 {
			t.Errorf("%s: %.3f of the messages, want %.3f ± 0.03", q, share, w/6)
		}
	}
	if _, err := ch.QueuePurge("h1", false); err != nil {
		t.Fatal(err)
	}
	ch.QueuePurge("h2", false)
	ch.QueuePurge("h3", false)
	publishAll(t, ch, "ch", 50, func(int) (string, amqp091.Publishing) { return "same-key", amqp091.Publishing{} })
	got = queueDepths(t, ch, "h1", "h2", "h3")
	if !(got["h1"] == 50 || got["h2"] == 50 || got["h3"] == 50) {
		t.Fatalf("one key spread over queues: %v", got)
	}
	// A binding key that is not a weight is refused.
	err := ch.QueueBind("h1", "heavy", "ch", false, nil)
	expectCode(t, err, amqp091.PreconditionFailed)
}

// TestConsistentHashHeaderAndProperty: hash-header and hash-property hash
// the header's or property's value instead of the routing key.
func TestConsistentHashHeaderAndProperty(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	hashSetup(t, ch, "chh", "x-consistent-hash", amqp091.Table{"hash-header": "user"}, map[string]string{"u1": "1", "u2": "1", "u3": "1"})
	hashSetup(t, ch, "chp", "x-consistent-hash", amqp091.Table{"hash-property": "message_id"}, map[string]string{"p1": "1", "p2": "1", "p3": "1"})
	// Routing keys differ, the hashed value does not: one queue each.
	publishAll(t, ch, "chh", 60, func(i int) (string, amqp091.Publishing) {
		return strconv.Itoa(i), amqp091.Publishing{Headers: amqp091.Table{"user": "alice"}}
	})
	publishAll(t, ch, "chp", 60, func(i int) (string, amqp091.Publishing) {
		return strconv.Itoa(i), amqp091.Publishing{MessageId: "m-42"}
	})
	for _, qs := range [][]string{{"u1", "u2", "u3"}, {"p1", "p2", "p3"}} {
		got := queueDepths(t, ch, qs...)
		if !(got[qs[0]] == 60 || got[qs[1]] == 60 || got[qs[2]] == 60) {
			t.Fatalf("messages with one hashed value spread over queues: %v", got)
		}
	}
	// Different values spread.
	publishAll(t, ch, "chh", 300, func(i int) (string, amqp091.Publishing) {
		return "k", amqp091.Publishing{Headers: amqp091.Table{"user": "u" + strconv.Itoa(i)}}
	})
	if got := queueDepths(t, ch, "u1", "u2", "u3"); got["u1"] == 360 || got["u2"] == 360 || got["u3"] == 360 {
		t.Fatalf("distinct header values all in one queue: %v", got)
	}
	for _, args := range []amqp091.Table{
		{"hash-header": "a", "hash-property": "message_id"},
		{"hash-property": "priority"},
	} {
		ch := open(t, c)
		err := ch.ExchangeDeclare("badh", "x-consistent-hash", false, false, false, false, args)
		expectCode(t, err, amqp091.PreconditionFailed)
	}
}

// TestModulusHashExchange: binding keys are ignored; keys spread evenly and
// one key always reaches one queue.
func TestModulusHashExchange(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	hashSetup(t, ch, "mh", "x-modulus-hash", nil, map[string]string{"m1": "x", "m2": "y", "m3": "", "m4": "whatever"})
	const n = 8000
	publishAll(t, ch, "mh", n, func(i int) (string, amqp091.Publishing) { return "k" + strconv.Itoa(i), amqp091.Publishing{} })
	got := queueDepths(t, ch, "m1", "m2", "m3", "m4")
	for q, c := range got {
		if share := float64(c) / n; math.Abs(share-0.25) > 0.03 {
			t.Errorf("%s: %.3f of the messages, want 0.25 ± 0.03", q, share)
		}
	}
	for _, q := range []string{"m1", "m2", "m3", "m4"} {
		ch.QueuePurge(q, false)
	}
	publishAll(t, ch, "mh", 40, func(int) (string, amqp091.Publishing) { return "stable", amqp091.Publishing{} })
	got = queueDepths(t, ch, "m1", "m2", "m3", "m4")
	if !(got["m1"] == 40 || got["m2"] == 40 || got["m3"] == 40 || got["m4"] == 40) {
		t.Fatalf("one key spread over queues: %v", got)
	}
}
