package main

import (
	"context"
	"fmt"
	"math/rand"
	"path/filepath"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestCrashKeepsConfirmedMessages SIGKILLs a real warren process while
// several publishers send persistent messages with confirms, a few times
// at random points, then checks that every confirmed message is in the
// durable queue exactly once and in order per publisher, and that durable
// topology came back while transient topology did not.
func TestCrashKeepsConfirmedMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs the real binary")
	}
	const publishers = 3
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d", seed)

	bin := buildWarren(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	next := make([]int, publishers)               // next sequence number per publisher
	confirmed := make([]map[int]bool, publishers) // confirmed sequence numbers
	for p := range confirmed {
		confirmed[p] = make(map[int]bool)
	}

	for round := 0; round < 3; round++ {
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
		if _, err := ch.QueueDeclare("crash", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.ExchangeDeclare("crash.x", "direct", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind("crash", "k", "crash.x", false, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("crash.transient", false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}

		var wg sync.WaitGroup
		var mu sync.Mutex
		for p := 0; p < publishers; p++ {
			wg.Add(1)
			go func(p int) {
				defer wg.Done()
				publishUntilKilled(url, "crash.x", "k", amqp091.Persistent, p, &next[p], confirmed[p], &mu)
			}(p)
		}
		// Let some confirms through, then kill at a random point.
		waitUntil := time.Now().Add(10 * time.Second)
		for time.Now().Before(waitUntil) {
			mu.Lock()
			n := len(confirmed[0]) + len(confirmed[1]) + len(confirmed[2])
			mu.Unlock()
			if n > (round+1)*200 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(time.Duration(rng.Intn(300)) * time.Millisecond)
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
	if err := ch.ExchangeDeclarePassive("crash.x", "direct", true, false, false, false, nil); err != nil {
		t.Fatalf("durable exchange lost: %v", err)
	}
	if _, err := ch.QueueDeclarePassive("crash.transient", false, false, false, false, nil); err == nil {
		t.Fatal("transient queue survived the crash")
	}
	ch, err = c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive("crash", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]map[int]bool, publishers)
	last := make([]int, publishers)
	for p := range seen {
		seen[p] = make(map[int]bool)
		last[p] = -1
	}
	for i := 0; i < q.Messages; i++ {
		m, ok, err := ch.Get("crash", true)
		if err != nil || !ok {
			t.Fatalf("get %d of %d: %v %v", i, q.Messages, ok, err)
		}
		var p, seq int
		if _, err := fmt.Sscanf(string(m.Body), "%d:%d", &p, &seq); err != nil || p < 0 || p >= publishers {
			t.Fatalf("bad body %q", m.Body)
		}
		if seen[p][seq] {
			t.Fatalf("publisher %d message %d is there twice", p, seq)
		}
		if seq <= last[p] {
			t.Fatalf("publisher %d: message %d after %d", p, seq, last[p])
		}
		seen[p][seq], last[p] = true, seq
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
	t.Logf("%d confirmed messages over 3 crashes, %d recovered", total, q.Messages)
}

// publishUntilKilled publishes messages "p:seq" (delivery mode mode) to
// exchange ex with routing key key, with confirms, until the connection
// fails, recording the confirmed sequence numbers.
func publishUntilKilled(url, ex, key string, mode uint8, p int, next *int, confirmed map[int]bool, mu *sync.Mutex) {
	c, err := amqp091.Dial(url)
	if err != nil {
		return
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return
	}
	if err := ch.Confirm(false); err != nil {
		return
	}
	start := *next
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 1024))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for cf := range confirms {
			if cf.Ack {
				mu.Lock()
				confirmed[start+int(cf.DeliveryTag)-1] = true
				mu.Unlock()
			}
		}
	}()
	for {
		body := fmt.Sprintf("%d:%d", p, *next)
		err := ch.PublishWithContext(context.Background(), ex, key, false, false, amqp091.Publishing{
			DeliveryMode: mode,
			Body:         []byte(body),
		})
		if err != nil {
			break
		}
		*next++
	}
	c.Close()
	<-done
}
