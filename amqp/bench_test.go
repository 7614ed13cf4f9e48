package amqp

import (
	"strconv"
	"testing"
)

// cycleReader serves b over and over, like a socket with a steady stream.
type cycleReader struct {
	b   []byte
	off int
}

func (c *cycleReader) Read(p []byte) (int, error) {
	n := copy(p, c.b[c.off:])
	c.off += n
	if c.off == len(c.b) {
		c.off = 0
	}
	return n, nil
}

var benchBodySizes = []int{16, 4096}

// BenchmarkReadPublish reads one publish per op: method, header and body
// frames, decoding the method with a MethodDecoder and the header prefix.
func BenchmarkReadPublish(b *testing.B) {
	for _, size := range benchBodySizes {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			body := make([]byte, size)
			var one []byte
			one = AppendMethodFrame(one, 1, &BasicPublish{Exchange: "amq.direct", RoutingKey: "orders.created"})
			one = AppendHeaderFrame(one, 1, ClassBasic, uint64(size), &Properties{ContentType: "application/json", DeliveryMode: 2})
			one = AppendBodyFrames(one, 1, body, 131072)
			var stream []byte
			for range 64 {
				stream = append(stream, one...)
			}
			fr := NewFrameReader(&cycleReader{b: stream}, 64<<10)
			var md MethodDecoder
			b.SetBytes(int64(len(one)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				f, err := fr.ReadFrame()
				if err != nil {
					b.Fatal(err)
				}
				m, err := md.Decode(f.Payload)
				if err != nil {
					b.Fatal(err)
				}
				if _, ok := m.(*BasicPublish); !ok {
					b.Fatal(m.Name())
				}
				if f, err = fr.ReadFrame(); err != nil {
					b.Fatal(err)
				}
				if _, n, err := ParseContentHeaderPrefix(f.Payload); err != nil || n != uint64(size) {
					b.Fatal(err)
				}
				if f, err = fr.ReadFrame(); err != nil || len(f.Payload) != size {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodePublishFresh is the basic.publish decode with a new value
// each time (DecodeMethod): the allocations are the value and its strings.
func BenchmarkDecodePublishFresh(b *testing.B) {
	p := (&BasicPublish{Exchange: "amq.direct", RoutingKey: "orders.created"}).AppendTo(nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeMethod(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeDeliver encodes one delivery per op into a reused buffer:
// basic.deliver, a kept header frame payload and the body.
func BenchmarkEncodeDeliver(b *testing.B) {
	for _, size := range benchBodySizes {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			body := make([]byte, size)
			header, err := (&ContentHeader{ClassID: ClassBasic, BodySize: uint64(size), Properties: Properties{ContentType: "application/json", DeliveryMode: 2}}).AppendTo(nil)
			if err != nil {
				b.Fatal(err)
			}
			d := &BasicDeliver{ConsumerTag: "amq.ctag-1234567890", Exchange: "amq.direct", RoutingKey: "orders.created"}
			buf := make([]byte, 0, 64<<10)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				d.DeliveryTag++
				buf = AppendMethodFrame(buf[:0], 1, d)
				buf = AppendFrame(buf, FrameHeader, 1, header)
				buf = AppendBodyFrames(buf, 1, body, 131072)
			}
		})
	}
}
