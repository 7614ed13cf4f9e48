package broker_test

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// quietBroker starts a broker that does not log: per-connection debug
// lines would be printed among the benchmark figures.
func quietBroker(b *testing.B) *brokertest.Server {
	return brokertest.Start(b, &broker.Config{Logger: zap.NewNop()})
}

// Benchmarks of the per-message costs that grow with the size of the
// broker's state: routing to many bound queues, and acknowledging with
// many deliveries outstanding. A cost that grows with that state shows as
// ns/op growing with the sub-benchmark's size. The clients speak raw
// frames, as in BenchmarkPublishDeliver.

// BenchmarkFanout publishes 16-byte messages to a fanout exchange bound to
// n queues; one op is one publish (routed to n queues). The queues have no
// consumers: they are purged, with the timer stopped, every so often.
// allocs/op includes the queues' ready lists growing again after a purge.
func BenchmarkFanout(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("queues=%d", n), func(b *testing.B) { benchFanout(b, n) })
	}
}

func benchFanout(b *testing.B, n int) {
	s := quietBroker(b)
	r := rawOpen(b, s.Addr, defaultTune)
	_ = r.nc.SetDeadline(time.Time{})
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	r.send(1, &amqp.ExchangeDeclare{Exchange: "fan", Type: "fanout"})
	rawExpect[*amqp.ExchangeDeclareOk](r, 1)
	var setup, purge []byte
	for i := range n {
		name := fmt.Sprintf("fan-%d", i)
		setup = amqp.AppendMethodFrame(setup, 1, &amqp.QueueDeclare{Queue: name, NoWait: true})
		setup = amqp.AppendMethodFrame(setup, 1, &amqp.QueueBind{Queue: name, Exchange: "fan", NoWait: true})
		purge = amqp.AppendMethodFrame(purge, 1, &amqp.QueuePurge{Queue: name, NoWait: true})
	}
	r.write(setup)
	rawSync(r, 1)

	var msg []byte
	msg = amqp.AppendMethodFrame(msg, 1, &amqp.BasicPublish{Exchange: "fan"})
	msg = amqp.AppendHeaderFrame(msg, 1, amqp.ClassBasic, 16, &amqp.Properties{})
	msg = amqp.AppendBodyFrames(msg, 1, make([]byte, 16), 131072)
	const batch = 64
	var batchBuf []byte
	for range batch {
		batchBuf = append(batchBuf, msg...)
	}
	// Purge after about a million queued messages.
	perPurge := max(1, (1<<20)/n)

	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		cycle := min(perPurge, b.N-sent)
		for done := 0; done < cycle; {
			k := min(batch, cycle-done)
			r.write(batchBuf[:k*len(msg)])
			done += k
		}
		rawSync(r, 1)
		sent += cycle
		if sent < b.N {
			b.StopTimer()
			r.write(purge)
			rawSync(r, 1)
			b.StartTimer()
		}
	}
	b.StopTimer()
}

// BenchmarkFanoutConsume publishes 16-byte messages to a fanout exchange
// bound to 10 queues, each consumed (no-ack) by a consumer on its own
// connection, as scripts/perf.sh's fanout scenario does; one op is one
// publish, delivered 10 times. allocs/op counts the broker and the
// clients.
func BenchmarkFanoutConsume(b *testing.B) {
	const n = 10
	s := quietBroker(b)
	pub := rawOpen(b, s.Addr, defaultTune)
	_ = pub.nc.SetDeadline(time.Time{})
	pub.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](pub, 1)
	pub.send(1, &amqp.ExchangeDeclare{Exchange: "fan", Type: "fanout"})
	rawExpect[*amqp.ExchangeDeclareOk](pub, 1)
	done := make(chan error, n)
	for i := range n {
		name := fmt.Sprintf("fan-%d", i)
		pub.send(1, &amqp.QueueDeclare{Queue: name, AutoDelete: true})
		rawExpect[*amqp.QueueDeclareOk](pub, 1)
		pub.send(1, &amqp.QueueBind{Queue: name, Exchange: "fan"})
		rawExpect[*amqp.QueueBindOk](pub, 1)
		con := rawOpen(b, s.Addr, defaultTune)
		_ = con.nc.SetDeadline(time.Time{})
		con.send(1, &amqp.ChannelOpen{})
		rawExpect[*amqp.ChannelOpenOk](con, 1)
		con.send(1, &amqp.BasicConsume{Queue: name, ConsumerTag: "c", NoAck: true})
		rawExpect[*amqp.BasicConsumeOk](con, 1)
		go func() {
			for got := 0; got < b.N; {
				f, err := con.fr.ReadFrame()
				if err != nil {
					done <- err
					return
				}
				if f.Type == amqp.FrameBody {
					got++
				}
			}
			done <- nil
		}()
	}

	var msg []byte
	msg = amqp.AppendMethodFrame(msg, 1, &amqp.BasicPublish{Exchange: "fan"})
	msg = amqp.AppendHeaderFrame(msg, 1, amqp.ClassBasic, 16, &amqp.Properties{})
	msg = amqp.AppendBodyFrames(msg, 1, make([]byte, 16), 131072)
	const batch = 64
	var batchBuf []byte
	for range batch {
		batchBuf = append(batchBuf, msg...)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		k := min(batch, b.N-sent)
		pub.write(batchBuf[:k*len(msg)])
		sent += k
	}
	for range n {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
}

