package broker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker/brokertest"
)

// declareStream declares stream queue name with extra arguments.
func declareStream(t testing.TB, ch *amqp091.Channel, name string, args amqp091.Table) {
	t.Helper()
	a := amqp091.Table{"x-queue-type": "stream"}
	for k, v := range args {
		a[k] = v
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, a); err != nil {
		t.Fatalf("declare stream %s: %v", name, err)
	}
}

// confirming holds the channels put in confirm mode: amqp091-go races
// with itself when Confirm is called again while confirms arrive.
var confirming sync.Map

// confirmMode puts ch in confirm mode once.
func confirmMode(t testing.TB, ch *amqp091.Channel) {
	t.Helper()
	if _, done := confirming.LoadOrStore(ch, true); done {
		return
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
}

// publishStream publishes n messages "<prefix>i" to queue q and waits
// for all their confirms.
func publishStream(t testing.TB, ch *amqp091.Channel, q, prefix string, n int, headers amqp091.Table) {
	t.Helper()
	confirmMode(t, ch)
	ctx := context.Background()
	var dcs []*amqp091.DeferredConfirmation
	for i := 0; i < n; i++ {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false,
			amqp091.Publishing{Body: []byte(fmt.Sprintf("%s%d", prefix, i)), Headers: headers})
		if err != nil {
			t.Fatal(err)
		}
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		ok, err := dc.WaitContext(ctx)
		if err != nil || !ok {
			t.Fatalf("confirm: %v %v", ok, err)
		}
	}
}

// consumeStream starts a consumer with prefetch on a new channel.
func consumeStream(t testing.TB, c *amqp091.Connection, q string, prefetch int, args amqp091.Table) (*amqp091.Channel, <-chan amqp091.Delivery) {
	t.Helper()
	ch := open(t, c)
	if err := ch.Qos(prefetch, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume(q, "", false, false, false, false, args)
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	return ch, d
}

// offsetOf is a delivery's x-stream-offset header.
func offsetOf(t testing.TB, m amqp091.Delivery) int64 {
	t.Helper()
	off, ok := m.Headers["x-stream-offset"].(int64)
	if !ok {
		t.Fatalf("delivery %q has no x-stream-offset header: %v", m.Body, m.Headers)
	}
	return off
}

func TestStreamDeclareRules(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	for _, tc := range []struct {
		name                           string
		durable, autoDelete, exclusive bool
		args                           amqp091.Table
		want                           string
	}{
		{"excl", true, false, true, nil, "invalid property 'exclusive-owner' for queue 'excl' in vhost '/'"},
		{"ad", true, true, false, nil, "invalid property 'auto-delete' for queue 'ad' in vhost '/'"},
		{"nd", false, false, false, nil, "invalid property 'non-durable' for queue 'nd' in vhost '/'"},
		{"ttl", true, false, false, amqp091.Table{"x-message-ttl": int32(5)},
			"invalid arg 'x-message-ttl' for queue 'ttl' in vhost '/' of queue type rabbit_stream_queue"},
		{"ml", true, false, false, amqp091.Table{"x-max-length": int32(5)},
			"invalid arg 'x-max-length' for queue 'ml' in vhost '/' of queue type rabbit_stream_queue"},
		{"dlx", true, false, false, amqp091.Table{"x-dead-letter-exchange": "x"},
			"invalid arg 'x-dead-letter-exchange' for queue 'dlx' in vhost '/' of queue type rabbit_stream_queue"},
		{"age", true, false, false, amqp091.Table{"x-max-age": "7X"},
			"invalid arg 'x-max-age' for queue 'age' in vhost '/': invalid_max_age"},
		{"age2", true, false, false, amqp091.Table{"x-max-age": int32(5)},
			"invalid arg 'x-max-age' for queue 'age2' in vhost '/': {unacceptable_type,signedint}"},
		{"seg", true, false, false, amqp091.Table{"x-stream-max-segment-size-bytes": int64(4000000000)},
			"Exceeded max value for x-stream-max-segment-size-bytes"},
		{"mlb", true, false, false, amqp091.Table{"x-max-length-bytes": int32(-1)},
			"invalid arg 'x-max-length-bytes' for queue 'mlb' in vhost '/': {value_negative,-1}"},
		{"ics0", true, false, false, amqp091.Table{"x-initial-cluster-size": int32(0)},
			"invalid arg 'x-initial-cluster-size' for queue 'ics0' in vhost '/': {value_zero,0}"},
		{"ics-", true, false, false, amqp091.Table{"x-initial-cluster-size": int64(-2)},
			"invalid arg 'x-initial-cluster-size' for queue 'ics-' in vhost '/': {value_negative,-2}"},
	} {
		ch := open(t, c)
		args := amqp091.Table{"x-queue-type": "stream"}
		for k, v := range tc.args {
			args[k] = v
		}
		_, err := ch.QueueDeclare(tc.name, tc.durable, tc.autoDelete, tc.exclusive, false, args)
		e := expectCode(t, err, 406)
		if e.Reason != "PRECONDITION_FAILED - "+tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, e.Reason, tc.want)
		}
	}
	ch := open(t, c)
	declareStream(t, ch, "ok", amqp091.Table{"x-max-age": "7D", "x-max-length-bytes": int64(1e9), "x-stream-max-segment-size-bytes": int32(1e6)})
	// Redeclaring is fine; with other retention it is not.
	declareStream(t, ch, "ok", amqp091.Table{"x-max-age": "7D", "x-max-length-bytes": int64(1e9), "x-stream-max-segment-size-bytes": int32(1e6)})
	_, err := ch.QueueDeclare("ok", true, false, false, false, amqp091.Table{"x-queue-type": "stream", "x-max-age": "1D",
		"x-max-length-bytes": int64(1e9), "x-stream-max-segment-size-bytes": int32(1e6)})
	if e := expectCode(t, err, 406); !strings.Contains(e.Reason, "inequivalent arg 'x-max-age'") {
		t.Errorf("redeclare with another x-max-age: %s", e.Reason)
	}
}

