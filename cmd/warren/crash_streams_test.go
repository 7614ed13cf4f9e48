package main

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestCrashKeepsConfirmedStreamMessages SIGKILLs a real warren process
// while publishers append to a stream with confirms, twice, then reads
// the stream from first: every confirmed message is there exactly once,
// in order per publisher, at consecutive offsets; and a named consumer's
// acknowledged offset, given time to be written, survived the kill too.
func TestCrashKeepsConfirmedStreamMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs the real binary")
	}
	const publishers = 2
	bin := buildWarren(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	next := make([]int, publishers)
	confirmed := make([]map[int]bool, publishers)
	for p := range confirmed {
		confirmed[p] = make(map[int]bool)
	}
	streamArgs := amqp091.Table{"x-queue-type": "stream"}
	for round := 0; round < 2; round++ {
		w := startWarren(t, bin, dataDir)
		url := fmt.Sprintf("amqp://guest:guest@%s/", w.addr)
		setup, err := amqp091.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := setup.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("log", true, false, false, false, streamArgs); err != nil {
			t.Fatal(err)
		}
		if round == 1 {
			// A named consumer acknowledges the first 50 messages.
			_ = ch.Qos(50, 0, false)
			d, err := ch.Consume("log", "", false, false, false, false, amqp091.Table{"x-stream-offset": "first", "x-stream-consumer-name": "app"})
			if err != nil {
				t.Fatal(err)
			}
			var m amqp091.Delivery
			for i := 0; i < 50; i++ {
				m = <-d
			}
			if err := m.Ack(true); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // offsets are written within ~200 ms
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for p := 0; p < publishers; p++ {
			wg.Go(func() { publishUntilKilled(url, "", "log", amqp091.Transient, p, &next[p], confirmed[p], &mu) })
		}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			n := len(confirmed[0]) + len(confirmed[1])
			mu.Unlock()
			if n > (round+1)*500 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(time.Duration(50+100*round) * time.Millisecond)
		w.kill()
		wg.Wait()
		setup.Close()
	}

	w := startWarren(t, bin, dataDir)
	c, err := amqp091.Dial(fmt.Sprintf("amqp://guest:guest@%s/", w.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive("log", true, false, false, false, streamArgs)
	if err != nil {
		t.Fatal(err)
	}
	_ = ch.Qos(500, 0, false)
	d, err := ch.Consume("log", "", false, false, false, false, amqp091.Table{"x-stream-offset": "first"})
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]map[int]bool, publishers)
	last := []int{-1, -1}
	for p := range seen {
		seen[p] = make(map[int]bool)
	}
	for i := 0; i < q.Messages; i++ {
		var m amqp091.Delivery
		select {
		case m = <-d:
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out at message %d of %d", i, q.Messages)
		}
		if off, _ := m.Headers["x-stream-offset"].(int64); off != int64(i) {
			t.Fatalf("message %d at offset %d", i, off)
		}
		var p, seq int
		if _, err := fmt.Sscanf(string(m.Body), "%d:%d", &p, &seq); err != nil || p < 0 || p >= publishers {
			t.Fatalf("bad body %q", m.Body)
		}
		if seen[p][seq] || seq <= last[p] {
			t.Fatalf("publisher %d message %d twice or out of order (after %d)", p, seq, last[p])
		}
		seen[p][seq], last[p] = true, seq
		if i%100 == 99 {
			_ = m.Ack(true)
		}
	}
	total := 0
	for p := range confirmed {
		for seq := range confirmed[p] {
			if !seen[p][seq] {
				t.Fatalf("confirmed message %d:%d lost", p, seq)
			}
		}
		total += len(confirmed[p])
	}
	// The named consumer resumes after offset 49.
	ch2, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	_ = ch2.Qos(1, 0, false)
	d2, err := ch2.Consume("log", "", false, false, false, false, amqp091.Table{"x-stream-consumer-name": "app"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-d2:
		if off, _ := m.Headers["x-stream-offset"].(int64); off != 50 {
			t.Fatalf("named consumer resumed at %d, want 50", off)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("named consumer got nothing")
	}
	t.Logf("%d confirmed stream messages over 2 crashes, %d recovered", total, q.Messages)
}
