package broker_test

import (
	"bytes"
	"context"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// publishRounds publishes rounds batches of n messages of size bytes to q,
// each batch confirmed before the next, so that each becomes a chunk of its
// own.
func publishRounds(t testing.TB, ch *amqp091.Channel, q string, rounds, n, size int) {
	t.Helper()
	for r := 0; r < rounds; r++ {
		publishSized(t, ch, q, n, size)
	}
}

func publishSized(t testing.TB, ch *amqp091.Channel, q string, n, size int) {
	t.Helper()
	confirmMode(t, ch)
	body := bytes.Repeat([]byte{'x'}, size)
	ctx := context.Background()
	var last *amqp091.DeferredConfirmation
	for i := 0; i < n; i++ {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp091.Publishing{Body: body})
		if err != nil {
			t.Fatal(err)
		}
		last = dc
	}
	if ok, err := last.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("confirm: %v %v", ok, err)
	}
}

func streamInfo(t testing.TB, s *brokertest.Server, q string) *broker.StreamInfo {
	t.Helper()
	qi, err := s.Broker.Queue("/", q)
	if err != nil || qi.Stream == nil {
		t.Fatalf("queue info %s: %+v %v", q, qi, err)
	}
	return qi.Stream
}

func firstOffset(t testing.TB, c *amqp091.Connection, q string) int64 {
	t.Helper()
	ch, d := consumeStream(t, c, q, 1, amqp091.Table{"x-stream-offset": "first"})
	defer ch.Close()
	return offsetOf(t, recv(t, d))
}

func TestStreamRetentionBySizeSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	c := dial(t, s)
	ch := open(t, c)
	// Segments of about 1000 body bytes (two chunks of 5 × 100), at most
	// 5000 bytes retained.
	declareStream(t, ch, "s", amqp091.Table{"x-max-length-bytes": int64(5000), "x-stream-max-segment-size-bytes": int64(1000)})
	publishRounds(t, ch, "s", 20, 5, 100)
	waitFor(t, "retention", func() bool { return streamInfo(t, s, "s").FirstOffset == 50 })
	si := streamInfo(t, s, "s")
	if si.Bytes != 5000 || si.Segments != 5 || si.NextOffset != 100 {
		t.Fatalf("after retention: %+v", si)
	}
	if got := firstOffset(t, c, "s"); got != 50 {
		t.Fatalf("first offset delivered %d, want 50", got)
	}
	stop()

	s, stop = startOn(t, dir)
	defer stop()
	c = dial(t, s)
	if si := streamInfo(t, s, "s"); si.FirstOffset != 50 || si.NextOffset != 100 || si.Segments != 5 {
		t.Fatalf("after restart: %+v", si)
	}
	if got := firstOffset(t, c, "s"); got != 50 {
		t.Fatalf("first offset delivered after restart %d, want 50", got)
	}
}

func TestStreamRetentionByAge(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	declareStream(t, ch, "s", amqp091.Table{"x-max-age": "1s", "x-stream-max-segment-size-bytes": int64(1000)})
	publishRounds(t, ch, "s", 6, 5, 100) // three segments
	if si := streamInfo(t, s, "s"); si.Segments != 3 {
		t.Fatalf("segments: %+v", si)
	}
	// The two older segments go once older than 1 s; the active one stays.
	waitFor(t, "age retention", func() bool { return streamInfo(t, s, "s").FirstOffset == 20 })
	if si := streamInfo(t, s, "s"); si.Segments != 1 || si.NextOffset != 30 {
		t.Fatalf("after age retention: %+v", si)
	}
	if got := firstOffset(t, c, "s"); got != 20 {
		t.Fatalf("first offset delivered %d, want 20", got)
	}
}

func TestStreamRetentionByPolicy(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	declareStream(t, ch, "logs", amqp091.Table{"x-stream-max-segment-size-bytes": int64(1000)})
	publishRounds(t, ch, "logs", 10, 5, 100)
	if err := s.Broker.SetPolicy("/", "cap", "^logs$", "queues", 0, map[string]any{"max-length-bytes": 2000.0}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "policy retention", func() bool { return streamInfo(t, s, "logs").FirstOffset == 30 })
	if si := streamInfo(t, s, "logs"); si.MaxBytes != 2000 || si.Bytes != 2000 {
		t.Fatalf("after policy retention: %+v", si)
	}
	if err := s.Broker.SetPolicy("/", "cap", "^logs$", "queues", 0, map[string]any{"max-age": "1s"}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "policy age retention", func() bool { return streamInfo(t, s, "logs").FirstOffset == 40 })
	if err := s.Broker.SetPolicy("/", "bad", "^x$", "queues", 0, map[string]any{"max-age": "1X"}, false); err == nil {
		t.Fatal("a bad max-age policy was accepted")
	}
}

// liveHeap is the live heap after the last GC, from runtime/metrics.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestStreamReadFromStartBoundedHeap writes 200 MB to a stream and reads it
// all back from offset first while sampling the live heap of the process
// (broker and client share it): reading streams chunks from disk, so the
// heap stays within a fixed budget whatever the stream's size. Measured:
// see the log line; the bound asserted is 64 MiB above the heap before the
// read. It takes about 5 s under -race.
func TestStreamReadFromStartBoundedHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	declareStream(t, ch, "big", nil)
	const size, total = 64 << 10, 200_000_000
	n := total / size
	start := time.Now()
	for sent := 0; sent < n; sent += 200 {
		publishSized(t, ch, "big", min(200, n-sent), size)
	}
	pubTime := time.Since(start)
	runtime.GC()
	base := liveHeap()
	stop := make(chan struct{})
	peak := make(chan uint64, 1)
	go func() {
		var m uint64
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-tk.C:
				m = max(m, liveHeap())
			case <-stop:
				peak <- m
				return
			}
		}
	}()
	start = time.Now()
	cch, d := consumeStream(t, c, "big", 200, amqp091.Table{"x-stream-offset": "first"})
	for i := 0; i < n; i++ {
		m := recv(t, d)
		if len(m.Body) != size {
			t.Fatalf("body of %d bytes", len(m.Body))
		}
		if i%100 == 99 {
			if err := cch.Ack(m.DeliveryTag, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	readTime := time.Since(start)
	if r := streamInfo(t, s, "big").DiskReads; r < 50 {
		t.Errorf("%d disk reads for 200 MB: not read from disk?", r)
	}
	close(stop)
	p := <-peak
	t.Logf("200 MB stream: published in %v, read from first in %v; live heap before the read %.1f MiB, peak during it %.1f MiB",
		pubTime.Round(time.Millisecond), readTime.Round(time.Millisecond), float64(base)/(1<<20), float64(p)/(1<<20))
	if p > base+64<<20 {
		t.Fatalf("live heap peaked at %d bytes during the read, more than 64 MiB above %d", p, base)
	}
}
