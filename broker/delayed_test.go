package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

func delayedCount(t *testing.T, s *brokertest.Server, name string) int64 {
	t.Helper()
	x, err := s.Exchange("/", name)
	if err != nil {
		t.Fatal(err)
	}
	return x.Delayed
}

func publishDelay(t *testing.T, ch *amqp091.Channel, ex, key string, mandatory bool, delay any, body string) {
	t.Helper()
	p := amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(body)}
	if delay != nil {
		p.Headers = amqp091.Table{"x-delay": delay}
	}
	if err := ch.PublishWithContext(context.Background(), ex, key, mandatory, false, p); err != nil {
		t.Fatal(err)
	}
}

// TestDelayedMessageExchange: the plugin's interface. Messages without a
// positive x-delay route at once; delayed ones are confirmed when stored,
// counted on the exchange, and routed through x-delayed-type at their due
// time, in due order, never before it.
func TestDelayedMessageExchange(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	if err := ch.ExchangeDeclare("dx", "x-delayed-message", true, false, false, false, amqp091.Table{"x-delayed-type": "direct"}); err != nil {
		t.Fatal(err)
	}
	// Redeclaring with the same type is equivalent; the routing type is not.
	if err := ch.ExchangeDeclare("dx", "x-delayed-message", true, false, false, false, amqp091.Table{"x-delayed-type": "direct"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("dq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("dq", "k", "dx", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 10))
	start := time.Now()
	publishDelay(t, ch, "dx", "k", false, int32(600), "d600")
	publishDelay(t, ch, "dx", "k", false, int64(300), "d300")
	publishDelay(t, ch, "dx", "k", false, int32(0), "now0")
	publishDelay(t, ch, "dx", "k", false, int32(-5), "now-5")
	publishDelay(t, ch, "dx", "k", false, nil, "now")
	publishDelay(t, ch, "dx", "other", false, int32(50), "unroutable")
	for range 6 {
		select {
		case c := <-confirms:
			if !c.Ack {
				t.Fatalf("publish %d nacked", c.DeliveryTag)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no confirm")
		}
	}
	if n := delayedCount(t, s, "dx"); n < 2 {
		t.Fatalf("exchange shows %d delayed messages right after publishing, want at least 2", n)
	}
	d, err := ch.Consume("dq", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		body  string
		delay time.Duration
	}{{"now0", 0}, {"now-5", 0}, {"now", 0}, {"d300", 300 * time.Millisecond}, {"d600", 600 * time.Millisecond}}
	for _, w := range want {
		m := recv(t, d)
		if string(m.Body) != w.body {
			t.Fatalf("got %q, want %q", m.Body, w.body)
		}
		if el := time.Since(start); el < w.delay {
			t.Fatalf("%q arrived after %v, before its delay %v", m.Body, el, w.delay)
		}
	}
	waitFor(t, "no delayed messages left", func() bool { return delayedCount(t, s, "dx") == 0 })
	noDelivery(t, d)
}

func TestDelayedDeclareErrors(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	for _, tt := range []struct {
		args amqp091.Table
		code int
	}{
		{nil, amqp091.PreconditionFailed},
		{amqp091.Table{"x-delayed-type": "x-delayed-message"}, amqp091.PreconditionFailed},
		{amqp091.Table{"x-delayed-type": "nope"}, amqp091.CommandInvalid},
	} {
		ch := open(t, c)
		err := ch.ExchangeDeclare("bad", "x-delayed-message", false, false, false, false, tt.args)
		if tt.code == amqp091.CommandInvalid {
			// 503 is a connection error.
			expectCode(t, err, tt.code)
			c = dial(t, s)
			continue
		}
		expectCode(t, err, tt.code)
	}
	ch := open(t, c)
	if err := ch.ExchangeDeclare("dt", "x-delayed-message", false, false, false, false, amqp091.Table{"x-delayed-type": "topic"}); err != nil {
		t.Fatal(err)
	}
	err := ch.ExchangeDeclare("dt", "topic", false, false, false, false, nil)
	expectCode(t, err, amqp091.PreconditionFailed)
}

// TestDelayedExchangeArgument: LavinMQ's x-delayed-exchange=true on a
// topic exchange delays, then routes as topic.
func TestDelayedExchangeArgument(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	if err := ch.ExchangeDeclare("tx", "topic", false, false, false, false, amqp091.Table{"x-delayed-exchange": true}); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "a.*", "tx", false, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	publishDelay(t, ch, "tx", "a.b", false, int16(200), "later")
	publishDelay(t, ch, "tx", "a.c", false, nil, "first")
	d, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := recv(t, d); string(m.Body) != "first" {
		t.Fatalf("got %q first", m.Body)
	}
	m := recv(t, d)
	if string(m.Body) != "later" || m.RoutingKey != "a.b" || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("got %q (%s) after %v", m.Body, m.RoutingKey, time.Since(start))
	}
}

// TestDelayedSurvivesRestart: delayed messages are on disk; after a
// restart on the same data directory they are counted and arrive at their
// time, not before, and once.
func TestDelayedSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	ch := open(t, dial(t, s))
	if err := ch.ExchangeDeclare("dx", "x-delayed-message", true, false, false, false, amqp091.Table{"x-delayed-type": "fanout"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("dq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("dq", "", "dx", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 2))
	start := time.Now()
	publishDelay(t, ch, "dx", "", false, int32(1500), "after-restart")
	publishDelay(t, ch, "dx", "", false, int64(3*365*24*3600*1000), "in-three-years")
	for range 2 {
		if c := <-confirms; !c.Ack {
			t.Fatal("nacked")
		}
	}
	stop()

	s, stop = startOn(t, dir)
	defer stop()
	if n := delayedCount(t, s, "dx"); n != 2 {
		t.Fatalf("%d delayed messages after restart, want 2", n)
	}
	ch = open(t, dial(t, s))
	d, err := ch.Consume("dq", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, d)
	if string(m.Body) != "after-restart" || time.Since(start) < 1500*time.Millisecond {
		t.Fatalf("got %q after %v", m.Body, time.Since(start))
	}
	waitFor(t, "one delayed message left", func() bool { return delayedCount(t, s, "dx") == 1 })
	noDelivery(t, d)
}

// TestDelayedDroppedWithExchange: deleting the exchange drops its delayed
// messages; a new exchange of the same name does not inherit them.
func TestDelayedDroppedWithExchange(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	args := amqp091.Table{"x-delayed-type": "fanout"}
	if err := ch.ExchangeDeclare("dx", "x-delayed-message", true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("dq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("dq", "", "dx", false, nil); err != nil {
		t.Fatal(err)
	}
	publishDelay(t, ch, "dx", "", false, int32(300), "old")
	waitFor(t, "the message is delayed", func() bool { return delayedCount(t, s, "dx") == 1 })
	if err := ch.ExchangeDelete("dx", false, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("dx", "x-delayed-message", true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	if n := delayedCount(t, s, "dx"); n != 0 {
		t.Fatalf("new exchange shows %d delayed messages", n)
	}
	if err := ch.QueueBind("dq", "", "dx", false, nil); err != nil {
		t.Fatal(err)
	}
	// Due after the old one: messages fire in due order, so had the old
	// one survived it would come first.
	publishDelay(t, ch, "dx", "", false, int32(600), "new")
	d, err := ch.Consume("dq", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := recv(t, d); string(m.Body) != "new" {
		t.Fatalf("got %q, want only the new exchange's message", m.Body)
	}
	noDelivery(t, d)
}

// TestDelayedMandatory: a mandatory delayed publish is not returned at
// publish time (nothing can be known then); at its due time a message no
// binding takes goes to the alternate exchange.
func TestDelayedMandatory(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
	if err := ch.ExchangeDeclare("ae", "fanout", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("aeq", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("aeq", "", "ae", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("dx", "x-delayed-message", false, false, false, false,
		amqp091.Table{"x-delayed-type": "direct", "alternate-exchange": "ae"}); err != nil {
		t.Fatal(err)
	}
	publishDelay(t, ch, "dx", "nobody", true, int32(100), "to-ae")
	d, err := ch.Consume("aeq", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := recv(t, d); string(m.Body) != "to-ae" {
		t.Fatalf("got %q", m.Body)
	}
	select {
	case r := <-returns:
		t.Fatalf("returned %q", r.Body)
	default:
	}
}

// TestDelayedSchedulerSleeps: with only far-off messages waiting, the
// scheduler sleeps until their time instead of reading the store again
// and again.
func TestDelayedSchedulerSleeps(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	if err := ch.ExchangeDeclare("dx", "x-delayed-message", false, false, false, false, amqp091.Table{"x-delayed-type": "direct"}); err != nil {
		t.Fatal(err)
	}
	publishDelay(t, ch, "dx", "k", false, int32(3_600_000), "in-an-hour")
	waitFor(t, "the message is delayed", func() bool { return delayedCount(t, s, "dx") == 1 })
	before := s.DelayedRounds()
	time.Sleep(300 * time.Millisecond)
	if n := s.DelayedRounds() - before; n > 2 {
		t.Fatalf("the scheduler read the store %d times in 300 ms with nothing due", n)
	}
}

// TestDelayedWindowOrder: messages stored while the scheduler's window
// is loaded and due before its end are routed in due order with those
// already in it, none lost or duplicated, also when the window
// overflows its bound (kept small here) and is refilled from the store
// while messages are stored.
func TestDelayedWindowOrder(t *testing.T) {
	broker.SetDelayedWindowCount(t, 64)
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	if err := ch.ExchangeDeclare("dx", "x-delayed-message", true, false, false, false, amqp091.Table{"x-delayed-type": "direct"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("dq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("dq", "k", "dx", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 1000))
	confirm := func(n int) {
		t.Helper()
		for range n {
			select {
			case c := <-confirms:
				if !c.Ack {
					t.Fatalf("publish %d nacked", c.DeliveryTag)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no confirm")
			}
		}
	}
	// Later ones: due in 4 s, in publish order; more than the window
	// holds, so some wait in the store only.
	const later, sooner = 300, 100
	var want []string
	for i := range later {
		publishDelay(t, ch, "dx", "k", false, int32(4000), fmt.Sprintf("later-%03d", i))
	}
	confirm(later)
	// Sooner ones, stored while the window holds later ones: due before
	// them all.
	for i := range sooner {
		publishDelay(t, ch, "dx", "k", false, int32(1000), fmt.Sprintf("sooner-%03d", i))
		want = append(want, fmt.Sprintf("sooner-%03d", i))
	}
	for i := range later {
		want = append(want, fmt.Sprintf("later-%03d", i))
	}
	confirm(sooner)
	d, err := ch.Consume("dq", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if m := recv(t, d); string(m.Body) != w {
			t.Fatalf("message %d: got %q, want %q", i, m.Body, w)
		}
	}
	waitFor(t, "no delayed messages left", func() bool { return delayedCount(t, s, "dx") == 0 })
	noDelivery(t, d)
}
