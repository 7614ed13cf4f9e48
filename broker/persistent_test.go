package broker_test

import (
	"strconv"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
	"github.com/warrenmq/warren/store"
)

// TestPersistentCountsAcrossPagingAndRestart: a durable queue counts its
// persistent messages (QueueInfo.Persistent, RabbitMQ's
// messages_persistent) while transient ones beside them are spilled and
// persistent ones paged out under memory pressure, as consumers take some
// of each, and after a restart, which keeps only the persistent ones, with
// most of them paged out again; a transient queue counts none.
func TestPersistentCountsAcrossPagingAndRestart(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(store.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s := brokertest.Start(t, underPressure(st))
	c := dial(t, s)
	ch := open(t, c)
	declareDurableAndNot(t, ch, "mixed", "transient-queue")
	const n = 150
	// Interleaved: p0 t0 p1 t1 ... (bodies of 2–4 bytes).
	for i := range n {
		confirmedPublish(t, ch, "mixed", "p"+strconv.Itoa(i)+"-", 1, amqp091.Persistent, amqp091.Publishing{})
		confirmedPublish(t, ch, "mixed", "t"+strconv.Itoa(i)+"-", 1, amqp091.Transient, amqp091.Publishing{})
	}
	confirmedPublish(t, ch, "transient-queue", "p", 20, amqp091.Persistent, amqp091.Publishing{})
	want := map[string]bool{} // persistent bodies in "mixed"
	wantBytes := int64(0)
	for i := range n {
		b := "p" + strconv.Itoa(i) + "-0"
		want[b] = true
		wantBytes += int64(len(b))
	}
	check := func(s *brokertest.Server, when string) {
		t.Helper()
		qi := queueInfo(t, s, "mixed")
		if qi.Persistent != len(want) || qi.PersistentBytes != wantBytes {
			t.Fatalf("%s: persistent %d (%d bytes), want %d (%d bytes); ready %d, unacked %d, paged %d",
				when, qi.Persistent, qi.PersistentBytes, len(want), wantBytes, qi.Ready, qi.Unacked, qi.PagedOut)
		}
		if qi, err := s.Queue("/", "transient-queue"); err == nil && (qi.Persistent != 0 || qi.PersistentBytes != 0 || qi.Ready != 20) {
			t.Fatalf("%s: a transient queue of %d counts %d persistent", when, qi.Ready, qi.Persistent)
		}
	}
	if qi := queueInfo(t, s, "mixed"); qi.PagedOut == 0 {
		t.Fatalf("nothing paged out of %d", qi.Ready)
	}
	check(s, "published")

	// Take 60 messages, acknowledging all but the last 10.
	for i := range 60 {
		m, ok, err := ch.Get("mixed", false)
		if err != nil || !ok {
			t.Fatalf("get %d: %v %v", i, ok, err)
		}
		if i < 50 {
			if err := m.Ack(false); err != nil {
				t.Fatal(err)
			}
			if want[string(m.Body)] {
				delete(want, string(m.Body))
				wantBytes -= int64(len(m.Body))
			} else if !strings.HasPrefix(string(m.Body), "t") {
				t.Fatalf("unexpected %q", m.Body)
			}
		}
	}
	waitFor(t, "acks applied", func() bool { return queueInfo(t, s, "mixed").Unacked == 10 })
	check(s, "consumed")
	c.Close()
	waitFor(t, "unacked requeued", func() bool { return queueInfo(t, s, "mixed").Unacked == 0 })
	check(s, "requeued")
	_ = s.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st, err = store.Open(store.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s = brokertest.Start(t, &broker.Config{Store: st, QueueMemoryMessages: 20, QueueMemoryBytes: 1 << 20})
	t.Cleanup(func() { _ = s.Close(); _ = st.Close() })
	if qi := queueInfo(t, s, "mixed"); qi.Ready != len(want) || qi.PagedOut == 0 {
		t.Fatalf("recovered %d of %d persistent, %d paged out", qi.Ready, len(want), qi.PagedOut)
	}
	if _, err := s.Queue("/", "transient-queue"); err == nil {
		t.Fatal("the transient queue survived the restart")
	}
	check(s, "recovered")
	ch = open(t, dial(t, s))
	if _, err := ch.QueuePurge("mixed", false); err != nil {
		t.Fatal(err)
	}
	want, wantBytes = map[string]bool{}, 0
	check(s, "purged")
}
