package broker_test

import (
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker/brokertest"
)

// BenchmarkPublishDeliver measures the broker's whole hot path in process,
// over loopback TCP: a publisher's frames are read, routed through the
// default exchange into a queue and delivered to a no-ack consumer on
// another connection, whose frames are read back. The clients speak raw
// frames (no client library), so the figures are the broker's plus two
// sockets. allocs/op counts the broker and both clients.
func BenchmarkPublishDeliver(b *testing.B) {
	for _, size := range []int{16, 4096} {
		b.Run(byteSize(size), func(b *testing.B) { benchPublishDeliver(b, size) })
	}
}

func byteSize(n int) string {
	if n >= 1024 {
		return string(rune('0'+n/1024)) + "KiB"
	}
	return "16B"
}

func benchPublishDeliver(b *testing.B, size int) {
	s := brokertest.Start(b, nil)
	pub := rawOpen(b, s.Addr, defaultTune)
	con := rawOpen(b, s.Addr, defaultTune)
	for _, r := range []*rawConn{pub, con} {
		_ = r.nc.SetDeadline(time.Time{})
		r.send(1, &amqp.ChannelOpen{})
		rawExpect[*amqp.ChannelOpenOk](r, 1)
	}
	con.send(1, &amqp.QueueDeclare{Queue: "bench", AutoDelete: true})
	rawExpect[*amqp.QueueDeclareOk](con, 1)
	con.send(1, &amqp.BasicConsume{Queue: "bench", ConsumerTag: "c", NoAck: true})
	rawExpect[*amqp.BasicConsumeOk](con, 1)

	// One publish, encoded once and written in batches.
	var msg []byte
	msg = amqp.AppendMethodFrame(msg, 1, &amqp.BasicPublish{RoutingKey: "bench"})
	msg = amqp.AppendHeaderFrame(msg, 1, amqp.ClassBasic, uint64(size), &amqp.Properties{})
	msg = amqp.AppendBodyFrames(msg, 1, make([]byte, size), 131072)
	const batch = 64
	var batchBuf []byte
	for i := 0; i < batch; i++ {
		batchBuf = append(batchBuf, msg...)
	}

	done := make(chan error, 1)
	go func() {
		n := 0
		for n < b.N {
			f, err := con.fr.ReadFrame()
			if err != nil {
				done <- err
				return
			}
			if f.Type == amqp.FrameBody || (f.Type == amqp.FrameHeader && size == 0) {
				n++
			}
		}
		done <- nil
	}()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		n := min(batch, b.N-sent)
		if _, err := pub.nc.Write(batchBuf[:n*len(msg)]); err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
}
