package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// Queue and exchange features: queue arguments, TTL, dead-lettering,
// length limits, alternate exchanges, priorities, single active consumer.

func mustOK(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// declareDLX declares fanout exchange dlx with queue dlq bound to it.
func declareDLX(t testing.TB, ch *amqp091.Channel, kind string) {
	t.Helper()
	mustOK(t, ch.ExchangeDeclare("dlx", kind, false, false, false, false, nil))
	_, err := ch.QueueDeclare("dlq", false, false, false, false, nil)
	mustOK(t, err)
	mustOK(t, ch.QueueBind("dlq", "#", "dlx", false, nil))
}

func publish(t testing.TB, ch *amqp091.Channel, ex, key string, p amqp091.Publishing) {
	t.Helper()
	mustOK(t, ch.Publish(ex, key, false, false, p))
}

// getOne polls basic.get on q until a message comes.
func getOne(t testing.TB, ch *amqp091.Channel, q string) amqp091.Delivery {
	t.Helper()
	var d amqp091.Delivery
	waitFor(t, "a message in "+q, func() bool {
		m, ok, err := ch.Get(q, true)
		mustOK(t, err)
		d = m
		return ok
	})
	return d
}

// xDeath returns the first x-death entry of d.
func xDeath(t testing.TB, d amqp091.Delivery) amqp091.Table {
	t.Helper()
	deaths, ok := d.Headers["x-death"].([]any)
	if !ok || len(deaths) == 0 {
		t.Fatalf("no x-death in %v", d.Headers)
	}
	e, ok := deaths[0].(amqp091.Table)
	if !ok {
		t.Fatalf("x-death[0] is %T", deaths[0])
	}
	return e
}

func checkDeath(t testing.TB, d amqp091.Delivery, queue, reason, exchange string, keys []string, count int64) {
	t.Helper()
	e := xDeath(t, d)
	if e["queue"] != queue || e["reason"] != reason || e["exchange"] != exchange || e["count"] != count {
		t.Fatalf("x-death %v, want queue %s reason %s exchange %q count %d", e, queue, reason, exchange, count)
	}
	rks, _ := e["routing-keys"].([]any)
	if len(rks) != len(keys) {
		t.Fatalf("routing-keys %v, want %v", rks, keys)
	}
	for i := range keys {
		if rks[i] != keys[i] {
			t.Fatalf("routing-keys %v, want %v", rks, keys)
		}
	}
	if _, ok := e["time"].(time.Time); !ok {
		t.Fatalf("x-death time is %T", e["time"])
	}
	for k, want := range map[string]string{
		"x-first-death-queue": queue, "x-first-death-reason": reason, "x-first-death-exchange": exchange,
		"x-last-death-queue": queue, "x-last-death-reason": reason, "x-last-death-exchange": exchange,
	} {
		if d.Headers[k] != want {
			t.Fatalf("%s = %v, want %q", k, d.Headers[k], want)
		}
	}
}

func TestQueueArgsInvalid(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	for _, tc := range []struct {
		args amqp091.Table
		text string
	}{
		{amqp091.Table{"x-max-length": int32(-1)}, "invalid arg 'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}"},
		{amqp091.Table{"x-max-length-bytes": "10"}, `invalid arg 'x-max-length-bytes' for queue 'q' in vhost '/': "expected integer, got longstr"`},
		{amqp091.Table{"x-message-ttl": "1000"}, `invalid arg 'x-message-ttl' for queue 'q' in vhost '/': "expected integer, got longstr"`},
		{amqp091.Table{"x-message-ttl": 1.5}, `invalid arg 'x-message-ttl' for queue 'q' in vhost '/': "expected integer, got double"`},
		{amqp091.Table{"x-message-ttl": int64(-5)}, "invalid arg 'x-message-ttl' for queue 'q' in vhost '/': {value_negative,-5}"},
		{amqp091.Table{"x-message-ttl": int64(315360000001)}, "invalid arg 'x-message-ttl' for queue 'q' in vhost '/': {value_too_large,315360000001}"},
		{amqp091.Table{"x-expires": int32(0)}, "invalid arg 'x-expires' for queue 'q' in vhost '/': {value_zero,0}"},
		{amqp091.Table{"x-overflow": "drop-tail"}, "invalid arg 'x-overflow' for queue 'q' in vhost '/': invalid_overflow"},
		{amqp091.Table{"x-max-priority": int32(256)}, "invalid arg 'x-max-priority' for queue 'q' in vhost '/': {max_value_exceeded,256}"},
		{amqp091.Table{"x-single-active-consumer": "yes"}, "invalid arg 'x-single-active-consumer' for queue 'q' in vhost '/': {unacceptable_type,longstr}"},
		{amqp091.Table{"x-dead-letter-routing-key": "k"}, "invalid arg 'x-dead-letter-routing-key' for queue 'q' in vhost '/': routing_key_but_no_dlx_defined"},
		{amqp091.Table{"x-dead-letter-exchange": int32(1)}, "invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'"},
		{amqp091.Table{"x-queue-type": "bogus"}, `invalid arg 'x-queue-type' for queue 'q' in vhost '/': "unsupported queue type 'bogus'"`},
		{amqp091.Table{"x-queue-mode": "bogus"}, `invalid arg 'x-queue-mode' for queue 'q' in vhost '/': "unsupported queue mode 'bogus'"`},
		{amqp091.Table{"x-max-in-memory-length": int32(1)}, "invalid arg 'x-max-in-memory-length' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"},
		{amqp091.Table{"x-delivery-limit": int32(-2)}, "invalid arg 'x-delivery-limit' for queue 'q' in vhost '/': {value_negative,-2}"},
		{amqp091.Table{"x-queue-type": "quorum"}, "invalid property 'non-durable' for queue 'q' in vhost '/'"},
		{amqp091.Table{"x-queue-type": "quorum", "x-max-priority": int32(5)}, "invalid arg 'x-max-priority' for queue 'q' in vhost '/' of queue type rabbit_quorum_queue"},
		{amqp091.Table{"x-queue-type": "quorum", "x-quorum-initial-group-size": int32(0)}, "invalid arg 'x-quorum-initial-group-size' for queue 'q' in vhost '/': {value_zero,0}"},
		{amqp091.Table{"x-queue-type": "quorum", "x-quorum-initial-group-size": int64(-3)}, "invalid arg 'x-quorum-initial-group-size' for queue 'q' in vhost '/': {value_negative,-3}"},
		{amqp091.Table{"x-queue-type": "quorum", "x-quorum-initial-group-size": "3"}, `invalid arg 'x-quorum-initial-group-size' for queue 'q' in vhost '/': "expected integer, got longstr"`},
		{amqp091.Table{"x-queue-type": "quorum", "x-queue-leader-locator": "nope"}, "invalid arg 'x-queue-leader-locator' for queue 'q' in vhost '/': invalid_queue_locator_arg"},
		{amqp091.Table{"x-queue-type": "quorum", "x-queue-leader-locator": int32(1)}, "invalid arg 'x-queue-leader-locator' for queue 'q' in vhost '/': {unacceptable_type,signedint}"},
		{amqp091.Table{"x-queue-type": "stream", "x-queue-leader-locator": "min-masters"}, "invalid arg 'x-queue-leader-locator' for queue 'q' in vhost '/': invalid_queue_locator_arg"},
		{amqp091.Table{"x-queue-master-locator": "balanced"}, "invalid arg 'x-queue-master-locator' for queue 'q' in vhost '/': invalid_queue_locator_arg"},
	} {
		ch := open(t, c)
		// past the quorum queue's and stream's durability check
		durable := tc.args["x-quorum-initial-group-size"] != nil || tc.args["x-queue-leader-locator"] != nil
		_, err := ch.QueueDeclare("q", durable, false, false, false, tc.args)
		expectReason(t, expectCode(t, err, 406), "PRECONDITION_FAILED - "+tc.text)
	}
	ch := open(t, c)
	args := amqp091.Table{
		"x-queue-type": "classic", "x-message-ttl": int32(1000), "x-expires": int32(60000),
		"x-max-length": int32(10), "x-max-length-bytes": int64(1000), "x-overflow": "reject-publish-dlx",
		"x-max-priority": int32(5), "x-single-active-consumer": true, "x-dead-letter-exchange": "dlx",
		"x-dead-letter-routing-key": "k", "x-delivery-limit": int32(3), "x-custom": "kept", "x-queue-mode": "lazy",
		"x-queue-leader-locator": "balanced", "x-queue-master-locator": "min-masters",
	}
	_, err := ch.QueueDeclare("q", false, false, false, false, args)
	mustOK(t, err)
	qi, err := s.Queue("/", "q")
	mustOK(t, err)
	if qi.Arguments["x-custom"] != "kept" || len(qi.Arguments) != len(args) {
		t.Fatalf("arguments %v", qi.Arguments)
	}
}

func TestMessageTTLDeadLetters(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareDLX(t, ch, "topic")
	_, err := ch.QueueDeclare("q", false, false, false, false,
		amqp091.Table{"x-message-ttl": int32(30), "x-dead-letter-exchange": "dlx"})
	mustOK(t, err)
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("m"), Expiration: "60000", Headers: amqp091.Table{"h": "v"}})
	// No consumer, no get: the queue's timer expires it.
	d := getOne(t, ch, "dlq")
	checkDeath(t, d, "q", "expired", "", []string{"q"}, 1)
	if d.Expiration != "" || xDeath(t, d)["original-expiration"] != "60000" || d.Headers["h"] != "v" {
		t.Fatalf("expiration %q, x-death %v, headers %v", d.Expiration, xDeath(t, d), d.Headers)
	}
	if d.Exchange != "dlx" || d.RoutingKey != "q" || string(d.Body) != "m" {
		t.Fatalf("delivered via %q %q: %q", d.Exchange, d.RoutingKey, d.Body)
	}
}

