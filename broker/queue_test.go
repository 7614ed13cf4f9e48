package broker_test

import (
	"fmt"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker/brokertest"
)

func TestServerNamedQueue(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	names := map[string]bool{}
	for range 3 {
		q, err := ch.QueueDeclare("", false, false, true, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		// RabbitMQ: "amq.gen-" and 22 characters of URL-safe base64.
		if !strings.HasPrefix(q.Name, "amq.gen-") || len(q.Name) != len("amq.gen-")+22 || names[q.Name] {
			t.Fatalf("server-generated queue name %q", q.Name)
		}
		names[q.Name] = true
		if q.Messages != 0 || q.Consumers != 0 {
			t.Fatalf("declare-ok counts %d/%d for a new queue", q.Messages, q.Consumers)
		}
		if _, err := ch.QueueDeclarePassive(q.Name, false, false, true, false, nil); err != nil {
			t.Fatalf("passive declare of %s: %v", q.Name, err)
		}
	}
	// The amq. prefix is reserved for creation.
	_, err := open(t, c).QueueDeclare("amq.mine", false, false, false, false, nil)
	expectReason(t, expectCode(t, err, 403), "ACCESS_REFUSED - queue name 'amq.mine' contains reserved prefix 'amq.*'")
}

func TestQueueDeclarePassiveAndCounts(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)

	_, err := open(t, c).QueueDeclarePassive("nope", false, false, false, false, nil)
	expectReason(t, expectCode(t, err, 404), "NOT_FOUND - no queue 'nope' in vhost '/'")
	// The empty name is not a shortcut for passive declares.
	_, err = open(t, c).QueueDeclarePassive("", false, false, false, false, nil)
	expectCode(t, err, 404)

	q := declareQ(t, ch, "counted", nil)
	for i := range 5 {
		pubText(t, ch, "", q, fmt.Sprint(i))
	}
	cch := open(t, c)
	if err := cch.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := cch.Consume(q, fmt.Sprint("c", i), false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	// message_count counts ready messages only, not the 4 unacked ones.
	st, err := ch.QueueDeclarePassive(q, true, true, true, false, nil) // flags ignored
	if err != nil {
		t.Fatal(err)
	}
	if st.Messages != 1 || st.Consumers != 2 {
		t.Fatalf("passive declare-ok: %d messages, %d consumers; want 1, 2", st.Messages, st.Consumers)
	}
	st, err = ch.QueueDeclare(q, false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Messages != 1 || st.Consumers != 2 {
		t.Fatalf("declare-ok: %d messages, %d consumers; want 1, 2", st.Messages, st.Consumers)
	}
}

func TestExclusiveQueue(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c1 := dial(t, s)
	ch1 := open(t, c1)
	if _, err := ch1.QueueDeclare("excl", true, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	declareQ(t, ch1, "plain", nil)
	c2 := dial(t, s)
	const locked = "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'excl' in vhost '/'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
	for _, tc := range []struct {
		name string
		op   func(ch *amqp091.Channel) error
	}{
		{"declare exclusive", func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("excl", false, false, true, false, nil)
			return err
		}},
		{"declare", func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("excl", false, false, false, false, nil)
			return err
		}},
		{"declare passive", func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclarePassive("excl", false, false, true, false, nil)
			return err
		}},
		{"consume", func(ch *amqp091.Channel) error {
			_, err := ch.Consume("excl", "c", false, false, false, false, nil)
			return err
		}},
		{"get", func(ch *amqp091.Channel) error {
			_, _, err := ch.Get("excl", false)
			return err
		}},
		{"purge", func(ch *amqp091.Channel) error {
			_, err := ch.QueuePurge("excl", false)
			return err
		}},
		{"delete", func(ch *amqp091.Channel) error {
			_, err := ch.QueueDelete("excl", false, false, false)
			return err
		}},
		{"bind", func(ch *amqp091.Channel) error { return ch.QueueBind("excl", "k", "amq.direct", false, nil) }},
		// Unbinding is refused only for a binding there is to remove
		// (TestUnbindIsIdempotent): the owner binds it first.
		{"unbind", func(ch *amqp091.Channel) error {
			if err := ch1.QueueBind("excl", "k", "amq.direct", false, nil); err != nil {
				return err
			}
			return ch.QueueUnbind("excl", "k", "amq.direct", nil)
		}},
	} {
		e := expectCode(t, tc.op(open(t, c2)), 405)
		if e.Reason != locked {
			t.Errorf("%s: %q", tc.name, e.Reason)
		}
	}

	// Others may still publish to it.
	pubText(t, open(t, c2), "", "excl", "from c2")
	waitFor(t, "the message from the other connection", func() bool { return readyCount(t, ch1, "excl") == 1 })

	// On its own connection: usable from any channel, but a redeclare
	// must say exclusive (405, not 406, as RabbitMQ's strict check), and
	// a non-exclusive queue cannot become exclusive. Exclusive queues are
	// never durable, so the durable flag does not matter.
	if _, err := open(t, c1).QueueDeclare("excl", false, false, true, false, nil); err != nil {
		t.Fatalf("redeclare on the owning connection: %v", err)
	}
	if m := getText(t, open(t, c1), "excl"); m != "from c2" {
		t.Fatalf("got %q", m)
	}
	_, err := open(t, c1).QueueDeclare("excl", false, false, false, false, nil)
	expectReason(t, expectCode(t, err, 405), locked)
	_, err = open(t, c1).QueueDeclare("plain", false, false, true, false, nil)
	expectCode(t, err, 405)

	// Deleted when its connection closes.
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the exclusive queue to go", func() bool {
		_, err := open(t, c2).QueueDeclarePassive("excl", false, false, true, false, nil)
		if err != nil && amqpCode(err) != 404 {
			t.Fatalf("passive declare: %v", err)
		}
		return err != nil
	})
	// Now anyone may declare it.
	if _, err := open(t, c2).QueueDeclare("excl", false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
}

