//go:build !race

package broker_test

import (
	"context"
	"encoding/binary"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// heapBudget is what the live heap of the test process — broker, store
// and the test's own clients — must stay under while a million 1 KiB
// persistent messages (1 GiB of bodies) are queued: the queue keeps a
// 24-byte index per message and the bodies of its first 16 MiB in RAM.
const heapBudget = 160 << 20

// TestMillionPersistentMessagesBoundedHeap queues 1,000,000 persistent
// 1 KiB messages with confirms into a durable queue, checks that the live
// heap stays under heapBudget, then drains the queue in order. It is left
// out of -race runs (too slow there); scripts/test.sh runs it on its own.
func TestMillionPersistentMessagesBoundedHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("a million 1 KiB messages")
	}
	n := 1_000_000
	if v := os.Getenv("WARREN_MEMORY_TEST_MESSAGES"); v != "" {
		n = atoiOr(v, n)
	}
	s := brokertest.Start(t, &broker.Config{})
	stopSampling, peak := sampleLiveHeap()

	pc := dial(t, s)
	ch := open(t, pc)
	if _, err := ch.QueueDeclare("million", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	publishConfirmed(t, ch, "million", n, 1024)
	pubTime := time.Since(start)
	qi, err := s.Queue("/", "million")
	if err != nil {
		t.Fatal(err)
	}
	if qi.Ready != n {
		t.Fatalf("%d ready, want %d", qi.Ready, n)
	}
	queuedPeak := peak()
	if f := os.Getenv("WARREN_MEMORY_TEST_HEAP"); f != "" {
		runtime.GC()
		if out, err := os.Create(f); err == nil {
			_ = pprof.WriteHeapProfile(out)
			_ = out.Close()
		}
	}
	t.Logf("published %d × 1 KiB persistent with confirms in %v (%.0f msg/s); %d paged out (%d MiB); peak live heap %d MiB",
		n, pubTime.Round(time.Millisecond), float64(n)/pubTime.Seconds(), qi.PagedOut, qi.PagedOutBytes>>20, queuedPeak>>20)

	cc := dial(t, s)
	cch := open(t, cc)
	if err := cch.Qos(1000, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := cch.Consume("million", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	for i := 0; i < n; i++ {
		m := recv(t, d)
		if len(m.Body) != 1024 {
			t.Fatalf("message %d: %d bytes", i, len(m.Body))
		}
		if got := binary.BigEndian.Uint64(m.Body); got != uint64(i) {
			t.Fatalf("message %d arrived as number %d", i, got)
		}
		if i%500 == 499 || i == n-1 {
			if err := m.Ack(true); err != nil {
				t.Fatal(err)
			}
		}
	}
	drainTime := time.Since(start)
	stopSampling()
	total := peak()
	t.Logf("drained in order in %v (%.0f msg/s); peak live heap over the whole run %d MiB (budget %d MiB)",
		drainTime.Round(time.Millisecond), float64(n)/drainTime.Seconds(), total>>20, heapBudget>>20)
	if total > heapBudget {
		t.Fatalf("peak live heap %d MiB over the budget of %d MiB", total>>20, heapBudget>>20)
	}
}

// publishConfirmed publishes n messages of size bytes, numbered in their
// first 8 bytes, persistent, keeping at most 1,000 unconfirmed.
func publishConfirmed(t *testing.T, ch *amqp091.Channel, q string, n, size int) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 2000))
	const window = 1000
	var acked atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for c := range confirms {
			if !c.Ack {
				t.Errorf("nack for %d", c.DeliveryTag)
			}
			if int(acked.Add(1)) == n {
				return
			}
		}
	}()
	body := make([]byte, size)
	for i := 0; i < n; i++ {
		for int64(i)-acked.Load() >= window {
			time.Sleep(50 * time.Microsecond)
		}
		binary.BigEndian.PutUint64(body, uint64(i))
		if err := ch.PublishWithContext(context.Background(), "", q, false, false,
			amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

// sampleLiveHeap samples the live heap (as of the last GC) every 20 ms
// until stopped; peak reports the highest sample so far.
func sampleLiveHeap() (stop func(), peak func() uint64) {
	var max atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > max.Load() {
				max.Store(v)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	runtime.GC()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }, max.Load
}

func atoiOr(s string, def int) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return def
		}
		n = n*10 + int(c-'0')
	}
	return n
}