func TestExpirationProperty(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareDLX(t, ch, "fanout")
	_, err := ch.QueueDeclare("q", false, false, false, false, amqp091.Table{"x-dead-letter-exchange": "dlx"})
	mustOK(t, err)
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("short"), Expiration: "20"})
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("long"), Expiration: "60000"})
	d := getOne(t, ch, "dlq")
	if string(d.Body) != "short" || xDeath(t, d)["original-expiration"] != "20" {
		t.Fatalf("dead letter %q %v", d.Body, d.Headers)
	}
	checkDeath(t, d, "q", "expired", "", []string{"q"}, 1)
	m, ok, err := ch.Get("q", true)
	mustOK(t, err)
	if !ok || string(m.Body) != "long" || m.Expiration != "60000" {
		t.Fatalf("get: %v %q %q", ok, m.Body, m.Expiration)
	}
	// A TTL of 0 with no consumer: gone at once, never delivered.
	_, err = ch.QueueDeclare("plain", false, false, false, false, nil)
	mustOK(t, err)
	publish(t, ch, "", "plain", amqp091.Publishing{Body: []byte("x"), Expiration: "0"})
	if _, ok, _ := ch.Get("plain", true); ok {
		t.Fatal("a message with expiration 0 was kept")
	}
}

func TestExpirationInvalid(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	for exp, text := range map[string]string{
		"foo":          "invalid expiration 'foo': no_integer",
		"-1":           "invalid expiration '-1': {value_negative,-1}",
		"10x":          `invalid expiration '10x': {leftover_string,"x"}`,
		"315360000001": "invalid expiration '315360000001': {value_too_large,315360000001}",
	} {
		ch := open(t, c)
		closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
		publish(t, ch, "", "nowhere", amqp091.Publishing{Expiration: exp})
		select {
		case e := <-closed:
			expectReason(t, expectCode(t, e, 406), "PRECONDITION_FAILED - "+text)
		case <-time.After(5 * time.Second):
			t.Fatalf("expiration %q: channel not closed", exp)
		}
	}
}

