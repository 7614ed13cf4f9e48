package broker_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
	"github.com/warrenmq/warren/store"
)

// confirmedPublish publishes n messages "<prefix><i>" to queue q and waits
// for every confirm.
func confirmedPublish(t *testing.T, ch *amqp091.Channel, q, prefix string, n int, mode uint8, extra amqp091.Publishing) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		p := extra
		p.DeliveryMode = mode
		p.Body = []byte(prefix + strconv.Itoa(i))
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false, p)
		if err != nil {
			t.Fatal(err)
		}
		if i == n-1 {
			if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
				t.Fatalf("confirm: %v %v", ok, err)
			}
		}
	}
}

func queueInfo(t *testing.T, s *brokertest.Server, q string) broker.QueueInfo {
	t.Helper()
	qi, err := s.Queue("/", q)
	if err != nil {
		t.Fatal(err)
	}
	return qi
}

// consumeInOrder consumes n messages "<prefix><i>" from q in order.
func consumeInOrder(t *testing.T, ch *amqp091.Channel, q, prefix string, n int) []amqp091.Delivery {
	t.Helper()
	if err := ch.Qos(7, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []amqp091.Delivery
	for i := 0; i < n; i++ {
		m := recv(t, d)
		if want := prefix + strconv.Itoa(i); string(m.Body) != want {
			t.Fatalf("message %d: got %q, want %q", i, m.Body, want)
		}
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func TestPagingDurableQueueBeyondWindow(t *testing.T) {
	s := brokertest.Start(t, &broker.Config{QueueMemoryMessages: 20, QueueMemoryBytes: 1 << 20})
	c := dial(t, s)
	ch := open(t, c)
	if _, err := ch.QueueDeclare("deep", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	const n = 500
	confirmedPublish(t, ch, "deep", "m", n, amqp091.Persistent, amqp091.Publishing{Headers: amqp091.Table{"h": "v"}})
	qi := queueInfo(t, s, "deep")
	if qi.Ready != n || qi.PagedOut != n-20 || qi.ReadyBytes < qi.PagedOutBytes || qi.PagedOutBytes == 0 {
		t.Fatalf("ready %d paged %d (%d of %d bytes)", qi.Ready, qi.PagedOut, qi.PagedOutBytes, qi.ReadyBytes)
	}
	// basic.get reads a paged-out head back.
	ch2 := open(t, c)
	for i := 0; i < 25; i++ {
		m, ok, err := ch2.Get("deep", false)
		if err != nil || !ok || string(m.Body) != "m"+strconv.Itoa(i) || m.Headers["h"] != "v" {
			t.Fatalf("get %d: %q %v %v", i, m.Body, ok, err)
		}
	}
	// Closing the channel requeues the 25, ahead of the rest.
	_ = ch2.Close()
	ms := consumeInOrder(t, ch, "deep", "m", n)
	if !ms[0].Redelivered || ms[30].Redelivered || ms[n-1].Headers["h"] != "v" {
		t.Fatalf("redelivered flags %v %v, headers %v", ms[0].Redelivered, ms[30].Redelivered, ms[n-1].Headers)
	}
	waitFor(t, "queue drained", func() bool {
		qi := queueInfo(t, s, "deep")
		return qi.Ready == 0 && qi.Unacked == 0 && qi.PagedOut == 0
	})
}

// underPressure is the configuration of a broker whose queues keep 32
// messages in RAM and count any memory use as pressure (st nil: the test
// broker's own store).
func underPressure(st *store.Store) *broker.Config {
	return &broker.Config{
		Store: st, QueueMemoryMessages: 32, QueueMemoryBytes: 1 << 20,
		MemoryHighWatermarkBytes: 1 << 50, PagingRatio: 1e-12,
	}
}

// declareDurableAndNot declares queue durable as durable and queue
// transient as not.
func declareDurableAndNot(t *testing.T, ch *amqp091.Channel, durable, transient string) {
	t.Helper()
	for _, q := range []struct {
		name    string
		durable bool
	}{{durable, true}, {transient, false}} {
		if _, err := ch.QueueDeclare(q.name, q.durable, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPagingTransientUnderMemoryPressure(t *testing.T) {
	// Any memory use is pressure: transient messages beyond the (shrunk)
	// window are spilled to the store.
	s := brokertest.Start(t, underPressure(nil))
	c := dial(t, s)
	ch := open(t, c)
	declareDurableAndNot(t, ch, "transient-in-durable", "non-durable")
	waitFor(t, "memory pressure", func() bool {
		// The window shrinks to 16 under pressure.
		confirmedPublish(t, ch, "non-durable", "probe", 40, amqp091.Transient, amqp091.Publishing{})
		paged := queueInfo(t, s, "non-durable").PagedOut > 0
		if _, err := ch.QueuePurge("non-durable", false); err != nil {
			t.Fatal(err)
		}
		return paged
	})
	const n = 300
	confirmedPublish(t, ch, "transient-in-durable", "t", n, amqp091.Transient, amqp091.Publishing{})
	confirmedPublish(t, ch, "non-durable", "p", n, amqp091.Persistent, amqp091.Publishing{})
	for _, q := range []string{"transient-in-durable", "non-durable"} {
		if qi := queueInfo(t, s, q); qi.PagedOut < n-20 {
			t.Fatalf("%s: %d of %d paged out", q, qi.PagedOut, qi.Ready)
		}
	}
	consumeInOrder(t, open(t, c), "transient-in-durable", "t", n)
	consumeInOrder(t, open(t, c), "non-durable", "p", n)
}

func TestPagingDeadLettersPagedOutMessages(t *testing.T) {
	s := brokertest.Start(t, &broker.Config{QueueMemoryMessages: 10, QueueMemoryBytes: 1 << 20})
	c := dial(t, s)
	ch := open(t, c)
	if _, err := ch.QueueDeclare("dead", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("src", true, false, false, false, amqp091.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead", "x-max-length": int32(60),
	}); err != nil {
		t.Fatal(err)
	}
	// 100 into a queue of at most 60: the 40 oldest, paged out or not,
	// are dropped to the dead-letter queue with their bodies.
	confirmedPublish(t, ch, "src", "m", 100, amqp091.Persistent, amqp091.Publishing{})
	waitFor(t, "dead letters", func() bool { return queueInfo(t, s, "dead").Ready == 40 })
	ms := consumeInOrder(t, open(t, c), "dead", "m", 40)
	if ms[39].Headers["x-first-death-reason"] != "maxlen" {
		t.Fatalf("x-death headers: %v", ms[39].Headers)
	}
	ch3 := open(t, c)
	for i := 40; i < 100; i++ {
		m, ok, err := ch3.Get("src", true)
		if err != nil || !ok || string(m.Body) != fmt.Sprint("m", i) {
			t.Fatalf("get %d: %q %v %v", i, m.Body, ok, err)
		}
	}
}

func TestPagingRestartKeepsIndexOnly(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	c := dial(t, s)
	ch := open(t, c)
	if _, err := ch.QueueDeclare("deep", true, false, false, false, amqp091.Table{"x-max-priority": int32(3)}); err != nil {
		t.Fatal(err)
	}
	const n = 400
	confirmedPublish(t, ch, "deep", "m", n, amqp091.Persistent, amqp091.Publishing{})
	stop()

	st, err := store.Open(store.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s = brokertest.Start(t, &broker.Config{Store: st, QueueMemoryMessages: 50, QueueMemoryBytes: 1 << 20})
	t.Cleanup(func() { _ = s.Close(); _ = st.Close() })
	if qi := queueInfo(t, s, "deep"); qi.Ready != n || qi.PagedOut != n-50 {
		t.Fatalf("recovered %d, %d paged out", qi.Ready, qi.PagedOut)
	}
	consumeInOrder(t, open(t, dial(t, s)), "deep", "m", n)
}

// TestPagingUnderConcurrency publishes from several connections into a
// durable queue with a tiny window while consumers ack, reject and requeue;
// every message arrives, the queue drains, and deleting it and closing the
// broker leave no pager behind.
func TestPagingUnderConcurrency(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	s := brokertest.Start(t, &broker.Config{QueueMemoryMessages: 8, QueueMemoryBytes: 1 << 20})
	ch := open(t, dial(t, s))
	if _, err := ch.QueueDeclare("busy", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	const pubs, per = 4, 400
	var wg sync.WaitGroup
	for p := 0; p < pubs; p++ {
		pch := open(t, dial(t, s))
		wg.Add(1)
		go func() {
			defer wg.Done()
			mode := amqp091.Persistent
			if p%2 == 1 {
				mode = amqp091.Transient
			}
			confirmedPublish(t, pch, "busy", fmt.Sprintf("p%d-", p), per, mode, amqp091.Publishing{})
		}()
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	done := make(chan struct{})
	for c := 0; c < 2; c++ {
		cch := open(t, dial(t, s))
		if err := cch.Qos(3, 0, false); err != nil {
			t.Fatal(err)
		}
		d, err := cch.Consume("busy", "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			n := 0
			for m := range d {
				n++
				if n%7 == 0 && !m.Redelivered {
					_ = m.Nack(false, true)
					continue
				}
				_ = m.Ack(false)
				mu.Lock()
				seen[string(m.Body)] = true
				all := len(seen) == pubs*per
				mu.Unlock()
				if all {
					close(done)
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d messages arrived", len(seen), pubs*per)
	}
	if _, err := ch.QueueDelete("busy", false, false, false); err != nil {
		t.Fatal(err)
	}
}
