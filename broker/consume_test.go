package broker_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker/brokertest"
)

func TestConsumeServerGeneratedTag(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	w := dialWire(t, s)
	w.send(1, &amqp.QueueDeclare{Queue: "tags"})
	w.expect(1, &amqp.QueueDeclareOk{})
	seen := map[string]bool{}
	for range 2 {
		w.send(1, &amqp.BasicConsume{Queue: "tags"})
		ok := w.expect(1, &amqp.BasicConsumeOk{}).(*amqp.BasicConsumeOk)
		// RabbitMQ: "amq.ctag-" and 22 characters of URL-safe base64.
		if !strings.HasPrefix(ok.ConsumerTag, "amq.ctag-") || len(ok.ConsumerTag) != len("amq.ctag-")+22 {
			t.Fatalf("server-generated consumer tag %q", ok.ConsumerTag)
		}
		if seen[ok.ConsumerTag] {
			t.Fatalf("consumer tag %q generated twice", ok.ConsumerTag)
		}
		seen[ok.ConsumerTag] = true
	}
}

func TestConsumeDuplicateTagClosesConnection(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	closed := notifyConnClose(c)
	ch := open(t, c)
	q := declareQ(t, ch, "", nil)
	if _, err := ch.Consume(q, "dup", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	_, err := ch.Consume(q, "dup", false, false, false, false, nil)
	e := expectCode(t, err, 530)
	expectReason(t, e, "NOT_ALLOWED - attempt to reuse consumer tag 'dup'")
	expectClosed(t, closed, 530)
}

func TestConsumeExclusive(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	declareQ(t, ch, "shared", nil)
	declareQ(t, ch, "owned", nil)
	if _, err := ch.Consume("shared", "a", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume("owned", "x", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}

	// An exclusive consumer on a queue that others consume from.
	_, err = open(t, c).Consume("shared", "b", false, true, false, false, nil)
	e := expectCode(t, err, 403)
	expectReason(t, e, "ACCESS_REFUSED - queue 'shared' in vhost '/' in exclusive use")

	// Any consumer on a queue with an exclusive consumer, from any connection.
	_, err = open(t, dial(t, s)).Consume("owned", "y", false, false, false, false, nil)
	e = expectCode(t, err, 403)
	expectReason(t, e, "ACCESS_REFUSED - queue 'owned' in vhost '/' in exclusive use")

	// The exclusive consumer is unharmed; once it is gone others may consume.
	pubText(t, ch, "", "owned", "m")
	if m := recv(t, d); string(m.Body) != "m" {
		t.Fatalf("got %q", m.Body)
	}
	if err := ch.Cancel("x", false); err != nil {
		t.Fatal(err)
	}
	if _, err := open(t, c).Consume("owned", "y", false, false, false, false, nil); err != nil {
		t.Fatalf("consume after the exclusive consumer left: %v", err)
	}
}

func TestConsumeNoAck(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	q := declareQ(t, ch, "", nil)
	d, err := ch.Consume(q, "c", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		pubText(t, ch, "", q, fmt.Sprint(i))
	}
	for i := range 3 {
		if m := recv(t, d); string(m.Body) != fmt.Sprint(i) {
			t.Fatalf("delivery %d: %q", i, m.Body)
		}
	}
	// Nothing was awaiting an ack: closing the channel requeues nothing.
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	if n := readyCount(t, open(t, c), q); n != 0 {
		t.Fatalf("%d messages back in the queue after closing a no-ack consumer's channel", n)
	}
}

func TestConsumeCancel(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	q := declareQ(t, ch, "", nil)
	d, err := ch.Consume(q, "c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	pubText(t, ch, "", q, "a")
	m := recv(t, d)
	if err := ch.Cancel("c", false); err != nil {
		t.Fatal(err)
	}
	pubText(t, ch, "", q, "b")
	if n := readyCount(t, ch, q); n != 1 {
		t.Fatalf("ready = %d after cancel, want 1 (the message published after it)", n)
	}
	// A delivery made before the cancel can still be acknowledged, and
	// cancelling an unknown tag is not an error.
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Cancel("nobody", false); err != nil {
		t.Fatalf("cancel of an unknown tag: %v", err)
	}
	if n := readyCount(t, ch, q); n != 1 {
		t.Fatalf("ready = %d, want 1", n)
	}
	if _, ok := <-d; ok {
		t.Fatal("delivery channel still open after basic.cancel")
	}
}

func TestBasicGet(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	q := declareQ(t, ch, "", nil)
	for i := range 3 {
		pubText(t, ch, "", q, fmt.Sprint(i))
	}
	for i := range 2 {
		m, ok, err := ch.Get(q, false)
		if err != nil || !ok {
			t.Fatalf("get %d: ok=%v err=%v", i, ok, err)
		}
		// get-ok message-count: messages left in the queue after this one.
		if string(m.Body) != fmt.Sprint(i) || m.MessageCount != uint32(2-i) || m.Redelivered || m.DeliveryTag != uint64(i+1) {
			t.Fatalf("get %d: body %q count %d redelivered %v tag %d", i, m.Body, m.MessageCount, m.Redelivered, m.DeliveryTag)
		}
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	m, ok, err := ch.Get(q, true)
	if err != nil || !ok || string(m.Body) != "2" || m.MessageCount != 0 {
		t.Fatalf("get: ok=%v err=%v body %q count %d", ok, err, m.Body, m.MessageCount)
	}
	if _, ok, err := ch.Get(q, false); err != nil || ok {
		t.Fatalf("get on an empty queue: ok=%v err=%v, want get-empty", ok, err)
	}
	// no-ack gets need no ack: nothing comes back on recover.
	if err := ch.Recover(true); err != nil {
		t.Fatal(err)
	}
	if n := readyCount(t, ch, q); n != 0 {
		t.Fatalf("ready = %d after recover, want 0", n)
	}
}

func TestAckNackRejectWithConsumer(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	q := declareQ(t, ch, "", nil)
	d, err := ch.Consume(q, "c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 6; i++ {
		pubText(t, ch, "", q, fmt.Sprint(i))
	}
	var ms []amqp091.Delivery
	for range 6 {
		ms = append(ms, recv(t, d))
	}
	if err := ms[1].Ack(true); err != nil { // 1 and 2
		t.Fatal(err)
	}
	if err := ms[3].Nack(true, true); err != nil { // 3 and 4, requeued
		t.Fatal(err)
	}
	if err := ms[4].Reject(false); err != nil { // 5, dropped
		t.Fatal(err)
	}
	for _, want := range []string{"3", "4"} {
		m := recv(t, d)
		if string(m.Body) != want || !m.Redelivered {
			t.Fatalf("got %q redelivered=%v, want %q redelivered", m.Body, m.Redelivered, want)
		}
		if m.DeliveryTag <= 6 {
			t.Fatalf("redelivery reuses delivery tag %d", m.DeliveryTag)
		}
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	pubText(t, ch, "", q, "7")
	if m := recv(t, d); string(m.Body) != "7" || m.Redelivered {
		t.Fatalf("got %q redelivered=%v", m.Body, m.Redelivered)
	}
	// Only 6 (and 7) are unacked now: cancel and close to get them back.
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	got := drainFlags(t, open(t, c), q)
	if want := []string{"6 redelivered", "7 redelivered"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("queue after close: %v, want %v", got, want)
	}
}

// drainFlags returns "body" or "body redelivered" for every message in q.
func drainFlags(t testing.TB, ch *amqp091.Channel, q string) []string {
	t.Helper()
	var out []string
	for {
		m, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatalf("basic.get %q: %v", q, err)
		}
		if !ok {
			return out
		}
		s := string(m.Body)
		if m.Redelivered {
			s += " redelivered"
		}
		out = append(out, s)
	}
}

func TestRequeueGoesAheadOfNewerMessages(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	q := declareQ(t, ch, "", nil)
	for _, b := range []string{"a", "b", "c"} {
		pubText(t, ch, "", q, b)
	}
	ga, _, err := ch.Get(q, false)
	if err != nil {
		t.Fatal(err)
	}
	gb, _, err := ch.Get(q, false)
	if err != nil {
		t.Fatal(err)
	}
	pubText(t, ch, "", q, "d")
	// Returned in the opposite order: the queue puts them back in theirs.
	if err := gb.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	if err := ga.Reject(true); err != nil {
		t.Fatal(err)
	}
	got := drainFlags(t, ch, q)
	if want := []string{"a redelivered", "b redelivered", "c", "d"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("queue order %v, want %v", got, want)
	}
}

func TestUnknownDeliveryTag(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	setup := open(t, c)
	q := declareQ(t, setup, "", nil)
	for i := range 20 {
		pubText(t, setup, "", q, fmt.Sprint(i))
	}
	get := func(ch *amqp091.Channel) amqp091.Delivery {
		t.Helper()
		m, ok, err := ch.Get(q, false)
		if err != nil || !ok {
			t.Fatalf("get: ok=%v err=%v", ok, err)
		}
		return m
	}
	cases := []struct {
		name   string
		method uint16
		run    func(ch *amqp091.Channel) error
	}{
		{"ack never delivered", 80, func(ch *amqp091.Channel) error { return ch.Ack(99, false) }},
		{"nack never delivered", 120, func(ch *amqp091.Channel) error { return ch.Nack(99, false, true) }},
		{"reject never delivered", 90, func(ch *amqp091.Channel) error { return ch.Reject(99, true) }},
		{"ack twice", 80, func(ch *amqp091.Channel) error {
			m := get(ch)
			_ = m.Ack(false)
			return m.Ack(false)
		}},
		{"ack after reject", 80, func(ch *amqp091.Channel) error {
			m := get(ch)
			_ = m.Reject(true)
			return m.Ack(false)
		}},
		// RabbitMQ's collect_acks: multiple=true still needs the tag itself
		// to be outstanding.
		{"multiple with a settled tag", 80, func(ch *amqp091.Channel) error {
			get(ch)
			m := get(ch)
			_ = m.Ack(false)
			return m.Ack(true)
		}},
		{"tag zero without multiple", 80, func(ch *amqp091.Channel) error {
			get(ch)
			return ch.Ack(0, false)
		}},
	}
	for _, tc := range cases {
		ch := open(t, c)
		closed := notifyClose(ch)
		if err := tc.run(ch); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		e := expectClosed(t, closed, 406)
		if !strings.HasPrefix(e.Reason, "PRECONDITION_FAILED - unknown delivery tag ") {
			t.Fatalf("%s: reply text %q", tc.name, e.Reason)
		}
	}

	// multiple=true with tag 0 acknowledges everything outstanding, and is
	// not an error when nothing is.
	ch := open(t, c)
	if err := ch.Ack(0, true); err != nil {
		t.Fatal(err)
	}
	get(ch)
	get(ch)
	if err := ch.Ack(0, true); err != nil {
		t.Fatal(err)
	}
	before := readyCount(t, ch, q)
	if err := ch.Close(); err != nil {
		t.Fatalf("channel closed by ack(0, multiple): %v", err)
	}
	if after := readyCount(t, setup, q); after != before {
		t.Fatalf("ack(0, multiple) left deliveries unacked: ready %d -> %d on close", before, after)
	}
}

func TestBasicRecover(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	q := declareQ(t, ch, "", nil)
	d, err := ch.Consume(q, "c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	pubText(t, ch, "", q, "a")
	pubText(t, ch, "", q, "b")
	for _, want := range []string{"a", "b"} {
		if m := recv(t, d); string(m.Body) != want || m.Redelivered {
			t.Fatalf("got %q redelivered=%v", m.Body, m.Redelivered)
		}
	}
	if err := ch.Recover(true); err != nil {
		t.Fatal(err)
	}
	var last amqp091.Delivery
	for _, want := range []string{"a", "b"} {
		last = recv(t, d)
		if string(last.Body) != want || !last.Redelivered {
			t.Fatalf("after recover: got %q redelivered=%v, want %q redelivered", last.Body, last.Redelivered, want)
		}
	}
	if err := last.Ack(true); err != nil {
		t.Fatal(err)
	}
	if n := readyCount(t, ch, q); n != 0 {
		t.Fatalf("ready = %d", n)
	}

	// requeue=false is not implemented by RabbitMQ: 540, a connection error.
	closed := notifyConnClose(c)
	expectCode(t, ch.Recover(false), 540)
	expectClosed(t, closed, 540)
}

func TestBasicRecoverAsync(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	w := dialWire(t, s)
	w.send(1, &amqp.QueueDeclare{Queue: "ra"})
	w.expect(1, &amqp.QueueDeclareOk{})
	w.publish(1, "", "ra", nil, []byte("a"))
	w.publish(1, "", "ra", nil, []byte("b"))
	w.send(1, &amqp.BasicConsume{Queue: "ra", ConsumerTag: "c"})
	w.expect(1, &amqp.BasicConsumeOk{})
	for _, want := range []string{"a", "b"} {
		d, _, body := w.delivery(1)
		if string(body) != want || d.Redelivered {
			t.Fatalf("got %q redelivered=%v", body, d.Redelivered)
		}
	}
	w.send(1, &amqp.BasicRecoverAsync{Requeue: true})
	for i, want := range []string{"a", "b"} {
		d, _, body := w.delivery(1)
		if string(body) != want || !d.Redelivered || d.DeliveryTag != uint64(3+i) {
			t.Fatalf("after recover-async: got %q redelivered=%v tag %d", body, d.Redelivered, d.DeliveryTag)
		}
	}
	// recover-async has no reply: the next method frame answers the qos.
	w.send(1, &amqp.BasicQos{PrefetchCount: 1})
	w.expect(1, &amqp.BasicQosOk{})

	w.send(1, &amqp.BasicRecoverAsync{Requeue: false})
	cl := w.expect(0, &amqp.ConnectionClose{}).(*amqp.ConnectionClose)
	if cl.ReplyCode != 540 {
		t.Fatalf("recover-async requeue=false: %d %s", cl.ReplyCode, cl.ReplyText)
	}
}

func TestQosPerConsumer(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	q := declareQ(t, ch, "", nil)
	if err := ch.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	d1, err := ch.Consume(q, "c1", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := ch.Consume(q, "c2", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		pubText(t, ch, "", q, fmt.Sprint(i))
	}
	// Deliveries are dispatched as the publishes are handled, so once the
	// passive declare is answered the in-flight count is final: 2 each.
	if n := readyCount(t, ch, q); n != 6 {
		t.Fatalf("ready = %d, want 6 (2 in flight per consumer)", n)
	}
	m1 := []amqp091.Delivery{recv(t, d1), recv(t, d1)}
	recv(t, d2)
	recv(t, d2)
	if err := m1[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	if n := readyCount(t, ch, q); n != 5 {
		t.Fatalf("ready = %d after one ack, want 5", n)
	}
	recv(t, d1)

	// basic.qos applies to consumers created after it.
	if err := ch.Qos(0, 0, false); err != nil {
		t.Fatal(err)
	}
	if n := readyCount(t, ch, q); n != 5 {
		t.Fatalf("ready = %d after qos, want 5: existing consumers keep their limit", n)
	}
	if _, err := ch.Consume(q, "c3", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if n := readyCount(t, ch, q); n != 0 {
		t.Fatalf("ready = %d, want 0: an unlimited consumer takes the rest", n)
	}
}

func TestQosGlobal(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	q1 := declareQ(t, ch, "", nil)
	q2 := declareQ(t, ch, "", nil)
	if err := ch.Qos(3, 0, true); err != nil {
		t.Fatal(err)
	}
	d1, err := ch.Consume(q1, "c1", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := ch.Consume(q2, "c2", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		pubText(t, ch, "", q1, fmt.Sprint(i))
		pubText(t, ch, "", q2, fmt.Sprint(i))
	}
	r1, r2 := readyCount(t, ch, q1), readyCount(t, ch, q2)
	if r1+r2 != 7 {
		t.Fatalf("ready %d + %d, want 7: 3 in flight across the channel", r1, r2)
	}
	var ms []amqp091.Delivery
	for range 5 - r1 {
		ms = append(ms, recv(t, d1))
	}
	for range 5 - r2 {
		ms = append(ms, recv(t, d2))
	}
	if err := ms[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	// The freed credit goes to one of the two consumers.
	select {
	case <-d1:
	case <-d2:
	case <-waitLimit():
		t.Fatal("no delivery after an ack freed channel-wide credit")
	}
	if r := readyCount(t, ch, q1) + readyCount(t, ch, q2); r != 6 {
		t.Fatalf("ready = %d after one ack, want 6", r)
	}
}

func TestQosGlobalAndPerConsumer(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	consumeAll := func(ch *amqp091.Channel, q string, n int) {
		t.Helper()
		for i := range n {
			if _, err := ch.Consume(q, fmt.Sprint("c", i), false, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Both limits apply: 4 consumers of prefetch 1 under a channel limit of 3.
	ch := open(t, c)
	q := declareQ(t, ch, "", nil)
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(3, 0, true); err != nil {
		t.Fatal(err)
	}
	consumeAll(ch, q, 4)
	for i := range 10 {
		pubText(t, ch, "", q, fmt.Sprint(i))
	}
	if n := readyCount(t, ch, q); n != 7 {
		t.Fatalf("ready = %d, want 7 (channel limit 3)", n)
	}

	// 2 consumers of prefetch 1 under a channel limit of 3: 2 in flight.
	ch = open(t, c)
	q = declareQ(t, ch, "", nil)
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(3, 0, true); err != nil {
		t.Fatal(err)
	}
	consumeAll(ch, q, 2)
	for i := range 10 {
		pubText(t, ch, "", q, fmt.Sprint(i))
	}
	if n := readyCount(t, ch, q); n != 8 {
		t.Fatalf("ready = %d, want 8 (consumer limit 1 each)", n)
	}

	// RabbitMQ: basic.qos with global=false lifts the channel-wide limit
	// (rabbit_channel unlimits the channel's limiter).
	ch = open(t, c)
	q = declareQ(t, ch, "", nil)
	if err := ch.Qos(2, 0, true); err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(0, 0, false); err != nil {
		t.Fatal(err)
	}
	consumeAll(ch, q, 1)
	for i := range 5 {
		pubText(t, ch, "", q, fmt.Sprint(i))
	}
	if n := readyCount(t, ch, q); n != 0 {
		t.Fatalf("ready = %d, want 0: the global limit was lifted", n)
	}
}

func TestRoundRobin(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	q := declareQ(t, ch, "", nil)
	var ds []<-chan amqp091.Delivery
	for i := range 3 {
		// One consumer per channel, so each has its own delivery order.
		d, err := open(t, c).Consume(q, fmt.Sprint("c", i), true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	for i := range 9 {
		pubText(t, ch, "", q, fmt.Sprint(i))
	}
	for i, d := range ds {
		for j := range 3 {
			if m := recv(t, d); string(m.Body) != fmt.Sprint(i+3*j) {
				t.Fatalf("consumer %d delivery %d: %q, want %d", i, j, m.Body, i+3*j)
			}
		}
	}
}

func TestClosingReturnsUnacked(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	pch := open(t, dial(t, s))
	q := declareQ(t, pch, "", nil)
	for i := 1; i <= 5; i++ {
		pubText(t, pch, "", q, fmt.Sprint(i))
	}

	// Channel close.
	c := dial(t, s)
	ch := open(t, c)
	if err := ch.Qos(3, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume(q, "c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, d)
	recv(t, d)
	recv(t, d)
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	got := drainFlags(t, pch, q)
	if want := []string{"1 redelivered", "2 redelivered", "3 redelivered", "4", "5"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after channel close: %v, want %v", got, want)
	}

	// Connection close, with two channels holding deliveries.
	for i := 1; i <= 4; i++ {
		pubText(t, pch, "", q, fmt.Sprint(i))
	}
	c2 := dial(t, s)
	for range 2 {
		ch := open(t, c2)
		if err := ch.Qos(1, 0, false); err != nil {
			t.Fatal(err)
		}
		d, err := ch.Consume(q, "c", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		recv(t, d)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "deliveries back in the queue", func() bool { return readyCount(t, pch, q) == 4 })
	got = drainFlags(t, pch, q)
	if want := []string{"1 redelivered", "2 redelivered", "3", "4"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after connection close: %v, want %v", got, want)
	}
}

// Helpers shared by the core messaging tests (exchange, queue, consume,
// confirm/tx and properties).

// declareQ declares a plain queue: not durable, not exclusive, not
// auto-delete. An empty name asks for a server-named queue.
func declareQ(t testing.TB, ch *amqp091.Channel, name string, args amqp091.Table) string {
	t.Helper()
	q, err := ch.QueueDeclare(name, false, false, false, false, args)
	if err != nil {
		t.Fatalf("queue.declare %q: %v", name, err)
	}
	return q.Name
}

// bindQ binds queue q to exchange ex with key and args.
func bindQ(t testing.TB, ch *amqp091.Channel, q, key, ex string, args amqp091.Table) {
	t.Helper()
	if err := ch.QueueBind(q, key, ex, false, args); err != nil {
		t.Fatalf("queue.bind %q -> %q (%q): %v", ex, q, key, err)
	}
}

// declareX declares a plain exchange of kind.
func declareX(t testing.TB, ch *amqp091.Channel, name, kind string) {
	t.Helper()
	if err := ch.ExchangeDeclare(name, kind, false, false, false, false, nil); err != nil {
		t.Fatalf("exchange.declare %q: %v", name, err)
	}
}

// pub publishes p and fails the test when the client cannot send it.
func pub(t testing.TB, ch *amqp091.Channel, ex, key string, mandatory bool, p amqp091.Publishing) {
	t.Helper()
	if err := ch.PublishWithContext(context.Background(), ex, key, mandatory, false, p); err != nil {
		t.Fatalf("publish to %q/%q: %v", ex, key, err)
	}
}

// pubText publishes body as a transient message.
func pubText(t testing.TB, ch *amqp091.Channel, ex, key, body string) {
	t.Helper()
	pub(t, ch, ex, key, false, amqp091.Publishing{Body: []byte(body)})
}

// readyCount is the message count of queue.declare-ok (passive) for q. A
// method on the same connection as earlier publishes is handled after them.
func readyCount(t testing.TB, ch *amqp091.Channel, q string) int {
	t.Helper()
	st, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
	if err != nil {
		t.Fatalf("passive queue.declare %q: %v", q, err)
	}
	return st.Messages
}

// getText takes one message from q with basic.get (no-ack) and returns its
// body; it fails when the queue is empty.
func getText(t testing.TB, ch *amqp091.Channel, q string) string {
	t.Helper()
	m, ok, err := ch.Get(q, true)
	if err != nil {
		t.Fatalf("basic.get %q: %v", q, err)
	}
	if !ok {
		t.Fatalf("basic.get %q: get-empty, want a message", q)
	}
	return string(m.Body)
}

// expectEmpty fails unless basic.get on q answers get-empty.
func expectEmpty(t testing.TB, ch *amqp091.Channel, q string) {
	t.Helper()
	m, ok, err := ch.Get(q, true)
	if err != nil {
		t.Fatalf("basic.get %q: %v", q, err)
	}
	if ok {
		t.Fatalf("basic.get %q: got %q, want get-empty", q, m.Body)
	}
}

// drain returns the bodies of every message in q, in order (basic.get,
// no-ack).
func drain(t testing.TB, ch *amqp091.Channel, q string) []string {
	t.Helper()
	var out []string
	for {
		m, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatalf("basic.get %q: %v", q, err)
		}
		if !ok {
			return out
		}
		out = append(out, string(m.Body))
	}
}

// notifyClose registers for ch's closure.
func notifyClose(ch *amqp091.Channel) chan *amqp091.Error {
	return ch.NotifyClose(make(chan *amqp091.Error, 1))
}

// notifyConnClose registers for c's closure.
func notifyConnClose(c *amqp091.Connection) chan *amqp091.Error {
	return c.NotifyClose(make(chan *amqp091.Error, 1))
}

// expectClosed waits for a channel or connection closure with code.
func expectClosed(t testing.TB, c <-chan *amqp091.Error, code int) *amqp091.Error {
	t.Helper()
	select {
	case e, ok := <-c:
		if !ok || e == nil {
			t.Fatalf("closed without an error, want reply code %d", code)
		}
		if e.Code != code {
			t.Fatalf("closed with %d (%s), want %d", e.Code, e.Reason, code)
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for a close with reply code %d", code)
	}
	return nil
}

// expectReason fails unless e's reply text is want.
func expectReason(t testing.TB, e *amqp091.Error, want string) {
	t.Helper()
	if e.Reason != want {
		t.Fatalf("reply text %q, want %q", e.Reason, want)
	}
}

// wireConn is a bare AMQP 0-9-1 client over TCP, for what amqp091-go does
// not expose (basic.recover-async) and for byte-level checks. Its channel 1
// is open after dialWire.
type wireConn struct {
	t  testing.TB
	nc net.Conn
	fr *amqp.FrameReader
}

// dialWire connects, runs the handshake (no heartbeats) and opens channel 1.
func dialWire(t testing.TB, s *brokertest.Server) *wireConn {
	t.Helper()
	nc, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	// Bounds every read and write of the test: nothing here should wait.
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	w := &wireConn{t: t, nc: nc, fr: amqp.NewFrameReader(nc, 0)}
	w.write(amqp.ProtocolHeader)
	w.expect(0, &amqp.ConnectionStart{})
	w.send(0, &amqp.ConnectionStartOk{
		ClientProperties: amqp.Table{"capabilities": amqp.Table{"consumer_cancel_notify": true}},
		Mechanism:        "PLAIN",
		Response:         "\x00guest\x00guest",
		Locale:           "en_US",
	})
	tune := w.expect(0, &amqp.ConnectionTune{}).(*amqp.ConnectionTune)
	w.send(0, &amqp.ConnectionTuneOk{ChannelMax: tune.ChannelMax, FrameMax: tune.FrameMax})
	w.send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
	w.expect(0, &amqp.ConnectionOpenOk{})
	w.send(1, &amqp.ChannelOpen{})
	w.expect(1, &amqp.ChannelOpenOk{})
	return w
}

func (w *wireConn) write(b []byte) {
	w.t.Helper()
	if _, err := w.nc.Write(b); err != nil {
		w.t.Fatalf("wire write: %v", err)
	}
}

// send writes one method frame.
func (w *wireConn) send(channel uint16, m amqp.Method) {
	w.t.Helper()
	w.write(amqp.AppendMethodFrame(nil, channel, m))
}

// frame reads the next frame other than a heartbeat; its payload is a copy.
func (w *wireConn) frame() amqp.Frame {
	w.t.Helper()
	for {
		f, err := w.fr.ReadFrame()
		if err != nil {
			w.t.Fatalf("wire read: %v", err)
		}
		if f.Type == amqp.FrameHeartbeat {
			continue
		}
		f.Payload = append([]byte(nil), f.Payload...)
		return f
	}
}

// expect reads the next frame and fails unless it is a method of like's
// type on channel.
func (w *wireConn) expect(channel uint16, like amqp.Method) amqp.Method {
	w.t.Helper()
	f := w.frame()
	if f.Type != amqp.FrameMethod {
		w.t.Fatalf("wire: frame type %d on channel %d, want method %s", f.Type, f.Channel, like.Name())
	}
	m, err := amqp.DecodeMethod(f.Payload)
	if err != nil {
		w.t.Fatalf("wire: decode: %v", err)
	}
	if f.Channel != channel || m.ClassID() != like.ClassID() || m.MethodID() != like.MethodID() {
		w.t.Fatalf("wire: got %s on channel %d, want %s on channel %d", m.Name(), f.Channel, like.Name(), channel)
	}
	return m
}

// delivery reads a basic.deliver with its content and returns the method,
// the raw content header payload and the body.
func (w *wireConn) delivery(channel uint16) (*amqp.BasicDeliver, []byte, []byte) {
	w.t.Helper()
	d := w.expect(channel, &amqp.BasicDeliver{}).(*amqp.BasicDeliver)
	h := w.frame()
	if h.Type != amqp.FrameHeader || h.Channel != channel {
		w.t.Fatalf("wire: frame type %d on channel %d, want a content header", h.Type, h.Channel)
	}
	_, size, err := amqp.ParseContentHeaderPrefix(h.Payload)
	if err != nil {
		w.t.Fatal(err)
	}
	var body []byte
	for uint64(len(body)) < size {
		f := w.frame()
		if f.Type != amqp.FrameBody || f.Channel != channel {
			w.t.Fatalf("wire: frame type %d on channel %d, want a content body", f.Type, f.Channel)
		}
		body = append(body, f.Payload...)
	}
	return d, h.Payload, body
}

// publish writes basic.publish with its content (one body frame).
func (w *wireConn) publish(channel uint16, exchange, key string, props *amqp.Properties, body []byte) {
	w.t.Helper()
	b := amqp.AppendMethodFrame(nil, channel, &amqp.BasicPublish{Exchange: exchange, RoutingKey: key})
	b = amqp.AppendHeaderFrame(b, channel, amqp.ClassBasic, uint64(len(body)), props)
	b = amqp.AppendBodyFrames(b, channel, body, 0)
	w.write(b)
}

// waitLimit is the deadline of a wait for something that must happen.
func waitLimit() <-chan time.Time { return time.After(10 * time.Second) }
