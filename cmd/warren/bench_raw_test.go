package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	wire "github.com/warrenmq/warren/amqp"
)

func TestBenchRawCounted(t *testing.T) {
	s := startBenchBroker(t)
	for _, tc := range []struct {
		name string
		set  func(*benchConfig)
	}{
		{"autoack", func(c *benchConfig) { c.AutoAck = true }},
		{"autoack-confirm", func(c *benchConfig) { c.AutoAck, c.Confirm = true, 100 }},
		{"ack", func(c *benchConfig) {}},
		{"multi-ack-confirm-prefetch", func(c *benchConfig) { c.Confirm, c.MultiAck, c.Prefetch = 50, 10, 100 }},
		{"one-connection", func(c *benchConfig) { c.Connections, c.Confirm, c.MultiAck = 1, 20, 5 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := benchDefaults(s.URL)
			cfg.Client = benchClientRaw
			cfg.Producers, cfg.Consumers, cfg.Queues = 2, 2, 2
			cfg.Size = 100
			cfg.PMessages = 50_000
			cfg.Duration = 30 * time.Second // a cap: the run ends when everything is received
			tc.set(&cfg)
			r, err := runBench(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := uint64(cfg.Producers) * uint64(cfg.PMessages)
			if r.Sent != want || r.Received != r.Sent {
				t.Fatalf("sent %d received %d, want %d of each (failures %d: %v)", r.Sent, r.Received, want, r.Failures, r.FirstFailure)
			}
			if cfg.Confirm > 0 && (r.Confirmed != r.Sent || r.Nacked != 0) {
				t.Errorf("confirmed %d nacked %d of %d", r.Confirmed, r.Nacked, r.Sent)
			}
			if r.Failures != 0 || r.QueueDepth != 0 || r.Samples != r.Received {
				t.Errorf("failures %d (%v), queue depth %d, samples %d", r.Failures, r.FirstFailure, r.QueueDepth, r.Samples)
			}
			checkPercentiles(t, r)
		})
	}
}

// TestBenchRawLargeBody publishes bodies over several frames (the broker's
// frame-max is 128 KiB) and bodies of exactly the minimum size.
func TestBenchRawLargeBody(t *testing.T) {
	s := startBenchBroker(t)
	for _, size := range []int{300_000, benchMinSize} {
		cfg := benchDefaults(s.URL)
		cfg.Size, cfg.PMessages, cfg.Confirm, cfg.Duration = size, 100, 10, 30*time.Second
		r, err := runBench(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.Sent != 100 || r.Received != 100 || r.Confirmed != 100 || r.Failures != 0 {
			t.Fatalf("size %d: sent %d received %d confirmed %d failures %d (%v)", size, r.Sent, r.Received, r.Confirmed, r.Failures, r.FirstFailure)
		}
		checkPercentiles(t, r)
	}
}

func TestBenchAMQP091Client(t *testing.T) {
	s := startBenchBroker(t)
	cfg := benchDefaults(s.URL)
	cfg.Client = benchClientAMQP091
	cfg.PMessages, cfg.Confirm, cfg.MultiAck, cfg.Prefetch = 2000, 50, 10, 100
	cfg.Duration = 30 * time.Second
	r, err := runBench(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent != 2000 || r.Received != 2000 || r.Confirmed != 2000 || r.Failures != 0 {
		t.Fatalf("sent %d received %d confirmed %d failures %d (%v)", r.Sent, r.Received, r.Confirmed, r.Failures, r.FirstFailure)
	}
	checkPercentiles(t, r)
}

// TestBenchRawBrokerErrors checks that what the broker refuses ends the run
// with an error instead of a hang.
func TestBenchRawBrokerErrors(t *testing.T) {
	s := startBenchBroker(t)
	for _, confirm := range []int{0, 10} {
		cfg := benchDefaults(s.URL)
		cfg.Predeclared, cfg.Exchange, cfg.Consumers = true, "warren-bench-missing", 0
		cfg.PMessages, cfg.Duration, cfg.Confirm = 10_000_000, time.Minute, confirm
		start := time.Now()
		r, err := runBench(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("confirm %d: the run took %v", confirm, took)
		}
		var ae *wire.Error
		if r.Failures == 0 || !errors.As(r.FirstFailure, &ae) || ae.Code != wire.NotFound {
			t.Errorf("confirm %d: failures %d, first %v; want a 404 channel.close", confirm, r.Failures, r.FirstFailure)
		}
	}

	cfg := benchDefaults(s.URL)
	cfg.Predeclared, cfg.QueuePattern, cfg.Producers = true, "warren-bench-missing", 0
	cfg.Duration = time.Minute
	_, err := runBench(t.Context(), cfg)
	var ae *wire.Error
	if !errors.As(err, &ae) || ae.Code != wire.NotFound {
		t.Errorf("consume from a missing queue: %v, want a 404", err)
	}

	// The run's admin connection is amqp091's: dial the raw client itself.
	if c, err := rawDial("amqp://guest:wrong@"+s.Addr, "t", 0); err == nil {
		c.shutdown()
		t.Error("a wrong password was accepted")
	}
	if c, err := rawDial(s.URL+"/no-such-vhost", "t", 0); err == nil {
		c.shutdown()
		t.Error("a missing vhost was accepted")
	}
}

// TestBenchRawConsumerCancelled deletes the queue under a running consumer.
func TestBenchRawConsumerCancelled(t *testing.T) {
	s := startBenchBroker(t)
	cfg := benchDefaults(s.URL)
	cfg.Rate, cfg.Duration = 1000, 1500*time.Millisecond
	done := make(chan benchResult, 1)
	go func() {
		r, err := runBench(t.Context(), cfg)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	time.Sleep(500 * time.Millisecond)
	conn, err := amqp.Dial(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete("warren-bench-0", false, false, false); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.Failures == 0 || !strings.Contains(fmt.Sprint(r.FirstFailure), "cancelled") {
		t.Errorf("failures %d, first %v; want the consumer cancelled", r.Failures, r.FirstFailure)
	}
}

// TestRawClientProtocol runs the client against a scripted server: PLAIN,
// the server's frame-max and channel-max taken, heartbeats sent, bodies
// split at frame-max, a clean close.
func TestRawClientProtocol(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	const size = 10_000
	errc := make(chan error, 1)
	go func() { errc <- scriptedServer(ln, size) }()

	c, err := rawDial("amqp://u:p@"+ln.Addr().String()+"/vh", "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.frameMax != wire.FrameMinSize || c.channelMax != 8 || c.heartbeat != time.Second {
		t.Errorf("frame-max %d channel-max %d heartbeat %v", c.frameMax, c.channelMax, c.heartbeat)
	}
	ch, err := c.openChannel()
	if err != nil {
		t.Fatal(err)
	}
	msg, off, err := rawMessage(ch.id, "x", benchRoute{key: "k"}, &benchConfig{Size: size}, c.frameMax)
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint64(msg[off:], 42)
	if err := c.publish(ch, msg, time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	c.started = true
	go c.readLoop()
	time.Sleep(1200 * time.Millisecond) // heartbeats go every 500 ms of silence
	c.close()
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		t.Fatal("no close-ok")
	}
	c.bg.Wait()
	if c.err != nil {
		t.Errorf("connection ended with %v", c.err)
	}
	if err := <-errc; err != nil {
		t.Error(err)
	}
}

func scriptedServer(ln net.Listener, size int) error {
	nc, err := ln.Accept()
	if err != nil {
		return err
	}
	defer func() { _ = nc.Close() }()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	hdr := make([]byte, 8)
	if _, err := io.ReadFull(nc, hdr); err != nil || !bytes.Equal(hdr, wire.ProtocolHeader) {
		return fmt.Errorf("protocol header %q, %v", hdr, err)
	}
	fr := wire.NewFrameReader(nc, 0)
	heartbeats := 0
	next := func() (wire.Frame, error) {
		for {
			f, err := fr.ReadFrame()
			if err != nil || f.Type != wire.FrameHeartbeat {
				return f, err
			}
			heartbeats++
		}
	}
	expect := func(channel uint16, name string) (wire.Method, error) {
		f, err := next()
		if err != nil {
			return nil, err
		}
		if f.Type != wire.FrameMethod || f.Channel != channel {
			return nil, fmt.Errorf("frame type %d on channel %d, want %s on %d", f.Type, f.Channel, name, channel)
		}
		m, err := wire.DecodeMethod(f.Payload)
		if err == nil && m.Name() != name {
			err = fmt.Errorf("got %s, want %s", m.Name(), name)
		}
		return m, err
	}
	send := func(channel uint16, m wire.Method) {
		_, _ = nc.Write(wire.AppendMethodFrame(nil, channel, m))
	}
	send(0, &wire.ConnectionStart{VersionMinor: 9, Mechanisms: "AMQPLAIN PLAIN", Locales: "en_US"})
	m, err := expect(0, "connection.start-ok")
	if err != nil {
		return err
	}
	if so := m.(*wire.ConnectionStartOk); so.Mechanism != "PLAIN" || so.Response != "\x00u\x00p" {
		return fmt.Errorf("start-ok %+v", so)
	}
	send(0, &wire.ConnectionTune{ChannelMax: 8, FrameMax: wire.FrameMinSize, Heartbeat: 1})
	if m, err = expect(0, "connection.tune-ok"); err != nil {
		return err
	}
	if to := m.(*wire.ConnectionTuneOk); to.ChannelMax != 8 || to.FrameMax != wire.FrameMinSize || to.Heartbeat != 1 {
		return fmt.Errorf("tune-ok %+v", to)
	}
	if m, err = expect(0, "connection.open"); err != nil {
		return err
	}
	if vh := m.(*wire.ConnectionOpen).VirtualHost; vh != "vh" {
		return fmt.Errorf("vhost %q", vh)
	}
	send(0, &wire.ConnectionOpenOk{})
	if _, err = expect(1, "channel.open"); err != nil {
		return err
	}
	send(1, &wire.ChannelOpenOk{})
	if m, err = expect(1, "basic.publish"); err != nil {
		return err
	}
	if p := m.(*wire.BasicPublish); p.Exchange != "x" || p.RoutingKey != "k" {
		return fmt.Errorf("publish %+v", p)
	}
	f, err := next()
	if err != nil {
		return err
	}
	var h wire.ContentHeader
	if err := wire.DecodeContentHeader(f.Payload, &h); err != nil || h.BodySize != uint64(size) || h.Properties.DeliveryMode != 1 {
		return fmt.Errorf("content header %+v, %v", h, err)
	}
	var body []byte
	for len(body) < size {
		if f, err = next(); err != nil {
			return err
		}
		if f.Type != wire.FrameBody || len(f.Payload)+wire.FrameOverhead > wire.FrameMinSize {
			return fmt.Errorf("body frame type %d of %d bytes", f.Type, len(f.Payload))
		}
		body = append(body, f.Payload...)
	}
	if len(body) != size || binary.BigEndian.Uint64(body) != 42 {
		return fmt.Errorf("body of %d bytes starting %x", len(body), body[:8])
	}
	if _, err = expect(0, "connection.close"); err != nil {
		return err
	}
	if heartbeats == 0 {
		return errors.New("no heartbeat from the client")
	}
	send(0, &wire.ConnectionCloseOk{})
	return nil
}

// discardConn is a net.Conn whose writes succeed and go nowhere.
type discardConn struct{ net.Conn }

func (discardConn) Write(p []byte) (int, error) { return len(p), nil }
func (discardConn) Close() error                { return nil }

// loopReader returns b over and over.
type loopReader struct {
	b   []byte
	off int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m := copy(p[n:], r.b[r.off:])
		n += m
		r.off = (r.off + m) % len(r.b)
	}
	return n, nil
}

func TestRawNoAllocsPerMessage(t *testing.T) {
	c := newRawConn(discardConn{}, 0)
	ch := &rawChannel{c: c, id: 1, closedC: make(chan struct{})}
	c.chans = append(c.chans, ch)
	var acked, nacked atomic.Uint64
	ch.confirms = newRawConfirms(64, &acked, &nacked, new(latencyHist))
	msg, off, err := rawMessage(1, "x", benchRoute{key: "k", headers: amqp.Table{benchHeaderKey: "q"}}, &benchConfig{Size: 4096}, 131072)
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	if n := testing.AllocsPerRun(10_000, func() {
		if !ch.confirms.reserve(0) {
			t.Fatal("window full")
		}
		now := time.Now().UnixNano()
		binary.BigEndian.PutUint64(msg[off:], uint64(now))
		binary.BigEndian.PutUint64(msg[off+8:], seq)
		seq++
		if err := c.publish(ch, msg, now); err != nil {
			t.Fatal(err)
		}
		ch.confirms.settle(seq, seq%2 == 0, true)
	}); n != 0 {
		t.Errorf("%v allocations per publish", n)
	}
	if acked.Load() != seq {
		t.Errorf("%d confirmed of %d", acked.Load(), seq)
	}

	// A stream of deliveries, acknowledged one by one.
	var stream []byte
	body := make([]byte, 100)
	for i := range 50 {
		stream = wire.AppendMethodFrame(stream, 1, &wire.BasicDeliver{ConsumerTag: "ctag", DeliveryTag: uint64(i + 1), Exchange: "x", RoutingKey: "k"})
		stream = wire.AppendHeaderFrame(stream, 1, wire.ClassBasic, uint64(len(body)), &wire.Properties{DeliveryMode: 1})
		binary.BigEndian.PutUint64(body, uint64(time.Now().UnixNano()))
		stream = wire.AppendBodyFrames(stream, 1, body, 131072)
	}
	c.fr = wire.NewFrameReader(&loopReader{b: stream}, 4096)
	k := &benchConsumer{}
	ch.cons = k
	if n := testing.AllocsPerRun(10_000, func() {
		for range 3 {
			f, err := c.fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.handle(f); err != nil {
				t.Fatal(err)
			}
		}
	}); n != 0 {
		t.Errorf("%v allocations per delivery", n)
	}
	if k.received.Load() != 10_001 {
		t.Errorf("received %d", k.received.Load())
	}
}

func TestRawConfirms(t *testing.T) {
	var acked, nacked atomic.Uint64
	k := newRawConfirms(3, &acked, &nacked, new(latencyHist))
	for range 3 {
		if !k.reserve(0) {
			t.Fatal("window of 3 refused a publish")
		}
	}
	if k.reserve(0) {
		t.Fatal("window of 3 took a fourth")
	}
	k.settle(2, false, true) // out of order: the window stays full
	if k.reserve(0) || k.settled() {
		t.Fatal("tag 1 is still outstanding")
	}
	select {
	case <-k.wake:
	default:
		t.Fatal("no wake-up")
	}
	k.settle(1, false, false)
	if !k.reserve(0) || !k.reserve(0) || k.reserve(0) { // 4 and 5; 3 outstanding
		t.Fatal("window after tags 1 and 2")
	}
	k.settle(5, true, true)
	k.settle(5, true, true) // again: nothing more
	if !k.settled() || acked.Load() != 4 || nacked.Load() != 1 {
		t.Errorf("settled %v, acked %d nacked %d, want 4 and 1", k.settled(), acked.Load(), nacked.Load())
	}
}
