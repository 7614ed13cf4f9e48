package broker

import (
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
)

// fuzzHandshake is a client's side of a successful handshake.
func fuzzHandshake() []byte {
	b := append([]byte{}, amqp.ProtocolHeader...)
	b = amqp.AppendMethodFrame(b, 0, &amqp.ConnectionStartOk{
		ClientProperties: amqp.Table{"capabilities": amqp.Table{"connection.blocked": true}},
		Mechanism:        "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US",
	})
	b = amqp.AppendMethodFrame(b, 0, &amqp.ConnectionTuneOk{ChannelMax: 16, FrameMax: 4096})
	return amqp.AppendMethodFrame(b, 0, &amqp.ConnectionOpen{VirtualHost: "/"})
}

// FuzzConn feeds arbitrary bytes to a broker connection over net.Pipe:
// whatever they are, the connection must end (no panic, no goroutine left
// behind) once the client side closes.
//
//	go test ./broker/ -run '^$' -fuzz '^FuzzConn$' -fuzztime 60s
func FuzzConn(f *testing.F) {
	ignore := goleak.IgnoreCurrent()
	hs := fuzzHandshake()
	f.Add([]byte{})
	f.Add(append([]byte{}, amqp.ProtocolHeader...))
	f.Add(hs)
	s := append([]byte{}, hs...)
	s = amqp.AppendMethodFrame(s, 1, &amqp.ChannelOpen{})
	s = amqp.AppendMethodFrame(s, 1, &amqp.QueueDeclare{Queue: "fz", Arguments: amqp.Table{"x-max-length": int32(5)}})
	s = amqp.AppendMethodFrame(s, 1, &amqp.QueueBind{Queue: "fz", Exchange: "amq.topic", RoutingKey: "a.#"})
	s = amqp.AppendMethodFrame(s, 1, &amqp.ConfirmSelect{})
	s = amqp.AppendMethodFrame(s, 1, &amqp.BasicPublish{Exchange: "amq.topic", RoutingKey: "a.b"})
	s = amqp.AppendHeaderFrame(s, 1, amqp.ClassBasic, 3, &amqp.Properties{DeliveryMode: 2})
	s = amqp.AppendFrame(s, amqp.FrameBody, 1, []byte("abc"))
	s = amqp.AppendMethodFrame(s, 1, &amqp.BasicConsume{Queue: "fz"})
	s = amqp.AppendMethodFrame(s, 1, &amqp.BasicAck{DeliveryTag: 1})
	s = amqp.AppendMethodFrame(s, 1, &amqp.BasicGet{Queue: "fz"})
	s = amqp.AppendMethodFrame(s, 1, &amqp.ChannelClose{})
	s = amqp.AppendMethodFrame(s, 0, &amqp.ConnectionClose{})
	f.Add(s)
	f.Add(append(append([]byte{}, hs...), 1, 0, 1, 0, 0, 0, 2, 0xff, 0xff, 0xce))

	b, err := New(Config{
		Logger:           zap.NewNop(),
		LoopbackUsers:    []string{}, // net.Pipe has no loopback address
		HandshakeTimeout: 2 * time.Second,
		Heartbeat:        -1,
		MaxMessageSize:   1 << 20,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		_ = b.Close()
		goleak.VerifyNone(f, ignore)
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := net.Pipe()
		c := newConn(b, server)
		b.mu.Lock()
		b.conns[c] = struct{}{}
		b.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.serve()
			b.mu.Lock()
			delete(b.conns, c)
			b.mu.Unlock()
		}()
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			_, _ = io.Copy(io.Discard, client)
		}()
		_ = client.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = client.Write(data)
		_ = client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("connection still running 10 s after its client closed")
		}
		<-drained
	})
}
