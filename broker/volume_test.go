package broker_test

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/warrenmq/warren/broker/brokertest"
)

// volumeCount is how many messages the volume tests move: a million
// (20,000 with -short).
func volumeCount(t *testing.T) int {
	if testing.Short() {
		return 20_000
	}
	return 1_000_000
}

// publishSeq publishes n 16-byte messages numbered 0..n-1 to queue q.
func publishSeq(t *testing.T, c *amqp091.Connection, q string, n int) {
	t.Helper()
	ch := open(t, c)
	body := make([]byte, 16)
	for i := 0; i < n; i++ {
		binary.BigEndian.PutUint64(body, uint64(i))
		if err := ch.PublishWithContext(context.Background(), "", q, false, false, amqp091.Publishing{Body: body}); err != nil {
			t.Errorf("publish %d: %v", i, err)
			return
		}
	}
}

func TestVolumeOneToOneAutoAck(t *testing.T) {
	before := goleak.IgnoreCurrent()
	// Registered before the broker's cleanups, so it runs after them.
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	n := volumeCount(t)
	func() {
		s := brokertest.Start(t, nil)
		pc, cc := dial(t, s), dial(t, s)
		ch := open(t, cc)
		q, err := ch.QueueDeclare("volume", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := ch.Consume(q.Name, "", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		go publishSeq(t, pc, q.Name, n)
		for i := 0; i < n; i++ {
			m := recv(t, d)
			if got := binary.BigEndian.Uint64(m.Body); got != uint64(i) {
				t.Fatalf("message %d arrived as number %d", got, i)
			}
		}
		_ = pc.Close()
		_ = cc.Close()
		_ = s.Close()
	}()
}

func TestVolumeOneToThreeManualAck(t *testing.T) {
	before := goleak.IgnoreCurrent()
	// Registered before the broker's cleanups, so it runs after them.
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	n := volumeCount(t)
	func() {
		s := brokertest.Start(t, nil)
		pc := dial(t, s)
		setup := open(t, pc)
		if _, err := setup.QueueDeclare("volume3", false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			seen  = make([]bool, n)
			total int
			done  = make(chan struct{})
		)
		var wg sync.WaitGroup
		for k := 0; k < 3; k++ {
			cc := dial(t, s)
			ch := open(t, cc)
			if err := ch.Qos(100, 0, false); err != nil {
				t.Fatal(err)
			}
			d, err := ch.Consume("volume3", "", false, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				last := int64(-1)
				for {
					select {
					case <-done:
						return
					case m, ok := <-d:
						if !ok {
							return
						}
						seq := int64(binary.BigEndian.Uint64(m.Body))
						if seq <= last {
							t.Errorf("consumer saw %d after %d", seq, last)
						}
						last = seq
						if err := m.Ack(false); err != nil {
							t.Errorf("ack: %v", err)
							return
						}
						mu.Lock()
						if seen[seq] {
							t.Errorf("message %d delivered twice", seq)
						}
						seen[seq] = true
						total++
						if total == n {
							close(done)
						}
						mu.Unlock()
					}
				}
			}()
		}
		publishSeq(t, pc, "volume3", n)
		waitForWithin(t, 5*time.Minute, "all messages consumed", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return total == n
		})
		wg.Wait()
		q, err := setup.QueueDeclarePassive("volume3", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if q.Messages != 0 {
			t.Fatalf("%d messages left in the queue", q.Messages)
		}
		_ = s.Close()
	}()
}
