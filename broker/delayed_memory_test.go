//go:build !race

package broker_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// TestDelayedMillionMemory (WARREN_DELAYED_TEST_MESSAGES=1000000) publishes
// that many delayed messages with random delays of up to an hour (starting an hour out), with
// confirms, and reports the process's RSS and live heap above what they
// were before; then, with that backlog waiting, a burst of 10,000 messages
// that all come due at one moment, reporting their lateness (p50, p99,
// max) and how fast the burst was routed. Figures are logged, not
// asserted (speed is measured, not tested); that every burst message
// arrives, and none before its time, is.
func TestDelayedMillionMemory(t *testing.T) {
	n := atoiOr(os.Getenv("WARREN_DELAYED_TEST_MESSAGES"), 0)
	if n == 0 {
		t.Skip("set WARREN_DELAYED_TEST_MESSAGES")
	}
	s := brokertest.Start(t, &broker.Config{})
	ch := open(t, dial(t, s))
	if err := ch.ExchangeDeclare("dx", "x-delayed-message", true, false, false, false, amqp091.Table{"x-delayed-type": "direct"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("burst", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("burst", "burst", "dx", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	// One listener for the whole run: amqp091 blocks on a full one.
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 4000))
	idleRSS := rssBytes()
	stopSampling, peak := sampleLiveHeap()
	idleHeap := peak()
	start := time.Now()
	body := make([]byte, 100)
	publishDelayedConfirmed(t, ch, confirms, n, func(i int) (string, int64, []byte) {
		// Random delays of up to an hour, from an hour from now: none
		// comes due during the run, however slow the machine.
		return "backlog", int64(3_600_000 + rand.IntN(3_600_000)), body
	})
	pubTime := time.Since(start)
	waitFor(t, "all counted", func() bool { return delayedCount(t, s, "dx") == int64(n) })
	rss := rssBytes()
	runtime.GC()
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	t.Logf("after a GC: live heap %d MiB; %s", live[0].Value.Uint64()>>20, rssParts())
	if path := os.Getenv("WARREN_HEAP_PROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	t.Logf("%d delayed messages (100 B) published with confirms in %v (%.0f msg/s); RSS %d MiB above idle (%d MiB → %d MiB); peak live heap %d MiB above idle",
		n, pubTime.Round(time.Millisecond), float64(n)/pubTime.Seconds(), (rss-idleRSS)>>20, idleRSS>>20, rss>>20, (peak()-idleHeap)>>20)

	rate := float64(n) / pubTime.Seconds()
	burstLateness(t, s, ch, confirms, 10_000, 0, rate, n)
	burstLateness(t, s, ch, confirms, 100_000, 1000, rate, n)
	stopSampling()
	t.Logf("RSS now %d MiB", rssBytes()>>20)
}

// burstLateness publishes count messages to dx due within spread ms of
// one moment (far enough ahead for the publish to finish at rate msg/s),
// consumes them, checks that none arrives before its time, and reports
// their lateness at the consumer and as the scheduler routed them.
func burstLateness(t *testing.T, s *brokertest.Server, ch *amqp091.Channel, confirms <-chan amqp091.Confirmation, count, spread int, rate float64, waiting int) {
	t.Helper()
	lead := time.Duration(float64(count)/rate*1.5*float64(time.Second)) + 2*time.Second
	start := time.Now().Add(lead).UnixMilli()
	d, err := ch.Consume("burst", "burst", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, before, _ := s.DelayedLateness()
	s.DelayedLateMax()
	publishDelayedConfirmed(t, ch, confirms, count, func(i int) (string, int64, []byte) {
		due := start
		if spread > 0 {
			due += int64(rand.IntN(spread))
		}
		b := make([]byte, 8)
		binary.BigEndian.PutUint64(b, uint64(due))
		return "burst", max(due-time.Now().UnixMilli(), 1), b
	})
	slack := time.Until(time.UnixMilli(start)).Round(time.Millisecond)
	time.Sleep(slack) // recv waits a few seconds at most
	late := make([]int64, 0, count)
	var first, last time.Time
	for range count {
		m := recv(t, d)
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		last = now
		want := int64(binary.BigEndian.Uint64(m.Body))
		l := now.UnixMilli() - want
		if l < -1 { // clock granularity: due is in whole ms
			t.Fatalf("message arrived %d ms before its time", -l)
		}
		late = append(late, l)
	}
	if err := ch.Cancel("burst", false); err != nil {
		t.Fatal(err)
	}
	bounds, counts, _ := s.DelayedLateness()
	for i := range counts {
		counts[i] -= before[i]
	}
	slices.Sort(late)
	t.Logf("%d due within %d ms behind %d waiting (published %v before the first was due): at the consumer lateness p50 %d ms, p99 %d ms, max %d ms; received in %v (%.0f msg/s); at the scheduler p50 ≤ %d ms, p99 ≤ %d ms, max %d ms (counts %v by bound %v ms)",
		count, spread, waiting, slack, late[len(late)/2], late[len(late)*99/100], late[len(late)-1],
		last.Sub(first).Round(time.Millisecond), float64(count)/max(last.Sub(first).Seconds(), 1e-3),
		bucketQuantile(bounds, counts, 0.5), bucketQuantile(bounds, counts, 0.99), s.DelayedLateMax(), counts, bounds)
}

// rssParts is the process's RssAnon and RssFile (Linux): heap and stacks
// against mapped files (Badger's tables).
func rssParts() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	var parts []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "RssAnon:") || strings.HasPrefix(l, "RssFile:") {
			parts = append(parts, strings.Join(strings.Fields(l), " "))
		}
	}
	return strings.Join(parts, ", ")
}

// bucketQuantile is the upper bound of the bucket holding quantile q of
// a DelayedLateness histogram (-1: beyond the last bound).
func bucketQuantile(bounds, counts []int64, q float64) int64 {
	var total int64
	for _, c := range counts {
		total += c
	}
	want := int64(float64(total) * q)
	var sum int64
	for i, c := range counts {
		if sum += c; sum > want || sum == total {
			if i < len(bounds) {
				return bounds[i]
			}
			return -1
		}
	}
	return -1
}

// publishDelayedConfirmed publishes n messages to dx with x-delay, keeping
// at most 2,000 unconfirmed, reading confirms from confirms.
func publishDelayedConfirmed(t *testing.T, ch *amqp091.Channel, confirms <-chan amqp091.Confirmation, n int, next func(i int) (key string, delay int64, body []byte)) {
	t.Helper()
	var acked atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range confirms {
			if !c.Ack {
				t.Errorf("nack for %d", c.DeliveryTag)
			}
			if int(acked.Add(1)) == n {
				return
			}
		}
	}()
	for i := range n {
		for int64(i)-acked.Load() >= 2000 {
			time.Sleep(50 * time.Microsecond)
		}
		key, delay, body := next(i)
		if err := ch.PublishWithContext(context.Background(), "dx", key, false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, Headers: amqp091.Table{"x-delay": delay}, Body: body,
		}); err != nil {
			t.Fatal(err)
		}
	}
	<-done
}

// rssBytes is the process's resident set size (Linux), or 0.
func rssBytes() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