// rawSync waits until the broker has handled everything sent on channel
// before it: basic.qos is answered in order, after the frames sent ahead
// of it. Frames that arrive in between (deliveries) are skipped.
func rawSync(r *rawConn, channel uint16) {
	r.t.Helper()
	r.send(channel, &amqp.BasicQos{})
	for {
		f, err := r.next()
		if err != nil {
			r.t.Fatalf("read: %v", err)
		}
		if f.Type != amqp.FrameMethod {
			continue
		}
		m, err := amqp.DecodeMethod(f.Payload)
		if err != nil {
			r.t.Fatalf("decode: %v", err)
		}
		switch m := m.(type) {
		case *amqp.BasicQosOk:
			if f.Channel == channel {
				return
			}
		case *amqp.ChannelClose, *amqp.ConnectionClose:
			r.t.Fatalf("broker closed: %+v", m)
		}
	}
}

// BenchmarkUnacked100k acknowledges deliveries while 100,000 others of
// the channel stay outstanding; one op is one delivery acknowledged:
//
//   - in-order: basic.ack of the oldest delivery, one at a time;
//   - reverse: single acks of a block of the oldest deliveries, newest of
//     the block first;
//   - out-of-order: the oldest delivery is never acknowledged, the ones
//     after it are, one at a time (one lost ack pins the list);
//   - multiple: basic.ack multiple=true of 100 deliveries at a time;
//   - reject: basic.reject requeue=false, out of order as above.
//
// Between blocks of acks, with the timer stopped, as many messages are
// published and delivered again, so the outstanding count stays between
// 100,000 and 110,000.
func BenchmarkUnacked100k(b *testing.B) {
	for _, mode := range []string{"in-order", "reverse", "out-of-order", "multiple", "reject"} {
		b.Run(mode, func(b *testing.B) { benchUnacked(b, mode) })
	}
}

func benchUnacked(b *testing.B, mode string) {
	const outstanding, block = 100_000, 10_000
	s := quietBroker(b)
	r := rawOpen(b, s.Addr, defaultTune)
	_ = r.nc.SetDeadline(time.Time{})
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	r.send(1, &amqp.QueueDeclare{Queue: "unacked"})
	rawExpect[*amqp.QueueDeclareOk](r, 1)
	var msg []byte
	msg = amqp.AppendMethodFrame(msg, 1, &amqp.BasicPublish{RoutingKey: "unacked"})
	msg = amqp.AppendHeaderFrame(msg, 1, amqp.ClassBasic, 16, &amqp.Properties{})
	msg = amqp.AppendBodyFrames(msg, 1, make([]byte, 16), 131072)
	publish := func(k int) {
		buf := make([]byte, 0, k*len(msg))
		for range k {
			buf = append(buf, msg...)
		}
		r.write(buf)
	}
	// awaitDeliveries reads k deliveries (one body frame each).
	awaitDeliveries := func(k int) {
		for k > 0 {
			f, err := r.next()
			if err != nil {
				b.Fatalf("read: %v", err)
			}
			switch f.Type {
			case amqp.FrameBody:
				k--
			case amqp.FrameMethod:
				if m, _ := amqp.DecodeMethod(f.Payload); m != nil {
					if _, ok := m.(*amqp.BasicDeliver); !ok {
						b.Fatalf("got %s while awaiting deliveries", m.Name())
					}
				}
			}
		}
	}
	publish(outstanding + block)
	r.send(1, &amqp.BasicConsume{Queue: "unacked", ConsumerTag: "c"})
	rawExpect[*amqp.BasicConsumeOk](r, 1)
	awaitDeliveries(outstanding + block)

	// The oldest outstanding tag is lo (and 1 too in out-of-order and
	// reject modes); the newest is the last delivered.
	lo := uint64(1)
	if mode == "out-of-order" || mode == "reject" {
		lo = 2
	}
	var acks []byte
	encode := func(k int) {
		acks = acks[:0]
		switch mode {
		case "in-order", "out-of-order":
			for i := range uint64(k) {
				acks = amqp.AppendMethodFrame(acks, 1, &amqp.BasicAck{DeliveryTag: lo + i})
			}
		case "reject":
			for i := range uint64(k) {
				acks = amqp.AppendMethodFrame(acks, 1, &amqp.BasicReject{DeliveryTag: lo + i})
			}
		case "reverse":
			for i := uint64(k); i > 0; i-- {
				acks = amqp.AppendMethodFrame(acks, 1, &amqp.BasicAck{DeliveryTag: lo + i - 1})
			}
		case "multiple":
			for i := 100; i < k; i += 100 {
				acks = amqp.AppendMethodFrame(acks, 1, &amqp.BasicAck{DeliveryTag: lo + uint64(i) - 1, Multiple: true})
			}
			acks = amqp.AppendMethodFrame(acks, 1, &amqp.BasicAck{DeliveryTag: lo + uint64(k) - 1, Multiple: true})
		}
	}
	encode(min(block, b.N))

	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		k := min(block, b.N-done)
		r.write(acks)
		rawSync(r, 1)
		done += k
		lo += uint64(k)
		if done < b.N {
			b.StopTimer()
			publish(k)
			awaitDeliveries(k)
			encode(min(block, b.N-done))
			b.StartTimer()
		}
	}
	b.StopTimer()
}
