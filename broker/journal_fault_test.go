package broker_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// publishOneConfirmed publishes body to q and returns whether it was acked.
func publishOneConfirmed(t *testing.T, ch *amqp091.Channel, q, body string) bool {
	t.Helper()
	confirmMode(t, ch)
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false,
		amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := dc.WaitContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestStreamChunkWriteFailureNotCommitted: a stream chunk whose write fails
// is nacked and never delivered, and the next message takes its offset: no
// gap, before or after a restart.
func TestStreamChunkWriteFailureNotCommitted(t *testing.T) {
	dir := t.TempDir()
	s, st, stop := startWithStore(t, dir)
	ch := open(t, dial(t, s))
	declareStream(t, ch, "s", nil)
	if !publishOneConfirmed(t, ch, "s", "m0") {
		t.Fatal("m0 nacked")
	}
	// Refuse the data record of the chunk at offset 1.
	st.SetJournalFault(failStreamChunkAt(1))
	if publishOneConfirmed(t, ch, "s", "m1") {
		t.Fatal("m1 acked although its chunk was not written")
	}
	st.SetJournalFault(nil)
	if !publishOneConfirmed(t, ch, "s", "m2") {
		t.Fatal("m2 nacked")
	}
	check := func(when string) {
		_, d := consumeStream(t, dial(t, s), "s", 10, amqp091.Table{"x-stream-offset": "first"})
		for i, want := range []string{"m0", "m2"} {
			m := recv(t, d)
			if string(m.Body) != want || offsetOf(t, m) != int64(i) {
				t.Fatalf("%s: delivery %d is %q at offset %d, want %q at %d", when, i, m.Body, offsetOf(t, m), want, i)
			}
		}
		noDelivery(t, d)
	}
	check("before restart")
	stop()
	s, _, stop = startWithStore(t, dir)
	defer stop()
	check("after restart")
}

// TestStreamLongConsumerNameKeepsItsOffset: a named stream consumer whose
// name is too long for the store's plain offset key (over 245 bytes) keeps
// its acknowledged offset across a restart like a short one.
func TestStreamLongConsumerNameKeepsItsOffset(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	c := dial(t, s)
	ch := open(t, c)
	declareStream(t, ch, "s", nil)
	publishStream(t, ch, "s", "m", 10, nil)
	// Names over 255 bytes are refused, as RabbitMQ limits stream
	// tracking references.
	_, err := open(t, c).Consume("s", "", false, false, false, false,
		amqp091.Table{"x-stream-consumer-name": strings.Repeat("n", 256)})
	expectCode(t, err, 406)
	names := []string{strings.Repeat("n", 255), strings.Repeat("q", 246), "short"}
	for i, name := range names {
		cch, d := consumeStream(t, c, "s", 10, amqp091.Table{"x-stream-offset": "first", "x-stream-consumer-name": name})
		var last amqp091.Delivery
		for j := 0; j <= 2+i; j++ {
			last = recv(t, d)
		}
		if err := last.Ack(true); err != nil {
			t.Fatal(err)
		}
		_ = cch.Close()
	}
	waitFor(t, "the named offsets", func() bool {
		q, err := s.Broker.Queue("/", "s")
		return err == nil && len(q.Stream.Named) == 3
	})
	stop()

	s, stop = startOn(t, dir)
	defer stop()
	c = dial(t, s)
	for i, name := range names {
		_, d := consumeStream(t, c, "s", 10, amqp091.Table{"x-stream-consumer-name": name})
		if m := recv(t, d); offsetOf(t, m) != int64(3+i) {
			t.Fatalf("consumer named with %d bytes resumed at %d, want %d", len(name), offsetOf(t, m), 3+i)
		}
	}
}

// TestFailedJournalWriteFailsOnlyItsMessage: a persistent message whose
// journal write fails is nacked alone (its neighbours are acked), and the
// queue lets it go: what the queue holds is what a restart recovers.
func TestFailedJournalWriteFailsOnlyItsMessage(t *testing.T) {
	dir := t.TempDir()
	s, st, stop := startWithStore(t, dir)
	ch := open(t, dial(t, s))
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// Refuse the third message key written.
	var seen [][]byte
	st.SetJournalFault(func(k []byte) error {
		if len(k) != 17 || k[0] != 'm' {
			return nil
		}
		for i, s := range seen {
			if string(s) == string(k) {
				if i == 2 {
					return errors.New("injected write failure")
				}
				return nil
			}
		}
		seen = append(seen, append([]byte(nil), k...))
		if len(seen) == 3 {
			return errors.New("injected write failure")
		}
		return nil
	})
	for i := 0; i < 5; i++ {
		if acked := publishOneConfirmed(t, ch, "q", fmt.Sprint("m", i)); acked != (i != 2) {
			t.Fatalf("m%d: acked %v", i, acked)
		}
	}
	st.SetJournalFault(nil)
	want := []string{"m0", "m1", "m3", "m4"}
	waitFor(t, "the refused message dropped", func() bool { return queueInfo(t, s, "q").Ready == len(want) })
	stop()
	s, _, stop = startWithStore(t, dir)
	defer stop()
	ch = open(t, dial(t, s))
	for _, w := range want {
		m, ok, err := ch.Get("q", true)
		if err != nil || !ok || string(m.Body) != w {
			t.Fatalf("after restart: %q %v %v, want %q", m.Body, ok, err, w)
		}
	}
	if _, ok, _ := ch.Get("q", true); ok {
		t.Fatal("after restart: more messages than before")
	}
}

// TestStreamTxCommitFailsWhenChunkWriteFails: a transaction whose stream
// messages were not written gets no tx.commit-ok: the channel is closed with
// 541, and the message is never delivered.
func TestStreamTxCommitFailsWhenChunkWriteFails(t *testing.T) {
	s, st, stop := startWithStore(t, t.TempDir())
	defer stop()
	ch := open(t, dial(t, s))
	declareStream(t, ch, "s", nil)
	if !publishOneConfirmed(t, ch, "s", "m0") {
		t.Fatal("m0 nacked")
	}
	st.SetJournalFault(failStreamChunkAt(1))
	tch := open(t, dial(t, s)) // 541 closes the whole connection
	if err := tch.Tx(); err != nil {
		t.Fatal(err)
	}
	if err := tch.PublishWithContext(context.Background(), "", "s", false, false, amqp091.Publishing{Body: []byte("m1")}); err != nil {
		t.Fatal(err)
	}
	expectCode(t, tch.TxCommit(), 541)
	st.SetJournalFault(nil)
	if !publishOneConfirmed(t, ch, "s", "m2") {
		t.Fatal("m2 nacked")
	}
	_, d := consumeStream(t, dial(t, s), "s", 10, amqp091.Table{"x-stream-offset": "first"})
	for i, want := range []string{"m0", "m2"} {
		if m := recv(t, d); string(m.Body) != want {
			t.Fatalf("delivery %d is %q, want %q", i, m.Body, want)
		}
	}
	noDelivery(t, d)
}

// failStreamChunkAt is a journal fault that refuses the data record of the
// stream chunk at offset off.
func failStreamChunkAt(off uint64) func([]byte) error {
	return func(k []byte) error {
		if len(k) == 18 && k[0] == 's' && k[9] == 'd' && binary.BigEndian.Uint64(k[10:]) == off {
			return errors.New("injected write failure")
		}
		return nil
	}
}