func TestRejectDeadLetters(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareDLX(t, ch, "direct")
	mustOK(t, ch.QueueBind("dlq", "dead", "dlx", false, nil))
	_, err := ch.QueueDeclare("q", false, false, false, false,
		amqp091.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead"})
	mustOK(t, err)
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("a"), Headers: amqp091.Table{"CC": []any{"cc1"}}})
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("b")})
	msgs, err := ch.Consume("q", "", false, false, false, false, nil)
	mustOK(t, err)
	m := recv(t, msgs)
	mustOK(t, m.Reject(false))
	m = recv(t, msgs)
	mustOK(t, m.Nack(false, false))
	d := getOne(t, ch, "dlq")
	if string(d.Body) != "a" || d.RoutingKey != "dead" || d.Headers["CC"] != nil {
		t.Fatalf("dead letter %q via %q, headers %v", d.Body, d.RoutingKey, d.Headers)
	}
	checkDeath(t, d, "q", "rejected", "", []string{"q", "cc1"}, 1)
	d = getOne(t, ch, "dlq")
	checkDeath(t, d, "q", "rejected", "", []string{"q"}, 1)
}

func TestMaxLengthDropHeadDeadLetters(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareDLX(t, ch, "fanout")
	_, err := ch.QueueDeclare("q", false, false, false, false,
		amqp091.Table{"x-max-length": int32(2), "x-dead-letter-exchange": "dlx"})
	mustOK(t, err)
	for _, b := range []string{"1", "2", "3"} {
		publish(t, ch, "", "q", amqp091.Publishing{Body: []byte(b)})
	}
	d := getOne(t, ch, "dlq")
	if string(d.Body) != "1" {
		t.Fatalf("dropped %q", d.Body)
	}
	checkDeath(t, d, "q", "maxlen", "", []string{"q"}, 1)
	q, err := ch.QueueDeclarePassive("q", false, false, false, false, nil)
	mustOK(t, err)
	if q.Messages != 2 {
		t.Fatalf("%d messages", q.Messages)
	}
}

func TestOverflowRejectPublish(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareDLX(t, ch, "fanout")
	_, err := ch.QueueDeclare("q", false, false, false, false,
		amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish", "x-dead-letter-exchange": "dlx"})
	mustOK(t, err)
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("1")})
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("dropped")}) // no confirms: silently dropped
	mustOK(t, ch.Confirm(false))
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 4))
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("nacked")})
	if c := <-confirms; c.Ack || c.DeliveryTag != 1 {
		t.Fatalf("confirm %+v, want nack of 1", c)
	}
	m, ok, err := ch.Get("q", true)
	mustOK(t, err)
	if !ok || string(m.Body) != "1" {
		t.Fatalf("get %v %q", ok, m.Body)
	}
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("2")})
	if c := <-confirms; !c.Ack || c.DeliveryTag != 2 {
		t.Fatalf("confirm %+v, want ack of 2", c)
	}
	// reject-publish does not dead-letter what it refuses.
	if _, ok, _ := ch.Get("dlq", true); ok {
		t.Fatal("reject-publish dead-lettered")
	}
}

