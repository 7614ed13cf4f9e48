package main

import (
	"context"
	"io"
	"math"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/warrenmq/warren/broker/brokertest"
)

// startBenchBroker starts an in-process broker and checks, after it is
// closed, that the bench left no goroutine behind.
func startBenchBroker(t *testing.T) *brokertest.Server {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs after the broker's cleanup
	return brokertest.Start(t, nil)
}

func benchDefaults(uri string) benchConfig {
	return benchConfig{
		URI: uri, Producers: 1, Consumers: 1, Queues: 1, QueuePattern: "warren-bench-%d",
		Size: benchMinSize, ExchangeType: amqp.ExchangeDirect, AutoDelete: true, Out: io.Discard,
	}
}

func checkPercentiles(t *testing.T, r benchResult) {
	t.Helper()
	if r.Samples == 0 {
		t.Fatalf("no latency samples: %+v", r)
	}
	if !(r.Min <= r.P50 && r.P50 <= r.P95 && r.P95 <= r.P99 && r.P99 <= r.P999 && r.P999 <= r.Max) {
		t.Errorf("percentiles out of order: min %v p50 %v p95 %v p99 %v p99.9 %v max %v", r.Min, r.P50, r.P95, r.P99, r.P999, r.Max)
	}
	if r.P50 <= 0 || r.Max > 30*time.Second {
		t.Errorf("implausible latencies: p50 %v max %v", r.P50, r.Max)
	}
}