func TestAutoDeleteQueue(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	exists := func(q string) bool {
		_, err := open(t, c).QueueDeclarePassive(q, false, true, false, false, nil)
		if err != nil && amqpCode(err) != 404 {
			t.Fatalf("passive declare: %v", err)
		}
		return err == nil
	}
	declareAD := func(q string) {
		t.Helper()
		if _, err := ch.QueueDeclare(q, false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}

	// Never consumed from: it stays.
	declareAD("ad0")
	if !exists("ad0") {
		t.Fatal("auto-delete queue without consumers was deleted")
	}

	// Deleted when the last consumer cancels.
	declareAD("ad1")
	bindQ(t, ch, "ad1", "ad1", "amq.direct", nil)
	cch := open(t, c)
	for _, tag := range []string{"c1", "c2"} {
		if _, err := cch.Consume("ad1", tag, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := cch.Cancel("c1", false); err != nil {
		t.Fatal(err)
	}
	if !exists("ad1") {
		t.Fatal("deleted while a consumer was left")
	}
	if err := cch.Cancel("c2", false); err != nil {
		t.Fatal(err)
	}
	if exists("ad1") {
		t.Fatal("auto-delete queue survived the cancel of its last consumer")
	}
	// Its bindings went with it.
	declareQ(t, ch, "ad1", nil)
	if got := routesTo(t, ch, "amq.direct", "ad1", nil, "ad1"); got[0] {
		t.Fatal("binding of a deleted queue survived")
	}

	// Deleted when the consumer's channel closes, and when its connection
	// closes.
	declareAD("ad2")
	cch = open(t, c)
	if _, err := cch.Consume("ad2", "c", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := cch.Close(); err != nil {
		t.Fatal(err)
	}
	if exists("ad2") {
		t.Fatal("auto-delete queue survived the close of its consumer's channel")
	}
	declareAD("ad3")
	c3 := dial(t, s)
	if _, err := open(t, c3).Consume("ad3", "c", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := c3.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ad3 to go", func() bool { return !exists("ad3") })
}

func TestQueueRedeclare(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	args := amqp091.Table{"x-message-ttl": int32(60000), "x-custom": "a"}
	if _, err := ch.QueueDeclare("r", true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	// Equivalent: same flags, the same value of a known argument in another
	// integer type, unknown arguments changed or missing.
	for _, a := range []amqp091.Table{
		args,
		{"x-message-ttl": int64(60000)},
		{"x-message-ttl": int32(60000), "x-custom": "b", "x-other": true},
	} {
		if _, err := ch.QueueDeclare("r", true, false, false, false, a); err != nil {
			t.Fatalf("redeclare with %v: %v", a, err)
		}
	}
	for _, tc := range []struct {
		durable, autoDelete bool
		args                amqp091.Table
		text                string
	}{
		{false, false, args, "inequivalent arg 'durable' for queue 'r' in vhost '/': received 'false' but current is 'true'"},
		{true, true, args, "inequivalent arg 'auto_delete' for queue 'r' in vhost '/': received 'true' but current is 'false'"},
		{true, false, amqp091.Table{"x-message-ttl": int32(1000)}, "inequivalent arg 'x-message-ttl' for queue 'r' in vhost '/': received '1000' but current is '60000'"},
		{true, false, nil, "inequivalent arg 'x-message-ttl' for queue 'r' in vhost '/': received none but current is the value '60000' of type 'signedint'"},
		{true, false, amqp091.Table{"x-message-ttl": "60000"}, "inequivalent arg 'x-message-ttl' for queue 'r' in vhost '/': received '60000' but current is '60000'"},
		{true, false, amqp091.Table{"x-message-ttl": int32(60000), "x-max-length": int64(5)}, "inequivalent arg 'x-max-length' for queue 'r' in vhost '/': received the value '5' of type 'long' but current is none"},
	} {
		_, err := open(t, c).QueueDeclare("r", tc.durable, tc.autoDelete, false, false, tc.args)
		expectReason(t, expectCode(t, err, 406), "PRECONDITION_FAILED - "+tc.text)
	}
}

func TestQueueBindUnbind(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	declareX(t, ch, "hx", "headers")
	declareX(t, ch, "dx", "direct")
	q := declareQ(t, ch, "bq", nil)
	bindQ(t, ch, q, "", "hx", amqp091.Table{"x-match": "any", "a": int32(1)})
	bindQ(t, ch, q, "", "hx", amqp091.Table{"x-match": "any", "b": int32(1)})
	bindQ(t, ch, q, "", "hx", amqp091.Table{"x-match": "any", "b": int32(1)}) // again: no-op
	a, b := amqp091.Table{"a": int32(1)}, amqp091.Table{"b": int32(1)}
	if got := fmt.Sprint(routesTo(t, ch, "hx", "", a, q), routesTo(t, ch, "hx", "", b, q)); got != "[true] [true]" {
		t.Fatalf("routes %s", got)
	}
	// Unbinding needs the same arguments; a binding that does not exist
	// unbinds without error.
	if err := ch.QueueUnbind(q, "", "hx", amqp091.Table{"x-match": "any", "a": int32(2)}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueUnbind(q, "", "hx", nil); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(routesTo(t, ch, "hx", "", a, q), routesTo(t, ch, "hx", "", b, q)); got != "[true] [true]" {
		t.Fatalf("routes %s after unbinding other bindings", got)
	}
	if err := ch.QueueUnbind(q, "", "hx", amqp091.Table{"x-match": "any", "a": int32(1)}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(routesTo(t, ch, "hx", "", a, q), routesTo(t, ch, "hx", "", b, q)); got != "[false] [true]" {
		t.Fatalf("routes %s after unbind", got)
	}

	// Direct: bindings that differ only in arguments are distinct.
	bindQ(t, ch, q, "k", "dx", amqp091.Table{"x-tag": int32(1)})
	bindQ(t, ch, q, "k", "dx", nil)
	if err := ch.QueueUnbind(q, "k", "dx", nil); err != nil {
		t.Fatal(err)
	}
	if got := routesTo(t, ch, "dx", "k", nil, q); !got[0] {
		t.Fatal("unbind removed a binding with other arguments")
	}
	if err := ch.QueueUnbind(q, "k", "dx", amqp091.Table{"x-tag": int32(1)}); err != nil {
		t.Fatal(err)
	}
	if got := routesTo(t, ch, "dx", "k", nil, q); got[0] {
		t.Fatal("still routed after unbinding")
	}

	// The empty queue name means the queue last declared on the channel;
	// with an empty routing key too, the key is that queue's name.
	ch2 := open(t, c)
	q2 := declareQ(t, ch2, "", nil)
	bindQ(t, ch2, "", "k2", "dx", nil)
	bindQ(t, ch2, "", "", "dx", nil)
	if got := routesTo(t, ch, "dx", "k2", nil, q2); !got[0] {
		t.Fatal("bind with the empty queue name did not bind the last declared queue")
	}
	if got := routesTo(t, ch, "dx", q2, nil, q2); !got[0] {
		t.Fatal("bind with the empty queue name and key did not use the queue's name as the key")
	}
	err := open(t, c).QueueBind("", "k", "dx", false, nil)
	expectReason(t, expectCode(t, err, 404), "NOT_FOUND - no previously declared queue")

	err = open(t, c).QueueBind(q, "k", "nope", false, nil)
	expectReason(t, expectCode(t, err, 404), "NOT_FOUND - no exchange 'nope' in vhost '/'")
	err = open(t, c).QueueBind("nope", "k", "dx", false, nil)
	expectReason(t, expectCode(t, err, 404), "NOT_FOUND - no queue 'nope' in vhost '/'")
	// Unbinding is idempotent, as in RabbitMQ (TestUnbindIsIdempotent).
	if err := open(t, c).QueueUnbind("nope", "k", "dx", nil); err != nil {
		t.Fatalf("unbinding a queue that does not exist: %v", err)
	}
}

// TestUnbindIsIdempotent: as RabbitMQ 3.10 answers them, queue.unbind and
// exchange.unbind succeed when the source, the destination or the binding
// does not exist, and refuse another connection's exclusive queue only
// for a binding there is to remove; binding still answers 404.
func TestUnbindIsIdempotent(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	qd, err := ch.QueueDeclare("", false, true, true, false, nil) // exclusive
	if err != nil {
		t.Fatal(err)
	}
	q := qd.Name
	noErr := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	noErr("queue from a missing exchange", open(t, c).QueueUnbind(q, "k", "nope", nil))
	noErr("missing queue from a missing exchange", open(t, c).QueueUnbind("nope", "k", "nope2", nil))
	noErr("missing exchange from amq.direct", open(t, c).ExchangeUnbind("nope", "k", "amq.direct", false, nil))
	noErr("amq.direct from a missing exchange", open(t, c).ExchangeUnbind("amq.direct", "k", "nope", false, nil))
	noErr("a binding that does not exist", open(t, c).ExchangeUnbind("amq.fanout", "k", "amq.direct", false, nil))
	noErr("headers binding with a bad x-match", open(t, c).QueueUnbind(q, "", "amq.headers", amqp091.Table{"x-match": "bogus"}))
	expectReason(t, expectCode(t, open(t, c).QueueUnbind(q, q, "", nil), 403),
		"ACCESS_REFUSED - operation not permitted on the default exchange")

	c2 := dial(t, s)
	noErr("another connection's exclusive queue, no such binding",
		open(t, c2).QueueUnbind(q, "zz", "amq.direct", nil))
	bindQ(t, ch, q, "kk", "amq.direct", nil)
	expectCode(t, open(t, c2).QueueUnbind(q, "kk", "amq.direct", nil), 405)
	if got := routesTo(t, ch, "amq.direct", "kk", nil, q); !got[0] {
		t.Fatal("the refused unbind removed the binding")
	}

	expectReason(t, expectCode(t, open(t, c).ExchangeBind("nope", "k", "amq.direct", false, nil), 404),
		"NOT_FOUND - no exchange 'nope' in vhost '/'")
	expectReason(t, expectCode(t, open(t, c).ExchangeBind("amq.direct", "k", "nope", false, nil), 404),
		"NOT_FOUND - no exchange 'nope' in vhost '/'")
	expectReason(t, expectCode(t, open(t, c).QueueBind("nope", "k", "nope2", false, nil), 404),
		"NOT_FOUND - no exchange 'nope2' in vhost '/'")
}

func TestQueuePurge(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	q := declareQ(t, ch, "", nil)
	for i := range 5 {
		pubText(t, ch, "", q, fmt.Sprint(i))
	}
	if _, ok, err := ch.Get(q, false); err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	// Purge drops ready messages only and says how many.
	n, err := ch.QueuePurge(q, false)
	if err != nil || n != 4 {
		t.Fatalf("purge: %d, %v; want 4", n, err)
	}
	if n := readyCount(t, ch, q); n != 0 {
		t.Fatalf("ready = %d after purge", n)
	}
	if err := ch.Recover(true); err != nil {
		t.Fatal(err)
	}
	if got := drainFlags(t, ch, q); fmt.Sprint(got) != "[0 redelivered]" {
		t.Fatalf("after recover: %v", got)
	}
	if n, err := ch.QueuePurge(q, false); err != nil || n != 0 {
		t.Fatalf("purge of an empty queue: %d, %v", n, err)
	}
	_, err = open(t, c).QueuePurge("nope", false)
	expectReason(t, expectCode(t, err, 404), "NOT_FOUND - no queue 'nope' in vhost '/'")
}

func TestQueueDelete(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	q := declareQ(t, ch, "del", nil)
	bindQ(t, ch, q, "", "amq.fanout", nil)
	for i := range 3 {
		pubText(t, ch, "", q, fmt.Sprint(i))
	}
	cch := open(t, c)
	cancels := cch.NotifyCancel(make(chan string, 1))
	if err := cch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := cch.Consume(q, "c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, d)

	_, err = open(t, c).QueueDelete(q, true, false, false)
	expectReason(t, expectCode(t, err, 406), "PRECONDITION_FAILED - queue 'del' in vhost '/' in use")
	_, err = open(t, c).QueueDelete(q, false, true, false)
	expectReason(t, expectCode(t, err, 406), "PRECONDITION_FAILED - queue 'del' in vhost '/' not empty")

	// delete-ok counts the ready messages; the consumer hears basic.cancel.
	n, err := ch.QueueDelete(q, false, false, false)
	if err != nil || n != 2 {
		t.Fatalf("delete: %d, %v; want 2", n, err)
	}
	select {
	case tag := <-cancels:
		if tag != "c" {
			t.Fatalf("basic.cancel for %q", tag)
		}
	case <-waitLimit():
		t.Fatal("no basic.cancel for the consumer of a deleted queue")
	}
	if _, ok := <-d; ok {
		t.Fatal("delivery after the queue was deleted")
	}
	// The delivery made before can still be acknowledged.
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	declareQ(t, cch, "proves-the-channel-is-open", nil)

	// Bindings went with it.
	declareQ(t, ch, q, nil)
	if got := routesTo(t, ch, "amq.fanout", "", nil, q); got[0] {
		t.Fatal("binding of a deleted queue survived")
	}

	// if-empty counts ready messages only; if-unused consumers only.
	pubText(t, ch, "", q, "x")
	if _, ok, err := ch.Get(q, false); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if n, err := ch.QueueDelete(q, true, true, false); err != nil || n != 0 {
		t.Fatalf("delete if-unused if-empty with only an unacked message: %d, %v", n, err)
	}
	// Deleting a missing queue is not an error.
	if n, err := ch.QueueDelete(q, false, false, false); err != nil || n != 0 {
		t.Fatalf("delete of a missing queue: %d, %v", n, err)
	}
	// The empty name means the last declared queue.
	ch2 := open(t, c)
	declareQ(t, ch2, "last", nil)
	pubText(t, ch2, "", "last", "x")
	if n, err := ch2.QueueDelete("", false, false, false); err != nil || n != 1 {
		t.Fatalf("delete of the last declared queue: %d, %v", n, err)
	}
	_, err = open(t, c).QueueDelete("", false, false, false)
	expectReason(t, expectCode(t, err, 404), "NOT_FOUND - no previously declared queue")
}

// TestExclusiveQueueGoneAtCloseOk: once connection.close-ok is received,
// the connection's exclusive queues are gone: another connection finds
// no queue (404, not 405 for a queue locked by a closed connection), and
// a client that reconnects at once can declare them again.
func TestExclusiveQueueGoneAtCloseOk(t *testing.T) {
	s := brokertest.Start(t, nil)
	other := dial(t, s)
	for i := range 30 {
		c := dial(t, s)
		if _, err := open(t, c).QueueDeclare("reconnect-excl", false, false, true, false, nil); err != nil {
			t.Fatalf("round %d: declare: %v", i, err)
		}
		probe := open(t, other)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		_, err := probe.QueueDeclarePassive("reconnect-excl", false, false, true, false, nil)
		if amqpCode(err) != 404 {
			t.Fatalf("round %d: passive declare right after close-ok: %v, want 404", i, err)
		}
	}
}