func TestOverflowRejectPublishDLX(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareDLX(t, ch, "fanout")
	_, err := ch.QueueDeclare("q", false, false, false, false,
		amqp091.Table{"x-max-length-bytes": int32(3), "x-overflow": "reject-publish-dlx", "x-dead-letter-exchange": "dlx"})
	mustOK(t, err)
	mustOK(t, ch.Confirm(false))
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 4))
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("abc")})
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("d")})
	if c := <-confirms; !c.Ack {
		t.Fatalf("first publish %+v", c)
	}
	if c := <-confirms; c.Ack {
		t.Fatalf("second publish %+v, want nack", c)
	}
	d := getOne(t, ch, "dlq")
	if string(d.Body) != "d" {
		t.Fatalf("dead letter %q", d.Body)
	}
	checkDeath(t, d, "q", "maxlen", "", []string{"q"}, 1)
}

func TestDeliveryLimit(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareDLX(t, ch, "fanout")
	_, err := ch.QueueDeclare("q", false, false, false, false,
		amqp091.Table{"x-delivery-limit": int32(1), "x-dead-letter-exchange": "dlx"})
	mustOK(t, err)
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("m")})
	msgs, err := ch.Consume("q", "", false, false, false, false, nil)
	mustOK(t, err)
	m := recv(t, msgs)
	mustOK(t, m.Nack(false, true))
	m = recv(t, msgs)
	if !m.Redelivered {
		t.Fatal("not redelivered")
	}
	mustOK(t, m.Nack(false, true))
	d := getOne(t, ch, "dlq")
	checkDeath(t, d, "q", "delivery_limit", "", []string{"q"}, 1)
	noDelivery(t, msgs)
}

