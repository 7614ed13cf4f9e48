package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker/brokertest"
)

// BenchmarkDedupPublish measures publishes through a deduplication cache
// of 1,000,000 keys, full before the timer starts: on a deduplicating
// exchange and on a deduplicating queue, and the same publishes without
// deduplication (plain-exchange: a fanout exchange; plain-queue: a queue
// through the default exchange) for the cost of deduplication over plain
// publishing. Every timed message has a new key (a miss and an eviction)
// and one in ten repeats a recent one (a hit). The publisher copies one
// pre-built message (method, header and body frames) per publish and
// writes the key's digits into its header, so that it costs little next
// to the broker; the queue is capped (x-max-length) so that memory stays
// flat. msg/s is the figure.
func BenchmarkDedupPublish(b *testing.B) {
	b.Run("exchange", func(b *testing.B) { benchDedup(b, true, false) })
	b.Run("queue", func(b *testing.B) { benchDedup(b, true, true) })
	b.Run("plain-exchange", func(b *testing.B) { benchDedup(b, false, false) })
	b.Run("plain-queue", func(b *testing.B) { benchDedup(b, false, true) })
}

func benchDedup(b *testing.B, dedup, queueLevel bool) {
	const cache = 1_000_000
	s := brokertest.Start(b, nil)
	pub := rawOpen(b, s.Addr, defaultTune)
	_ = pub.nc.SetDeadline(time.Time{})
	pub.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](pub, 1)
	qargs := amqp.Table{"x-max-length": int32(10_000)}
	ex, key := "", "bench"
	switch {
	case queueLevel && dedup:
		qargs["x-message-deduplication"] = true
		qargs["x-cache-size"] = int32(cache)
	case !queueLevel && dedup:
		ex = "dedup"
		pub.send(1, &amqp.ExchangeDeclare{Exchange: ex, Type: "x-message-deduplication", Arguments: amqp.Table{"x-cache-size": int32(cache)}})
		rawExpect[*amqp.ExchangeDeclareOk](pub, 1)
	case !queueLevel:
		ex = "plain"
		pub.send(1, &amqp.ExchangeDeclare{Exchange: ex, Type: "fanout"})
		rawExpect[*amqp.ExchangeDeclareOk](pub, 1)
	}
	pub.send(1, &amqp.QueueDeclare{Queue: "bench", Arguments: qargs})
	rawExpect[*amqp.QueueDeclareOk](pub, 1)
	if !queueLevel {
		pub.send(1, &amqp.QueueBind{Queue: "bench", Exchange: ex})
		rawExpect[*amqp.QueueBindOk](pub, 1)
	}
	// One message, its key's ten digits at digits, copied per publish.
	const zero = "0000000000"
	tmpl := amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{Exchange: ex, RoutingKey: key})
	tmpl = amqp.AppendHeaderFrame(tmpl, 1, amqp.ClassBasic, 100,
		&amqp.Properties{Headers: amqp.Table{"x-deduplication-header": "key-" + zero}})
	digits := bytes.Index(tmpl, []byte(zero))
	tmpl = amqp.AppendBodyFrames(tmpl, 1, make([]byte, 100), 131072)
	buf := make([]byte, 0, 64<<10+len(tmpl))
	publish := func(from, n int) {
		for i := from; i < from+n; i++ {
			k := i
			if i%10 == 9 {
				k = i - 5 // a duplicate of a recent key
			}
			at := len(buf)
			buf = append(buf, tmpl...)
			d := buf[at+digits : at+digits+len(zero)]
			for j := len(d) - 1; j >= 0; j-- {
				d[j] = byte('0' + k%10)
				k /= 10
			}
			if len(buf) > 64<<10 {
				if _, err := pub.nc.Write(buf); err != nil {
					b.Fatal(err)
				}
				buf = buf[:0]
			}
		}
		if _, err := pub.nc.Write(buf); err != nil {
			b.Fatal(err)
		}
		buf = buf[:0]
		// A round trip on the same channel: everything before it is routed.
		pub.send(1, &amqp.QueueDeclare{Queue: "bench", Passive: true})
		rawExpect[*amqp.QueueDeclareOk](pub, 1)
	}
	publish(0, cache) // fill the cache
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	publish(cache, b.N)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
}

// BenchmarkMessageGroups compares the throughput of a queue with message
// groups (10,000 groups) and of a plain queue, with 8 consumers
// acknowledging each message (prefetch 50) and one publisher, over the
// amqp091 client. msg/s is the figure; the goal is groups ≥ 80% of plain.
func BenchmarkMessageGroups(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchGroups(b, nil) })
	b.Run("groups", func(b *testing.B) { benchGroups(b, amqp091.Table{"x-message-group-header": "JMSXGroupID"}) })
}

func benchGroups(b *testing.B, args amqp091.Table) {
	const groups, consumers = 10_000, 8
	s := brokertest.Start(b, nil)
	ch := open(b, dial(b, s))
	if _, err := ch.QueueDeclare("g", false, false, false, false, args); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := 0
	all := make(chan struct{})
	for i := range consumers {
		cch := open(b, dial(b, s))
		if err := cch.Qos(50, 0, false); err != nil {
			b.Fatal(err)
		}
		d, err := cch.Consume("g", fmt.Sprint("c", i), false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case m := <-d:
					_ = m.Ack(false)
					mu.Lock()
					got++
					if got == b.N {
						close(all)
					}
					mu.Unlock()
				case <-all:
					return
				}
			}
		}()
	}
	hdrs := make([]amqp091.Table, groups)
	for i := range hdrs {
		hdrs[i] = amqp091.Table{"JMSXGroupID": fmt.Sprint("group-", i)}
	}
	body := make([]byte, 100)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := ch.PublishWithContext(context.Background(), "", "g", false, false, amqp091.Publishing{Headers: hdrs[i%groups], Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	<-all
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
	b.StopTimer()
	wg.Wait()
}
