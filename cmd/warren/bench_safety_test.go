package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestBenchKeepsWhatItDidNotCreate runs a bench on a queue and an exchange
// that exist before it, beside a queue it creates: the run must delete
// only its own queue, leave the others and their messages, and report the
// depth of every queue once the broker has taken in all that was sent.
func TestBenchKeepsWhatItDidNotCreate(t *testing.T) {
	for _, client := range []string{benchClientRaw, benchClientAMQP091} {
		t.Run(client, func(t *testing.T) {
			s := startBenchBroker(t)
			conn, err := amqp.Dial(s.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			if err := ch.ExchangeDeclare("shop", amqp.ExchangeDirect, false, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := ch.QueueDeclare("orders0", false, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				if err := ch.PublishWithContext(context.Background(), "", "orders0", false, false, amqp.Publishing{Body: []byte("keep me")}); err != nil {
					t.Fatal(err)
				}
			}

			cfg := benchDefaults(s.URL)
			cfg.Client = client
			cfg.Exchange, cfg.QueuePattern, cfg.Queues = "shop", "orders%d", 2
			cfg.Producers, cfg.Consumers, cfg.PMessages = 2, 0, 50
			cfg.AutoDelete = false
			r, err := runBench(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Sent != 100 || r.QueueDepth != 103 {
				t.Errorf("sent %d, queue depth %d; want 100 and 103", r.Sent, r.QueueDepth)
			}
			q, err := ch.QueueDeclarePassive("orders0", false, false, false, false, nil)
			if err != nil || q.Messages != 53 {
				t.Fatalf("orders0 after the run: %+v %v, want it with 53 messages", q, err)
			}
			if err := ch.ExchangeDeclarePassive("shop", amqp.ExchangeDirect, false, false, false, false, nil); err != nil {
				t.Fatalf("exchange shop after the run: %v", err)
			}
			if _, err := ch.QueueDeclarePassive("orders1", false, false, false, false, nil); err == nil {
				t.Error("the bench's own queue orders1 is still there")
			}
		})
	}
}

// TestBenchQueueDepthCountsEverySent checks that the depth reported is
// read after the broker took in the last publishes, still in flight when
// the producers return.
func TestBenchQueueDepthCountsEverySent(t *testing.T) {
	for _, client := range []string{benchClientRaw, benchClientAMQP091} {
		t.Run(client, func(t *testing.T) {
			s := startBenchBroker(t)
			cfg := benchDefaults(s.URL)
			cfg.Client = client
			cfg.Producers, cfg.Consumers, cfg.Queues, cfg.PMessages, cfg.Size = 4, 0, 1, 5000, 1000
			r, err := runBench(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Sent != 20000 || r.QueueDepth != 20000 {
				t.Errorf("sent %d, queue depth %d; want 20000 of both", r.Sent, r.QueueDepth)
			}
		})
	}
}

// TestBenchConfirmLatency checks that every confirm's latency is recorded
// and summarised, on both clients.
func TestBenchConfirmLatency(t *testing.T) {
	for _, client := range []string{benchClientRaw, benchClientAMQP091} {
		t.Run(client, func(t *testing.T) {
			s := startBenchBroker(t)
			cfg := benchDefaults(s.URL)
			cfg.Client = client
			cfg.Producers, cfg.Consumers, cfg.PMessages, cfg.Confirm = 2, 1, 1000, 20
			r, err := runBench(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Confirmed != 2000 || r.ConfirmSamples != r.Confirmed {
				t.Fatalf("confirmed %d, confirm latencies %d; want 2000 of both", r.Confirmed, r.ConfirmSamples)
			}
			if !(0 < r.ConfirmMin && r.ConfirmMin <= r.ConfirmP50 && r.ConfirmP50 <= r.ConfirmP95 && r.ConfirmP95 <= r.ConfirmP99 &&
				r.ConfirmP99 <= r.ConfirmP999 && r.ConfirmP999 <= r.ConfirmMax && r.ConfirmMax < 30*time.Second) {
				t.Errorf("confirm latencies min %v p50 %v p95 %v p99 %v p99.9 %v max %v", r.ConfirmMin, r.ConfirmP50, r.ConfirmP95, r.ConfirmP99, r.ConfirmP999, r.ConfirmMax)
			}
			if j := benchJSON(r); j.ConfirmP50 <= 0 || j.ConfirmMax < j.ConfirmP99 {
				t.Errorf("JSON confirm latencies: %+v", j)
			}
			var sum bytes.Buffer
			printBenchSummary(&sum, &cfg, r)
			if !bytes.Contains(sum.Bytes(), []byte("confirm latency min/p50/p95/p99/p99.9/max: ")) {
				t.Errorf("summary:\n%s", sum.String())
			}
		})
	}
}

// TestBenchCSVOutput checks the per-second CSV: PerfTest's columns, one
// row a tick, numbers in every rate column.
func TestBenchCSVOutput(t *testing.T) {
	s := startBenchBroker(t)
	cfg := benchDefaults(s.URL)
	cfg.Confirm, cfg.Rate, cfg.Duration = 10, 2000, 2500*time.Millisecond
	var out bytes.Buffer
	cfg.CSV = &out
	if _, err := runBench(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&out).ReadAll()
	if err != nil {
		t.Fatalf("CSV: %v\n%s", err, out.String())
	}
	if len(rows) < 2 || len(rows[0]) != len(benchCSVHeader) || rows[0][0] != "time (s)" || rows[0][10] != "min confirm latency (µs)" {
		t.Fatalf("CSV:\n%s", out.String())
	}
	for _, row := range rows[1:] {
		for i := 0; i < 5; i++ {
			if _, err := strconv.ParseUint(row[i], 10, 64); err != nil {
				t.Errorf("column %q of %v: %v", rows[0][i], row, err)
			}
		}
	}
	if sent, _ := strconv.Atoi(rows[1][1]); sent == 0 {
		t.Errorf("nothing sent in the first second: %v", rows[1])
	}
}