func TestDeadLetterCycleDropped(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	// q1 expires into q2, which expires back into q1: the second lap
	// would close a cycle with no rejection in it, and is dropped.
	_, err := ch.QueueDeclare("q1", false, false, false, false,
		amqp091.Table{"x-message-ttl": int32(10), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q2"})
	mustOK(t, err)
	_, err = ch.QueueDeclare("q2", false, false, false, false,
		amqp091.Table{"x-message-ttl": int32(10), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q1"})
	mustOK(t, err)
	publish(t, ch, "", "q1", amqp091.Publishing{Body: []byte("m")})
	held := func() int {
		n := 0
		for _, q := range []string{"q1", "q2"} {
			qi, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
			mustOK(t, err)
			n += qi.Messages
		}
		return n
	}
	// A message that went on cycling would be in one queue or the other
	// most of the time (10 ms per lap).
	waitFor(t, "the message to be dropped", func() bool { return held() == 0 })
	for range 10 {
		time.Sleep(20 * time.Millisecond)
		if n := held(); n != 0 {
			t.Fatalf("q1 and q2 hold %d messages after the cycle was dropped", n)
		}
	}
}

func TestQueueExpires(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	_, err := ch.QueueDeclare("q", false, false, false, false, amqp091.Table{"x-expires": int32(100)})
	mustOK(t, err)
	// A consumer keeps it in use.
	_, err = ch.Consume("q", "c", false, false, false, false, nil)
	mustOK(t, err)
	time.Sleep(250 * time.Millisecond)
	_, err = ch.QueueDeclarePassive("q", false, false, false, false, nil)
	mustOK(t, err)
	mustOK(t, ch.Cancel("c", false))
	waitFor(t, "the unused queue to expire", func() bool {
		_, err := s.Queue("/", "q")
		return err != nil
	})
	_, err = ch.QueueDeclarePassive("q", false, false, false, false, nil)
	expectCode(t, err, 404)
}

// TestQueueExpiresPassiveDeclare: a passive queue.declare is a use for
// x-expires, as in RabbitMQ (whose queue restarts its expiry timer when
// asked for its stats); a purge is not.
func TestQueueExpiresPassiveDeclare(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	_, err := ch.QueueDeclare("exp.p", false, false, false, false, amqp091.Table{"x-expires": int32(600000)})
	mustOK(t, err)
	_, at1, _ := s.Broker.QueueExpiry("/", "exp.p")
	time.Sleep(30 * time.Millisecond)
	_, err = ch.QueuePurge("exp.p", false)
	mustOK(t, err)
	if _, at, _ := s.Broker.QueueExpiry("/", "exp.p"); at != at1 {
		t.Fatalf("a purge moved the expiry from %d to %d", at1, at)
	}
	_, err = ch.QueueDeclarePassive("exp.p", false, false, false, false, nil)
	mustOK(t, err)
	if _, at2, _ := s.Broker.QueueExpiry("/", "exp.p"); at2 < at1+30 {
		t.Fatalf("after a passive declare 30 ms later: expires at %d, want at least %d", at2, at1+30)
	}
}

// TestQueueExpiresInStateMachine: x-expires, from the declare or a
// policy (the lower wins), is the queue state machine's: it knows when the
// queue expires unused, and that consumers keep it in use.
func TestQueueExpiresInStateMachine(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	before := time.Now().UnixMilli()
	_, err := ch.QueueDeclare("exp.q", false, false, false, false, amqp091.Table{"x-expires": int32(600000)})
	mustOK(t, err)
	after := time.Now().UnixMilli()
	expires, at, ok := s.Broker.QueueExpiry("/", "exp.q")
	if !ok || expires != 600000 || at < before+600000 || at > after+600000 {
		t.Fatalf("declared: expires %d, expires at %d (declared between %d and %d)", expires, at, before, after)
	}
	mustOK(t, s.SetPolicy("/", "exp.p", `^exp\.`, "queues", 0, map[string]any{"expires": 300000}, false))
	if expires, _, _ := s.Broker.QueueExpiry("/", "exp.q"); expires != 300000 {
		t.Fatalf("with a lower policy: expires %d, want 300000", expires)
	}
	_, err = ch.Consume("exp.q", "c", false, false, false, false, nil)
	mustOK(t, err)
	if _, at, _ := s.Broker.QueueExpiry("/", "exp.q"); at != 0 {
		t.Fatalf("with a consumer: expires at %d, want 0 (kept in use)", at)
	}
	mustOK(t, ch.Cancel("c", false))
	if _, at, _ := s.Broker.QueueExpiry("/", "exp.q"); at < after+300000 {
		t.Fatalf("after the consumer left: expires at %d, want at least %d", at, after+300000)
	}
}

func TestAlternateExchange(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	returns := ch.NotifyReturn(make(chan amqp091.Return, 4))
	mustOK(t, ch.ExchangeDeclare("ae2", "fanout", false, false, false, false, nil))
	mustOK(t, ch.ExchangeDeclare("ae1", "direct", false, false, false, false, amqp091.Table{"alternate-exchange": "ae2"}))
	mustOK(t, ch.ExchangeDeclare("main", "direct", false, false, false, false, amqp091.Table{"alternate-exchange": "ae1"}))
	for _, q := range []string{"bound", "ae1q", "ae2q"} {
		_, err := ch.QueueDeclare(q, false, false, false, false, nil)
		mustOK(t, err)
	}
	mustOK(t, ch.QueueBind("bound", "k", "main", false, nil))
	mustOK(t, ch.QueueBind("ae1q", "k1", "ae1", false, nil))
	mustOK(t, ch.QueueBind("ae2q", "", "ae2", false, nil))
	for _, key := range []string{"k", "k1", "other"} {
		mustOK(t, ch.Publish("main", key, true, false, amqp091.Publishing{Body: []byte(key)}))
	}
	for q, want := range map[string]string{"bound": "k", "ae1q": "k1", "ae2q": "other"} {
		d := getOne(t, ch, q)
		if string(d.Body) != want || d.Exchange != "main" {
			t.Fatalf("%s got %q via %q", q, d.Body, d.Exchange)
		}
	}
	select {
	case r := <-returns:
		t.Fatalf("returned %q", r.Body)
	case <-time.After(100 * time.Millisecond):
	}
	bad := open(t, dial(t, s))
	err := bad.ExchangeDeclare("badae", "direct", false, false, false, false, amqp091.Table{"alternate-exchange": int32(1)})
	expectReason(t, expectCode(t, err, 406), "PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' in exchange 'badae' in vhost '/'")
	// Nothing at all routes it: returned.
	mustOK(t, ch.QueueUnbind("ae2q", "", "ae2", nil))
	mustOK(t, ch.Publish("main", "lost", true, false, amqp091.Publishing{Body: []byte("lost")}))
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || r.ReplyText != "NO_ROUTE" || string(r.Body) != "lost" {
			t.Fatalf("return %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.return")
	}
}

func TestPriorityQueue(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	_, err := ch.QueueDeclare("q", false, false, false, false, amqp091.Table{"x-max-priority": int32(5)})
	mustOK(t, err)
	for _, p := range []uint8{0, 3, 9, 1} {
		publish(t, ch, "", "q", amqp091.Publishing{Body: []byte{'0' + p}, Priority: p})
	}
	msgs, err := ch.Consume("q", "", true, false, false, false, nil)
	mustOK(t, err)
	got := ""
	for range 4 {
		got += string(recv(t, msgs).Body)
	}
	// 9 is capped at 5 but keeps its property.
	if got != "9310" {
		t.Fatalf("order %q", got)
	}
}

func TestConsumerPriority(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	_, err := ch.QueueDeclare("q", false, false, false, false, nil)
	mustOK(t, err)
	mustOK(t, ch.Qos(1, 0, false))
	low, err := ch.Consume("q", "low", false, false, false, false, nil)
	mustOK(t, err)
	high, err := ch.Consume("q", "high", false, false, false, false, amqp091.Table{"x-priority": int32(10)})
	mustOK(t, err)
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("1")})
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("2")})
	if d := recv(t, high); string(d.Body) != "1" {
		t.Fatalf("high got %q", d.Body)
	}
	// The high-priority consumer is at its prefetch: the next goes low.
	if d := recv(t, low); string(d.Body) != "2" {
		t.Fatalf("low got %q", d.Body)
	}
	bad := open(t, c)
	_, err = bad.Consume("q", "", false, false, false, false, amqp091.Table{"x-priority": "high"})
	expectReason(t, expectCode(t, err, 406), `PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'q' in vhost '/': "expected integer, got longstr"`)
}