func TestBenchCounted(t *testing.T) {
	s := startBenchBroker(t)
	cfg := benchDefaults(s.URL)
	cfg.Producers, cfg.Consumers, cfg.Queues = 2, 2, 2
	cfg.Size = 100
	cfg.PMessages = 2000
	cfg.Confirm = 50
	cfg.Prefetch = 100
	cfg.MultiAck = 10
	cfg.Duration = 30 * time.Second // a cap; the run ends when everything is received
	r, err := runBench(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent != 4000 || r.Received != r.Sent || r.Confirmed != r.Sent || r.Nacked != 0 {
		t.Fatalf("sent %d received %d confirmed %d nacked %d, want 4000 of each and no nacks", r.Sent, r.Received, r.Confirmed, r.Nacked)
	}
	if r.Failures != 0 || r.QueueDepth != 0 || r.Samples != r.Received {
		t.Errorf("failures %d (%v), queue depth %d, samples %d", r.Failures, r.FirstFailure, r.QueueDepth, r.Samples)
	}
	if r.SendRate <= 0 || r.ReceiveRate <= 0 || r.Connections != 5 {
		t.Errorf("send rate %v receive rate %v connections %d", r.SendRate, r.ReceiveRate, r.Connections)
	}
	checkPercentiles(t, r)
}

func TestBenchDuration(t *testing.T) {
	s := startBenchBroker(t)
	cfg := benchDefaults(s.URL)
	// Long enough for the once-a-second progress line to come out before
	// the run ends (at exactly 1 s the two race).
	cfg.Duration = 1500 * time.Millisecond
	cfg.Rate = 2000
	cfg.AutoAck = true
	cfg.Connections = 1
	var lines countingWriter
	cfg.Out = &lines
	start := time.Now()
	r, err := runBench(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a 1.5s run took %v", took)
	}
	if r.Duration < 1500*time.Millisecond || r.Duration > 4*time.Second {
		t.Errorf("duration %v, want about 1.5s", r.Duration)
	}
	// 2000/s for about 1.5s; a paced producer that fell behind catches up.
	if r.Sent < 1000 || r.Sent > uint64(2000*r.Duration.Seconds())+50 || r.Received == 0 || r.Received > r.Sent {
		t.Errorf("sent %d received %d in %v", r.Sent, r.Received, r.Duration)
	}
	if r.Failures != 0 || r.Connections != 2 || lines.n < 1 {
		t.Errorf("failures %d (%v), connections %d, progress lines %d", r.Failures, r.FirstFailure, r.Connections, lines.n)
	}
	checkPercentiles(t, r)
}

type countingWriter struct{ n int }

func (w *countingWriter) Write(p []byte) (int, error) { w.n++; return len(p), nil }

func TestBenchRouting(t *testing.T) {
	s := startBenchBroker(t)
	for _, tc := range []struct {
		name   string
		set    func(*benchConfig)
		copies uint64
	}{
		{"fanout", func(c *benchConfig) { c.ExchangeType, c.Queues, c.Consumers = amqp.ExchangeFanout, 3, 3 }, 3},
		{"topic", func(c *benchConfig) {
			c.ExchangeType, c.Queues, c.Consumers, c.TopicBindings = amqp.ExchangeTopic, 2, 2, 30
		}, 1},
		{"headers", func(c *benchConfig) {
			c.ExchangeType, c.Producers, c.Queues, c.Consumers = amqp.ExchangeHeaders, 2, 2, 2
		}, 1},
		{"direct-shared-key", func(c *benchConfig) { c.RoutingKey, c.Queues, c.Consumers = "k", 2, 2 }, 2},
		{"default-exchange", func(c *benchConfig) { c.Exchange = "amq.default"; c.Persistent = true; c.AutoDelete = false }, 1},
		{"queue-args", func(c *benchConfig) { c.QueueArgs = amqp.Table{"x-max-length": int64(100000)}; c.Connections = 1 }, 1},
		{"stream", func(c *benchConfig) {
			c.QueueArgs, c.ConsumerArgs = amqp.Table{"x-queue-type": "stream"}, amqp.Table{"x-stream-offset": "first"}
			c.Persistent, c.AutoDelete, c.Prefetch, c.Confirm = true, false, 100, 50
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := benchDefaults(s.URL)
			cfg.PMessages = 300
			cfg.Duration = 30 * time.Second
			tc.set(&cfg)
			r, err := runBench(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := uint64(cfg.Producers) * 300
			if r.Sent != want || r.Received != want*tc.copies || r.Failures != 0 {
				t.Fatalf("sent %d received %d failures %d (%v), want %d sent, %d received", r.Sent, r.Received, r.Failures, r.FirstFailure, want, want*tc.copies)
			}
			checkPercentiles(t, r)
		})
	}
}

func TestBenchCancel(t *testing.T) {
	s := startBenchBroker(t)
	cfg := benchDefaults(s.URL)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	r, err := runBench(ctx, cfg) // no duration, no count: runs until ctx is done
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent == 0 || r.Duration > 5*time.Second {
		t.Errorf("sent %d in %v", r.Sent, r.Duration)
	}
}

func TestBenchConnectOnly(t *testing.T) {
	s := startBenchBroker(t)
	cfg := benchDefaults(s.URL)
	cfg.ConnectOnly = 40
	cfg.ConnectParallelism = 8
	cfg.Duration = 100 * time.Millisecond
	r, err := runBench(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Connections != 40 || r.Failures != 0 || r.Connect <= 0 || r.Duration < 100*time.Millisecond {
		t.Errorf("connections %d failures %d (%v) connect %v held %v", r.Connections, r.Failures, r.FirstFailure, r.Connect, r.Duration)
	}

	cfg.URI = "amqp://guest:wrong@" + s.Addr
	cfg.ConnectOnly, cfg.Duration = 3, 0
	r, err = runBench(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Connections != 0 || r.Failures != 3 || r.FirstFailure == nil {
		t.Errorf("bad password: connections %d failures %d (%v), want 0 and 3", r.Connections, r.Failures, r.FirstFailure)
	}
}

func TestBenchConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*benchConfig)
		ok   bool
	}{
		{"defaults", func(*benchConfig) {}, true},
		{"small body", func(c *benchConfig) { c.Size = 15 }, false},
		{"nobody", func(c *benchConfig) { c.Producers, c.Consumers = 0, 0 }, false},
		{"multi-ack over prefetch", func(c *benchConfig) { c.MultiAck, c.Prefetch = 20, 10 }, false},
		{"multi-ack with autoack", func(c *benchConfig) { c.MultiAck, c.AutoAck = 2, true }, false},
		{"negative rate", func(c *benchConfig) { c.Rate = -1 }, false},
		{"connect-only skips the rest", func(c *benchConfig) { c.ConnectOnly, c.Size = 5, 0 }, true},
	} {
		cfg := benchDefaults("amqp://127.0.0.1:1")
		tc.set(&cfg)
		if err := cfg.validate(); (err == nil) != tc.ok {
			t.Errorf("%s: validate() = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	cfg := benchDefaults("amqp://127.0.0.1:1")
	for _, bad := range []func(*benchConfig){
		func(c *benchConfig) { c.ExchangeType = "x-consistent-hash" },
		func(c *benchConfig) { c.Queues, c.QueuePattern = 2, "fixed" },
		func(c *benchConfig) { c.Queues = 0 },
	} {
		c := cfg
		bad(&c)
		if _, err := planTopology(&c); err == nil {
			t.Errorf("planTopology(%+v) accepted", c)
		}
	}
}

func TestParseQueueArgs(t *testing.T) {
	got, err := parseQueueArgs([]string{"x-queue-type=quorum", "x-max-length=1000", "x-single-active-consumer=true", "x-note=1e3"})
	if err != nil {
		t.Fatal(err)
	}
	want := amqp.Table{"x-queue-type": "quorum", "x-max-length": int64(1000), "x-single-active-consumer": true, "x-note": "1e3"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %#v, want %#v", k, got[k], v)
		}
	}
	if _, err := parseQueueArgs([]string{"novalue"}); err == nil {
		t.Error("accepted an argument without =")
	}
}

func TestHistogramBuckets(t *testing.T) {
	prevLow := uint64(0)
	for i := 1; i < histBuckets; i++ {
		low, width := histBounds(i)
		if pl, pw := histBounds(i - 1); pl+pw != low {
			t.Fatalf("bucket %d starts at %d, previous ends at %d", i, low, pl+pw)
		}
		if histIndex(low) != i || histIndex(low+width-1) != i {
			t.Fatalf("bucket %d [%d, %d] does not index back", i, low, low+width-1)
		}
		if low >= histSub && float64(width)/float64(low) > 1.0/histSub {
			t.Fatalf("bucket %d is %d wide at %d", i, width, low)
		}
		prevLow = low
	}
	if prevLow == 0 || histIndex(math.MaxUint64) != histBuckets-1 {
		t.Fatal("the last bucket does not reach MaxUint64")
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h latencyHist
	for v := int64(1); v <= 1_000_000; v++ {
		h.record(v * 1000) // 1µs .. 1s, uniform
	}
	h.record(-5) // clock skew counts as zero
	var s histSnapshot
	h.drainInto(&s)
	if s.n != 1_000_001 {
		t.Fatalf("n = %d", s.n)
	}
	for _, q := range []float64{0.5, 0.95, 0.99, 0.999} {
		want := q * float64(time.Second)
		if got := float64(s.quantile(q)); math.Abs(got-want)/want > 0.02 {
			t.Errorf("q%v = %v, want %v ±2%%", q, time.Duration(got), time.Duration(want))
		}
	}
	if s.min() != 0 || s.max() < time.Second || s.max() > time.Second*103/100 {
		t.Errorf("min %v max %v", s.min(), s.max())
	}
	var again histSnapshot
	h.drainInto(&again)
	if again.n != 0 {
		t.Errorf("drain left %d counts", again.n)
	}
	var empty histSnapshot
	if empty.quantile(0.5) != 0 || empty.max() != 0 {
		t.Error("empty histogram reports values")
	}
}

func TestBenchJSON(t *testing.T) {
	j := benchJSON(benchResult{Sent: 10, Received: 9, SendRate: 1234.56, P50: 1500 * time.Nanosecond, P999: 2 * time.Millisecond,
		Duration: 1500 * time.Millisecond, Connect: 2500 * time.Microsecond, Failures: 1})
	if j.Sent != 10 || j.Received != 9 || j.SendRate != 1234.6 || j.P50 != 1.5 || j.P999 != 2000 || j.Duration != 1.5 || j.Connect != 2.5 || j.Failures != 1 {
		t.Errorf("%+v", j)
	}
}