func TestStreamPublishConfirmAndConsumeOffsets(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	declareStream(t, ch, "s", nil)
	publishStream(t, ch, "s", "m", 10, amqp091.Table{"app": "x"})
	before := time.Now()
	time.Sleep(1100 * time.Millisecond) // chunk timestamps are in ms; AMQP timestamps in s
	publishStream(t, ch, "s", "n", 5, nil)

	q, err := ch.QueueDeclarePassive("s", true, false, false, false, amqp091.Table{"x-queue-type": "stream"})
	if err != nil || q.Messages != 15 {
		t.Fatalf("declare-ok: %+v %v", q, err)
	}

	expect := func(args amqp091.Table, firstBody string, firstOff int64, n int) {
		t.Helper()
		cch, d := consumeStream(t, c, "s", 3, args)
		defer cch.Close()
		for i := 0; i < n; i++ {
			m := recv(t, d)
			if i == 0 && (string(m.Body) != firstBody || offsetOf(t, m) != firstOff) {
				t.Fatalf("%v: first delivery %q at %d, want %q at %d", args, m.Body, offsetOf(t, m), firstBody, firstOff)
			}
			if got := offsetOf(t, m); got != firstOff+int64(i) {
				t.Fatalf("%v: delivery %d at offset %d", args, i, got)
			}
			if err := m.Ack(false); err != nil {
				t.Fatal(err)
			}
		}
		noDelivery(t, d)
	}
	expect(amqp091.Table{"x-stream-offset": "first"}, "m0", 0, 15)
	expect(amqp091.Table{"x-stream-offset": int64(4)}, "m4", 4, 11)
	expect(amqp091.Table{"x-stream-offset": int32(12)}, "n2", 12, 3)
	// last: the start of the last chunk, which holds n4 (the five n's may
	// have been written as one chunk or several).
	lch, ld := consumeStream(t, c, "s", 10, amqp091.Table{"x-stream-offset": "last"})
	first := recv(t, ld)
	if off := offsetOf(t, first); off < 10 || off > 14 || string(first.Body) != fmt.Sprintf("n%d", off-10) {
		t.Fatalf("last: first delivery %q at %d", first.Body, off)
	}
	for off := offsetOf(t, first) + 1; off < 15; off++ {
		if m := recv(t, ld); offsetOf(t, m) != off {
			t.Fatalf("last: delivery at %d, want %d", offsetOf(t, m), off)
		}
	}
	noDelivery(t, ld)
	_ = lch.Close()
	expect(amqp091.Table{"x-stream-offset": before.Add(time.Second).Truncate(time.Second)}, "n0", 10, 5)
	expect(amqp091.Table{"x-stream-offset": "1h"}, "m0", 0, 15)

	// next (the default): only what is published after subscribing; two
	// consumers read independently, and headers keep the publisher's.
	c1, d1 := consumeStream(t, c, "s", 5, nil)
	_, d2 := consumeStream(t, c, "s", 5, amqp091.Table{"x-stream-offset": "next"})
	noDelivery(t, d1)
	publishStream(t, ch, "s", "p", 2, amqp091.Table{"app": "y"})
	for _, d := range []<-chan amqp091.Delivery{d1, d2} {
		for i := 0; i < 2; i++ {
			m := recv(t, d)
			if string(m.Body) != fmt.Sprintf("p%d", i) || offsetOf(t, m) != int64(15+i) || m.Headers["app"] != "y" {
				t.Fatalf("next: got %q %v", m.Body, m.Headers)
			}
		}
	}
	// Credit: a prefetch of 5 with nothing acknowledged stops deliveries.
	publishStream(t, ch, "s", "q", 6, nil)
	for i := 0; i < 3; i++ {
		recv(t, d1)
	}
	noDelivery(t, d1)
	if err := c1.Ack(0, true); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		recv(t, d1)
	}
}