func TestExclusiveConsumer(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	_, err := ch.QueueDeclare("q", false, false, false, false, nil)
	mustOK(t, err)
	_, err = ch.Consume("q", "excl", false, true, false, false, nil)
	mustOK(t, err)
	other := open(t, c)
	_, err = other.Consume("q", "", false, false, false, false, nil)
	expectReason(t, expectCode(t, err, 403), "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use")
}

func TestSingleActiveConsumer(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	_, err := ch.QueueDeclare("q", false, false, false, false, amqp091.Table{"x-single-active-consumer": true})
	mustOK(t, err)
	first, err := ch.Consume("q", "first", true, false, false, false, nil)
	mustOK(t, err)
	second, err := ch.Consume("q", "second", true, false, false, false, nil)
	mustOK(t, err)
	qi, err := ch.QueueDeclare("q", false, false, false, false, amqp091.Table{"x-single-active-consumer": true})
	mustOK(t, err)
	if qi.Consumers != 2 {
		t.Fatalf("declare-ok consumer count %d", qi.Consumers)
	}
	for _, b := range []string{"1", "2"} {
		publish(t, ch, "", "q", amqp091.Publishing{Body: []byte(b)})
	}
	recv(t, first)
	recv(t, first)
	noDelivery(t, second)
	mustOK(t, ch.Cancel("first", false))
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("3")})
	if d := recv(t, second); string(d.Body) != "3" {
		t.Fatalf("second got %q", d.Body)
	}
}

func TestQueueFeaturesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	ch := open(t, dial(t, s))
	declareDLX(t, ch, "fanout")
	_, err := ch.QueueDeclare("dlq.d", true, false, false, false, nil)
	mustOK(t, err)
	mustOK(t, ch.ExchangeDeclare("dlx.d", "fanout", true, false, false, false, nil))
	mustOK(t, ch.QueueBind("dlq.d", "", "dlx.d", false, nil))
	_, err = ch.QueueDeclare("q", true, false, false, false, amqp091.Table{
		"x-max-priority": int32(3), "x-dead-letter-exchange": "dlx.d", "x-message-ttl": int32(400),
	})
	mustOK(t, err)
	mustOK(t, ch.Confirm(false))
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 2))
	for _, p := range []uint8{1, 3} {
		publish(t, ch, "", "q", amqp091.Publishing{Body: []byte{'0' + p}, Priority: p, DeliveryMode: 2})
	}
	for range 2 {
		if c := <-confirms; !c.Ack {
			t.Fatal("nack")
		}
	}
	stop()
	s, stop = startOn(t, dir)
	defer stop()
	ch = open(t, dial(t, s))
	m, ok, err := ch.Get("q", false)
	mustOK(t, err)
	if !ok || string(m.Body) != "3" {
		t.Fatalf("get after restart: %v %q", ok, m.Body)
	}
	mustOK(t, m.Reject(false))
	d := getOne(t, ch, "dlq.d")
	checkDeath(t, d, "q", "rejected", "", []string{"q"}, 1)
	// The other one expires (its TTL restarted at recovery).
	d = getOne(t, ch, "dlq.d")
	checkDeath(t, d, "q", "expired", "", []string{"q"}, 1)
	if d.DeliveryMode != 2 {
		t.Fatalf("delivery mode %d", d.DeliveryMode)
	}
}

func TestPolicies(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	ch := open(t, dial(t, s))
	declareDLX(t, ch, "fanout")
	_, err := ch.QueueDeclare("pol.q", true, false, false, false, amqp091.Table{"x-max-length": int32(5)})
	mustOK(t, err)
	// The higher priority policy applies to the existing queue at once.
	mustOK(t, s.SetPolicy("/", "low", `^pol\.`, "queues", 0, map[string]any{"max-length": 100}, false))
	mustOK(t, s.SetPolicy("/", "dlx", `^pol\.`, "all", 5, map[string]any{"dead-letter-exchange": "dlx", "max-length": 3.0}, false))
	for _, b := range []string{"1", "2", "3", "4"} {
		publish(t, ch, "", "pol.q", amqp091.Publishing{Body: []byte(b)})
	}
	d := getOne(t, ch, "dlq")
	checkDeath(t, d, "pol.q", "maxlen", "", []string{"pol.q"}, 1)
	// An operator policy caps the limit: the lower value wins.
	mustOK(t, s.SetPolicy("/", "cap", ".*", "queues", 0, map[string]any{"max-length": 1}, true))
	waitFor(t, "the cap to drop heads", func() bool {
		q, err := ch.QueueDeclarePassive("pol.q", true, false, false, false, nil)
		return err == nil && q.Messages == 1
	})
	if err := s.SetPolicy("/", "bad", ".*", "queues", 0, map[string]any{"dead-letter-exchange": "x"}, true); !errors.Is(err, broker.ErrInvalidPolicy) {
		t.Fatalf("operator policy with dead-letter-exchange: %v", err)
	}
	if err := s.SetPolicy("/", "bad", ".*", "queues", 0, map[string]any{"max-length": -1}, false); !errors.Is(err, broker.ErrInvalidPolicy) {
		t.Fatalf("negative max-length: %v", err)
	}
	// Policies survive a restart.
	stop()
	s, stop = startOn(t, dir)
	defer stop()
	ps, err := s.Policies("/")
	mustOK(t, err)
	if len(ps) != 3 || ps[0].Name != "dlx" || ps[2].Name != "cap" || !ps[2].Operator || ps[0].Priority != 5 {
		t.Fatalf("policies after restart: %+v", ps)
	}
	ch = open(t, dial(t, s))
	for _, b := range []string{"5", "6"} {
		publish(t, ch, "", "pol.q", amqp091.Publishing{Body: []byte(b)})
	}
	q, err := ch.QueueDeclarePassive("pol.q", true, false, false, false, nil)
	mustOK(t, err)
	if q.Messages != 1 {
		t.Fatalf("%d messages under the operator cap after restart", q.Messages)
	}
	// Clearing reverts to the argument (5).
	mustOK(t, s.ClearPolicy("/", "cap", true))
	mustOK(t, s.ClearPolicy("/", "dlx", false))
	for _, b := range []string{"7", "8", "9"} {
		publish(t, ch, "", "pol.q", amqp091.Publishing{Body: []byte(b)})
	}
	q, err = ch.QueueDeclarePassive("pol.q", true, false, false, false, nil)
	mustOK(t, err)
	if q.Messages != 4 {
		t.Fatalf("%d messages after clearing", q.Messages)
	}
}

func TestPolicyAlternateExchange(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	mustOK(t, ch.ExchangeDeclare("ae", "fanout", false, false, false, false, nil))
	mustOK(t, ch.ExchangeDeclare("x", "direct", false, false, false, false, nil))
	_, err := ch.QueueDeclare("aeq", false, false, false, false, nil)
	mustOK(t, err)
	mustOK(t, ch.QueueBind("aeq", "", "ae", false, nil))
	mustOK(t, s.SetPolicy("/", "ae", "^x$", "exchanges", 0, map[string]any{"alternate-exchange": "ae"}, false))
	publish(t, ch, "x", "nowhere", amqp091.Publishing{Body: []byte("m")})
	if d := getOne(t, ch, "aeq"); string(d.Body) != "m" {
		t.Fatalf("got %q", d.Body)
	}
}