func TestStreamConsumeRules(t *testing.T) {
	s := brokertest.Start(t, nil)
	setup := open(t, dial(t, s))
	declareStream(t, setup, "s", nil)
	publishStream(t, setup, "s", "m", 1, nil)

	try := func(name string, f func(ch *amqp091.Channel) error, code int, want string) {
		t.Helper()
		c := dial(t, s)
		ch := open(t, c)
		closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
		err := f(ch)
		if err == nil {
			select {
			case e := <-closed:
				err = e
			case <-time.After(5 * time.Second):
			}
		}
		e := expectCode(t, err, code)
		if !strings.HasSuffix(e.Reason, want) {
			t.Errorf("%s: got %q, want ...%q", name, e.Reason, want)
		}
	}
	try("no prefetch", func(ch *amqp091.Channel) error {
		_, err := ch.Consume("s", "", false, false, false, false, nil)
		return err
	}, 406, "consumer prefetch count is not set for 'queue 's' in vhost '/''")
	try("no-ack", func(ch *amqp091.Channel) error {
		_ = ch.Qos(10, 0, false)
		_, err := ch.Consume("s", "", true, false, false, false, nil)
		return err
	}, 540, "automatic acknowledgement not supported by stream queues queue 's' in vhost '/'")
	try("global qos", func(ch *amqp091.Channel) error {
		_ = ch.Qos(10, 0, false)
		_ = ch.Qos(10, 0, true)
		_, err := ch.Consume("s", "", false, false, false, false, nil)
		return err
	}, 540, "queue 's' in vhost '/' does not support global qos")
	try("get", func(ch *amqp091.Channel) error {
		_, _, err := ch.Get("s", false)
		return err
	}, 540, "basic.get not supported by stream queues queue 's' in vhost '/'")
	try("purge", func(ch *amqp091.Channel) error {
		_, err := ch.QueuePurge("s", false)
		return err
	}, 540, "queue.purge not supported by stream queues queue 's' in vhost '/'")
	try("nack", func(ch *amqp091.Channel) error {
		_ = ch.Qos(10, 0, false)
		d, err := ch.Consume("s", "", false, false, false, false, amqp091.Table{"x-stream-offset": "first"})
		if err != nil {
			return err
		}
		m := <-d
		return m.Nack(false, true)
	}, 540, "basic.nack and basic.reject not supported by stream queues queue 's' in vhost '/'")
	try("bad offset", func(ch *amqp091.Channel) error {
		_ = ch.Qos(10, 0, false)
		_, err := ch.Consume("s", "", false, false, false, false, amqp091.Table{"x-stream-offset": "bogus"})
		return err
	}, 406, "invalid arg 'x-stream-offset' for queue 's' in vhost '/': bogus")
}

func TestStreamSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	c := dial(t, s)
	ch := open(t, c)
	declareStream(t, ch, "s", nil)
	publishStream(t, ch, "s", "m", 20, nil)
	// A named consumer acknowledges up to offset 6.
	cch, d := consumeStream(t, c, "s", 10, amqp091.Table{"x-stream-offset": "first", "x-stream-consumer-name": "app"})
	var last amqp091.Delivery
	for i := 0; i < 7; i++ {
		last = recv(t, d)
	}
	if err := last.Ack(true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the named offset", func() bool {
		q, err := s.Broker.Queue("/", "s")
		return err == nil && len(q.Stream.Named) == 1 && q.Stream.Named[0].Offset == 6
	})
	_ = cch.Close()
	stop()

	s, stop = startOn(t, dir)
	defer stop()
	c = dial(t, s)
	ch = open(t, c)
	q, err := ch.QueueDeclarePassive("s", true, false, false, false, nil)
	if err != nil || q.Messages != 20 {
		t.Fatalf("after restart: %+v %v", q, err)
	}
	// New messages continue the offsets.
	publishStream(t, ch, "s", "n", 1, nil)
	_, d = consumeStream(t, c, "s", 50, amqp091.Table{"x-stream-offset": "first"})
	for i := 0; i < 21; i++ {
		m := recv(t, d)
		if offsetOf(t, m) != int64(i) {
			t.Fatalf("delivery %d at offset %d", i, offsetOf(t, m))
		}
		want := fmt.Sprintf("m%d", i)
		if i == 20 {
			want = "n0"
		}
		if string(m.Body) != want {
			t.Fatalf("delivery %d is %q, want %q", i, m.Body, want)
		}
	}
	// The named consumer resumes after its acknowledged offset.
	_, d = consumeStream(t, c, "s", 50, amqp091.Table{"x-stream-consumer-name": "app"})
	if m := recv(t, d); offsetOf(t, m) != 7 {
		t.Fatalf("named consumer resumed at %d, want 7", offsetOf(t, m))
	}
	qi, err := s.Broker.Queue("/", "s")
	if err != nil || qi.Stream == nil || len(qi.Stream.Named) != 1 || qi.Stream.Named[0].Lag != 14 {
		t.Fatalf("queue info after restart: %+v %v", qi.Stream, err)
	}
}

// TestStreamTxCommitWaitsForTheLog: tx.commit-ok comes once what the
// transaction appended to a stream is committed (on disk).
func TestStreamTxCommitWaitsForTheLog(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareStream(t, ch, "s", nil)
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 3; round++ {
		for i := 0; i < 100; i++ {
			if err := ch.Publish("", "s", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		if err := ch.TxCommit(); err != nil {
			t.Fatal(err)
		}
		qi, err := s.Broker.Queue("/", "s")
		if err != nil || qi.Stream.CommittedOffset != uint64(100*round) {
			t.Fatalf("after commit %d: %+v %v", round, qi.Stream, err)
		}
	}
}