func TestConsumerTimeout(t *testing.T) {
	s := brokertest.Start(t, &broker.Config{ConsumerTimeout: 200 * time.Millisecond})
	c := dial(t, s)
	ch := open(t, c)
	_, err := ch.QueueDeclare("q", false, false, false, false, nil)
	mustOK(t, err)
	cancels := ch.NotifyCancel(make(chan string, 1))
	msgs, err := ch.Consume("q", "slow", false, false, false, false, nil)
	mustOK(t, err)
	publish(t, ch, "", "q", amqp091.Publishing{Body: []byte("m")})
	m := recv(t, msgs)
	select {
	case tag := <-cancels:
		if tag != "slow" {
			t.Fatalf("cancelled %q", tag)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.cancel")
	}
	// The delivery went back to the queue.
	d := getOne(t, ch, "q")
	if !d.Redelivered || string(d.Body) != "m" || m.DeliveryTag != 1 {
		t.Fatalf("requeued %q redelivered=%v", d.Body, d.Redelivered)
	}
	// A queue's x-consumer-timeout overrides the broker's.
	ch2 := open(t, c)
	_, err = ch2.QueueDeclare("q2", false, false, false, false, amqp091.Table{"x-consumer-timeout": int32(50)})
	mustOK(t, err)
	cancels = ch2.NotifyCancel(make(chan string, 1))
	_, err = ch2.Consume("q2", "c2", false, false, false, false, nil)
	mustOK(t, err)
	publish(t, ch2, "", "q2", amqp091.Publishing{Body: []byte("m")})
	select {
	case <-cancels:
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.cancel for x-consumer-timeout")
	}
}

func TestDirectReplyTo(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	client := open(t, c)
	server := open(t, c)
	_, err := server.QueueDeclare("rpc", false, false, false, false, nil)
	mustOK(t, err)
	requests, err := server.Consume("rpc", "", true, false, false, false, nil)
	mustOK(t, err)
	// reply_to needs a reply consumer on the publishing channel.
	bad := open(t, c)
	closed := bad.NotifyClose(make(chan *amqp091.Error, 1))
	publish(t, bad, "", "rpc", amqp091.Publishing{ReplyTo: "amq.rabbitmq.reply-to"})
	select {
	case e := <-closed:
		expectReason(t, expectCode(t, e, 406), "PRECONDITION_FAILED - fast reply consumer does not exist")
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed")
	}
	_, err = open(t, c).Consume("amq.rabbitmq.reply-to", "", false, false, false, false, nil)
	expectReason(t, expectCode(t, err, 406), "PRECONDITION_FAILED - reply consumer cannot acknowledge")

	replies, err := client.Consume("amq.rabbitmq.reply-to", "rc", true, false, false, false, nil)
	mustOK(t, err)
	publish(t, client, "", "rpc", amqp091.Publishing{ReplyTo: "amq.rabbitmq.reply-to", CorrelationId: "1", Body: []byte("ping")})
	req := recv(t, requests)
	if len(req.ReplyTo) <= len("amq.rabbitmq.reply-to.") || req.ReplyTo[:22] != "amq.rabbitmq.reply-to." {
		t.Fatalf("reply_to %q", req.ReplyTo)
	}
	publish(t, server, "", req.ReplyTo, amqp091.Publishing{CorrelationId: req.CorrelationId, Body: []byte("pong")})
	r := recv(t, replies)
	if string(r.Body) != "pong" || r.CorrelationId != "1" || r.ConsumerTag != "rc" || r.RoutingKey != req.ReplyTo {
		t.Fatalf("reply %q %q %q %q", r.Body, r.CorrelationId, r.ConsumerTag, r.RoutingKey)
	}
	// No queue was made for it.
	qs, err := s.Queues("/")
	mustOK(t, err)
	if len(qs) != 1 {
		t.Fatalf("queues %v", qs)
	}
	// As in RabbitMQ, a passive declare finds the pseudo-queue, and a
	// reply name while its consumer is there, both empty.
	for _, name := range []string{"amq.rabbitmq.reply-to", req.ReplyTo} {
		q, err := server.QueueDeclarePassive(name, false, false, false, false, nil)
		if err != nil || q.Name != name || q.Messages != 0 || q.Consumers != 0 {
			t.Fatalf("passive declare of %s: %+v %v", name, q, err)
		}
	}
	mustOK(t, client.Cancel("rc", false))
	_, err = server.QueueDeclarePassive(req.ReplyTo, false, false, false, false, nil)
	expectCode(t, err, 404)
}

// TestPolicyRabbitMQ3Keys: a policy with the keys RabbitMQ 3.x knows that
// change nothing in Warren (classic queue mirroring, queue mode and
// version, master locator, quorum in-memory limits) applies, so that
// RabbitMQ's policies and definitions exports do; their values are
// checked, and keys nobody knows are still refused.
func TestPolicyRabbitMQ3Keys(t *testing.T) {
	s := brokertest.Start(t, nil)
	mustOK(t, s.SetPolicy("/", "ha", `^ha\.`, "queues", 0, map[string]any{
		"ha-mode": "exactly", "ha-params": 2.0, "ha-sync-mode": "automatic", "ha-sync-batch-size": 100.0,
		"ha-promote-on-shutdown": "when-synced", "ha-promote-on-failure": "always",
		"queue-mode": "lazy", "queue-version": 2.0, "queue-master-locator": "min-masters",
		"max-in-memory-length": 10.0, "max-length": 5.0,
	}, false))
	ch := open(t, dial(t, s))
	_, err := ch.QueueDeclare("ha.q", true, false, false, false, nil)
	mustOK(t, err)
	for i := 0; i < 7; i++ {
		mustOK(t, ch.PublishWithContext(context.Background(), "", "ha.q", false, false, amqp091.Publishing{Body: []byte("m")}))
	}
	waitFor(t, "max-length 5 from the policy applied", func() bool {
		q, err := s.Queue("/", "ha.q")
		return err == nil && q.Ready == 5
	})
	for _, def := range []map[string]any{
		{"ha-mode": "everywhere"},
		{"queue-mode": "eager"},
		{"ha-sync-batch-size": 0.0},
		{"queue-master-locator": "balanced"},
		{"federation-upstream-set": "all"},
	} {
		if err := s.SetPolicy("/", "bad", ".*", "queues", 0, def, false); !errors.Is(err, broker.ErrInvalidPolicy) {
			t.Errorf("policy %v: %v, want refused", def, err)
		}
	}
}
