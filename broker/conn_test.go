package broker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// rawConn is a client that speaks AMQP frames by hand over TCP, to send
// what amqp091-go never would and see exactly what the broker answers.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	fr *amqp.FrameReader
}

// rawDial connects to addr. The whole conversation must finish within 30 s
// (generous: -race runs of every package at once on 2 cores are slow).
func rawDial(t testing.TB, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	return &rawConn{t: t, nc: nc, fr: amqp.NewFrameReader(nc, 0)}
}

// rawTune is what rawOpen puts in connection.tune-ok.
type rawTune struct {
	channelMax uint16
	frameMax   uint32
	heartbeat  uint16
}

// rawOpen runs the handshake by hand with the default credentials and
// authentication_failure_close, and the given tune-ok values.
func rawOpen(t testing.TB, addr string, tune rawTune) *rawConn {
	t.Helper()
	r := rawStart(t, addr, "guest", "guest")
	rawExpect[*amqp.ConnectionTune](r, 0)
	r.send(0, &amqp.ConnectionTuneOk{ChannelMax: tune.channelMax, FrameMax: tune.frameMax, Heartbeat: tune.heartbeat})
	r.send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
	rawExpect[*amqp.ConnectionOpenOk](r, 0)
	return r
}

// rawStart sends the protocol header and connection.start-ok (PLAIN, with
// the authentication_failure_close capability).
func rawStart(t testing.TB, addr, user, pass string) *rawConn {
	t.Helper()
	r := rawDial(t, addr)
	r.write(amqp.ProtocolHeader)
	rawExpect[*amqp.ConnectionStart](r, 0)
	r.send(0, &amqp.ConnectionStartOk{
		ClientProperties: amqp.Table{"capabilities": amqp.Table{"authentication_failure_close": true}},
		Mechanism:        "PLAIN",
		Response:         "\x00" + user + "\x00" + pass,
		Locale:           "en_US",
	})
	return r
}

var defaultTune = rawTune{channelMax: 2047, frameMax: 131072}

func (r *rawConn) write(b []byte) {
	r.t.Helper()
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

func (r *rawConn) send(channel uint16, m amqp.Method) {
	r.t.Helper()
	r.write(amqp.AppendMethodFrame(nil, channel, m))
}

// next reads the next frame that is not a heartbeat.
func (r *rawConn) next() (amqp.Frame, error) {
	for {
		f, err := r.fr.ReadFrame()
		if err != nil || f.Type != amqp.FrameHeartbeat {
			return f, err
		}
	}
}

// method reads the next method frame.
func (r *rawConn) method() (uint16, amqp.Method) {
	r.t.Helper()
	f, err := r.next()
	if err != nil {
		r.t.Fatalf("read: %v", err)
	}
	if f.Type != amqp.FrameMethod {
		r.t.Fatalf("got frame type %d on channel %d, want a method", f.Type, f.Channel)
	}
	m, err := amqp.DecodeMethod(f.Payload)
	if err != nil {
		r.t.Fatalf("decode: %v", err)
	}
	return f.Channel, m
}

// rawExpect reads the next method and fails unless it is a T on channel.
func rawExpect[T amqp.Method](r *rawConn, channel uint16) T {
	r.t.Helper()
	ch, m := r.method()
	got, ok := m.(T)
	if !ok || ch != channel {
		r.t.Fatalf("got %s on channel %d (%+v), want %T on channel %d", m.Name(), ch, m, got, channel)
	}
	return got
}

// expectConnClose reads connection.close with code, answers close-ok and
// expects the broker to close the socket.
func (r *rawConn) expectConnClose(code uint16) *amqp.ConnectionClose {
	r.t.Helper()
	cl := rawExpect[*amqp.ConnectionClose](r, 0)
	if cl.ReplyCode != code {
		r.t.Fatalf("connection.close %d %q, want code %d", cl.ReplyCode, cl.ReplyText, code)
	}
	// The broker may have closed already (frame errors); ignore the error.
	_, _ = r.nc.Write(amqp.AppendMethodFrame(nil, 0, &amqp.ConnectionCloseOk{}))
	r.expectEOF()
	return cl
}

// expectEOF fails unless the broker closes the socket, with nothing but
// heartbeats before.
func (r *rawConn) expectEOF() {
	r.t.Helper()
	f, err := r.next()
	if err == nil {
		if f.Type == amqp.FrameMethod {
			if m, derr := amqp.DecodeMethod(f.Payload); derr == nil {
				r.t.Fatalf("got %s (%+v), want the socket closed", m.Name(), m)
			}
		}
		r.t.Fatalf("got frame type %d, want the socket closed", f.Type)
	}
	if !isClosedErr(err) {
		r.t.Fatalf("want the socket closed, got %v", err)
	}
}

func isClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// publishConsume checks that c can still move a message through a queue.
func publishConsume(t testing.TB, c *amqp091.Connection) {
	t.Helper()
	ch := open(t, c)
	defer ch.Close()
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "", q.Name, false, false, amqp091.Publishing{Body: []byte("still here")}); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, d); string(m.Body) != "still here" {
		t.Fatalf("got %q", m.Body)
	}
}

func TestConnManyChannels(t *testing.T) {
	s := brokertest.Start(t, nil)
	// With channel_max 100 the client has to reuse the numbers of the
	// channels it closed.
	c, err := amqp091.DialConfig(s.URL, amqp091.Config{ChannelMax: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	for round := range 2 {
		chs := make([]*amqp091.Channel, 100)
		for i := range chs {
			chs[i] = open(t, c)
		}
		for i, ch := range chs {
			if _, err := ch.QueueDeclare(fmt.Sprintf("many-%d-%d", round, i), false, true, false, false, nil); err != nil {
				t.Fatalf("round %d channel %d: %v", round, i, err)
			}
		}
		for _, ch := range chs {
			if err := ch.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	publishConsume(t, c)
}

func TestConnReopenChannelNumber(t *testing.T) {
	s := brokertest.Start(t, nil)
	r := rawOpen(t, s.Addr, defaultTune)
	for range 3 {
		r.send(7, &amqp.ChannelOpen{})
		rawExpect[*amqp.ChannelOpenOk](r, 7)
		r.send(7, &amqp.QueueDeclare{Queue: "reopen"})
		rawExpect[*amqp.QueueDeclareOk](r, 7)
		r.send(7, &amqp.ChannelClose{ReplyCode: 200, ReplyText: "bye"})
		rawExpect[*amqp.ChannelCloseOk](r, 7)
	}
	// After a soft error too: passive declare of a missing queue.
	r.send(7, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 7)
	r.send(7, &amqp.QueueDeclare{Queue: "missing", Passive: true})
	cl := rawExpect[*amqp.ChannelClose](r, 7)
	if cl.ReplyCode != amqp.NotFound {
		t.Fatalf("channel.close %d %q, want 404", cl.ReplyCode, cl.ReplyText)
	}
	r.send(7, &amqp.ChannelCloseOk{})
	r.send(7, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 7)
	r.send(7, &amqp.QueueDeclare{Queue: "reopen", Passive: true})
	rawExpect[*amqp.QueueDeclareOk](r, 7)
}

func TestConnHeartbeatKeepsIdleConnection(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c, err := amqp091.DialConfig(s.URL, amqp091.Config{Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	// The client gives up after 1.5 s without a frame from the broker, the
	// broker after 2 s without one from the client: 4 s idle needs
	// heartbeats both ways.
	select {
	case err := <-closed:
		t.Fatalf("connection closed while idle: %v", err)
	case <-time.After(4 * time.Second):
	}
	if c.IsClosed() {
		t.Fatal("connection closed while idle")
	}
	publishConsume(t, c)
}

func TestConnSilentClientDisconnected(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	r := rawOpen(t, s.Addr, rawTune{channelMax: 2047, frameMax: 131072, heartbeat: 1})
	start := time.Now()
	heartbeats := 0
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			if !isClosedErr(err) {
				t.Fatalf("want the socket closed, got %v", err)
			}
			break
		}
		if f.Type != amqp.FrameHeartbeat {
			t.Fatalf("got frame type %d, want heartbeats", f.Type)
		}
		heartbeats++
	}
	if d := time.Since(start); d < 1500*time.Millisecond || d > 3500*time.Millisecond {
		t.Fatalf("silent client disconnected after %v, want 2-3 s", d)
	}
	if heartbeats == 0 {
		t.Fatal("broker sent no heartbeats")
	}
}

func TestConnHandshakeTimeout(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, &broker.Config{HandshakeTimeout: 300 * time.Millisecond})
	// The timeout covers the whole handshake: a client trickling
	// heartbeats does not extend it.
	r := rawDial(t, s.Addr)
	r.write(amqp.ProtocolHeader)
	rawExpect[*amqp.ConnectionStart](r, 0)
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := r.next()
		done <- err
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if !isClosedErr(err) {
				t.Fatalf("want the socket closed, got %v", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("closed after %v", d)
			}
			return
		case <-tick.C:
			_, _ = r.nc.Write(amqp.AppendHeartbeat(nil))
		}
	}
}

func TestConnWrongPassword(t *testing.T) {
	s := brokertest.Start(t, nil)
	url := strings.Replace(s.URL, "guest:guest", "guest:wrong", 1)
	// amqp091-go does not advertise authentication_failure_close: the
	// broker closes the socket and the client reports ErrCredentials.
	_, err := amqp091.Dial(url)
	if !errors.Is(err, amqp091.ErrCredentials) {
		t.Fatalf("dial with a wrong password: %v", err)
	}
	expectCode(t, err, amqp091.AccessRefused)
	_, err = amqp091.Dial(strings.Replace(s.URL, "guest:guest", "nobody:guest", 1))
	expectCode(t, err, amqp091.AccessRefused)

	// A client that advertises it gets connection.close 403.
	r := rawStart(t, s.Addr, "guest", "wrong")
	cl := r.expectConnClose(amqp.AccessRefused)
	if want := "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile."; cl.ReplyText != want {
		t.Fatalf("reply text %q, want %q", cl.ReplyText, want)
	}

	// One that does not gets the socket closed.
	r = rawDial(t, s.Addr)
	r.write(amqp.ProtocolHeader)
	rawExpect[*amqp.ConnectionStart](r, 0)
	r.send(0, &amqp.ConnectionStartOk{Mechanism: "PLAIN", Response: "\x00guest\x00wrong", Locale: "en_US"})
	r.expectEOF()

	// The broker still serves good logins.
	publishConsume(t, dial(t, s))
}

func TestConnSASLAMQPLAIN(t *testing.T) {
	s := brokertest.Start(t, nil)
	url := "amqp://" + s.Addr + "/"
	c, err := amqp091.DialConfig(url, amqp091.Config{SASL: []amqp091.Authentication{&amqp091.AMQPlainAuth{Username: "guest", Password: "guest"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	publishConsume(t, c)
	_, err = amqp091.DialConfig(url, amqp091.Config{SASL: []amqp091.Authentication{&amqp091.AMQPlainAuth{Username: "guest", Password: "nope"}}})
	if !errors.Is(err, amqp091.ErrCredentials) {
		t.Fatalf("AMQPLAIN with a wrong password: %v", err)
	}
}

func TestConnUnknownVHost(t *testing.T) {
	s := brokertest.Start(t, nil)
	// amqp091-go reports any failure of connection.open as ErrVhost.
	_, err := amqp091.Dial(fmt.Sprintf("amqp://guest:guest@%s/nope", s.Addr))
	if !errors.Is(err, amqp091.ErrVhost) {
		t.Fatalf("dial to an unknown vhost: %v", err)
	}
	r := rawStart(t, s.Addr, "guest", "guest")
	rawExpect[*amqp.ConnectionTune](r, 0)
	r.send(0, &amqp.ConnectionTuneOk{ChannelMax: 2047, FrameMax: 131072})
	r.send(0, &amqp.ConnectionOpen{VirtualHost: "nope"})
	cl := r.expectConnClose(amqp.NotAllowed)
	if cl.ReplyText != "NOT_ALLOWED - vhost nope not found" || cl.FailingClassID != amqp.ClassConnection || cl.FailingMethodID != 40 {
		t.Fatalf("connection.close %+v", cl)
	}
}

func TestConnTuneOkOutOfLimits(t *testing.T) {
	s := brokertest.Start(t, nil)
	for _, tc := range []struct {
		tune rawTune
		text string
	}{
		{rawTune{channelMax: 2047, frameMax: 0}, "NOT_ALLOWED - negotiated frame_max = 0 is higher than the maximum allowed value (131072)"},
		{rawTune{channelMax: 2047, frameMax: 1000}, "NOT_ALLOWED - negotiated frame_max = 1000 is lower than the minimum allowed value (4096)"},
		{rawTune{channelMax: 2047, frameMax: 131073}, "NOT_ALLOWED - negotiated frame_max = 131073 is higher than the maximum allowed value (131072)"},
		{rawTune{channelMax: 0, frameMax: 4096}, "NOT_ALLOWED - negotiated channel_max = 0 (no limit) is higher than the maximum allowed value (2047)"},
		{rawTune{channelMax: 2048, frameMax: 4096}, "NOT_ALLOWED - negotiated channel_max = 2048 is higher than the maximum allowed value (2047)"},
	} {
		r := rawStart(t, s.Addr, "guest", "guest")
		rawExpect[*amqp.ConnectionTune](r, 0)
		r.send(0, &amqp.ConnectionTuneOk{ChannelMax: tc.tune.channelMax, FrameMax: tc.tune.frameMax})
		cl := r.expectConnClose(amqp.NotAllowed)
		if cl.ReplyText != tc.text || cl.FailingClassID != amqp.ClassConnection || cl.FailingMethodID != 30 {
			t.Errorf("tune-ok %+v: connection.close %+v, want %q", tc.tune, cl, tc.text)
		}
	}
}

func TestConnGarbageAfterHandshake(t *testing.T) {
	s := brokertest.Start(t, nil)
	other := dial(t, s)
	publishConsume(t, other)
	for _, tc := range []struct {
		name    string
		garbage []byte
	}{
		{"bad frame-end", []byte{amqp.FrameMethod, 0, 0, 0, 0, 0, 0, 0x00}},
		{"bad frame type", []byte{9, 0, 1, 0, 0, 0, 0, amqp.FrameEnd}},
		{"random bytes", []byte{0x5a, 0x17, 0xc3, 0x00, 0x00, 0x00, 0x01, 0x42, 0x99}},
		{"heartbeat with a payload", []byte{amqp.FrameHeartbeat, 0, 0, 0, 0, 0, 1, 0x42, amqp.FrameEnd}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rawOpen(t, s.Addr, defaultTune)
			r.write(tc.garbage)
			cl := r.expectConnClose(amqp.FrameError)
			if !strings.HasPrefix(cl.ReplyText, "FRAME_ERROR - ") {
				t.Fatalf("reply text %q", cl.ReplyText)
			}
		})
	}
	// Before the handshake is done RabbitMQ closes the socket without a
	// connection.close.
	r := rawDial(t, s.Addr)
	r.write(append(append([]byte{}, amqp.ProtocolHeader...), 1, 0, 0, 0, 0, 0, 0, 0))
	rawExpect[*amqp.ConnectionStart](r, 0)
	r.expectEOF()

	publishConsume(t, other)
}

func TestConnFrameTooLarge(t *testing.T) {
	s := brokertest.Start(t, nil)
	r := rawOpen(t, s.Addr, rawTune{channelMax: 2047, frameMax: 4096})
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	// RabbitMQ lets a frame's payload reach frame-max (8 bytes over).
	publish := func(size int) {
		b := amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "nowhere"})
		b = amqp.AppendHeaderFrame(b, 1, amqp.ClassBasic, uint64(size), nil)
		b = amqp.AppendFrame(b, amqp.FrameBody, 1, make([]byte, size))
		r.write(b)
	}
	publish(4096)
	r.send(1, &amqp.ChannelClose{ReplyCode: 200})
	rawExpect[*amqp.ChannelCloseOk](r, 1)
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	publish(4097)
	r.expectConnClose(amqp.FrameError)

	// A frame header announcing 10000 bytes is refused before the payload.
	r = rawOpen(t, s.Addr, rawTune{channelMax: 2047, frameMax: 4096})
	r.write([]byte{amqp.FrameMethod, 0, 1, 0, 0, 0x27, 0x10})
	r.expectConnClose(amqp.FrameError)

	// Before tune-ok the limit is the minimum frame-max, 4096.
	r = rawDial(t, s.Addr)
	r.write(amqp.ProtocolHeader)
	rawExpect[*amqp.ConnectionStart](r, 0)
	r.send(0, &amqp.ConnectionStartOk{
		ClientProperties: amqp.Table{"big": strings.Repeat("x", 5000)},
		Mechanism:        "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US",
	})
	r.expectEOF()
}

func TestConnBadProtocolHeader(t *testing.T) {
	s := brokertest.Start(t, nil)
	for _, hdr := range []string{"AMQP\x00\x00\x09\x00", "AMQP\x00\x00\x08\x00", "HTTP/1.1", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "AMQP\x03\x01\x00\x00"} {
		r := rawDial(t, s.Addr)
		r.write([]byte(hdr))
		got, err := io.ReadAll(r.nc)
		if err != nil && !isClosedErr(err) {
			t.Fatalf("%q: %v", hdr, err)
		}
		if string(got) != "AMQP\x00\x00\x09\x01" {
			t.Errorf("header %q: broker answered %q", hdr, got)
		}
	}
	// RabbitMQ serves the AMQP 0-9 header as 0-9-1.
	r := rawDial(t, s.Addr)
	r.write([]byte("AMQP\x01\x01\x00\x09"))
	if st := rawExpect[*amqp.ConnectionStart](r, 0); st.VersionMajor != 0 || st.VersionMinor != 9 {
		t.Fatalf("connection.start %d-%d", st.VersionMajor, st.VersionMinor)
	}
}

func TestConnBrokerCloseSends320(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	chClosed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	// A connection still in its handshake is dropped without a word.
	r := rawDial(t, s.Addr)
	r.write(amqp.ProtocolHeader)
	rawExpect[*amqp.ConnectionStart](r, 0)

	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp091.ConnectionForced {
			t.Fatalf("connection closed with %v, want 320", e)
		}
		if !strings.Contains(e.Reason, "shutdown") {
			t.Fatalf("reason %q", e.Reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no connection.close from the broker")
	}
	select {
	case e := <-chClosed:
		if e != nil && e.Code != amqp091.ConnectionForced {
			t.Fatalf("channel closed with %v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("broker.Close did not return")
	}
	r.expectEOF()
	if _, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
		t.Fatal("broker still accepts connections after Close")
	}
}

func TestConnChannelErrors(t *testing.T) {
	s := brokertest.Start(t, nil)
	for _, tc := range []struct {
		name            string
		send            func(r *rawConn)
		code            uint16
		text            string
		class, methodID uint16
	}{
		{"method on an unopened channel", func(r *rawConn) {
			r.send(5, &amqp.QueueDeclare{Queue: "q"})
		}, amqp.ChannelError, "CHANNEL_ERROR - expected 'channel.open'", amqp.ClassQueue, 10},
		{"content on an unopened channel", func(r *rawConn) {
			r.write(amqp.AppendHeaderFrame(nil, 5, amqp.ClassBasic, 1, nil))
		}, amqp.UnexpectedFrame, "UNEXPECTED_FRAME - expected method frame, got non method frame instead", 0, 0},
		{"channel method on channel 0", func(r *rawConn) {
			r.send(0, &amqp.QueueDeclare{Queue: "q"})
		}, amqp.ChannelError, "CHANNEL_ERROR - unexpected method in connection state running", amqp.ClassQueue, 10},
		{"connection.open again", func(r *rawConn) {
			r.send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
		}, amqp.ChannelError, "CHANNEL_ERROR - unexpected method in connection state running", amqp.ClassConnection, 40},
		{"content on channel 0", func(r *rawConn) {
			r.write(amqp.AppendBodyFrames(nil, 0, []byte("x"), 0))
		}, amqp.UnexpectedFrame, "UNEXPECTED_FRAME - type 3, all octets = <<120>>", 0, 0},
		{"heartbeat on channel 1", func(r *rawConn) {
			r.send(1, &amqp.ChannelOpen{})
			rawExpect[*amqp.ChannelOpenOk](r, 1)
			r.write([]byte{amqp.FrameHeartbeat, 0, 1, 0, 0, 0, 0, amqp.FrameEnd})
		}, amqp.UnexpectedFrame, "UNEXPECTED_FRAME - type 8, all octets = <<>>", 0, 0},
		{"channel.open twice", func(r *rawConn) {
			r.send(1, &amqp.ChannelOpen{})
			rawExpect[*amqp.ChannelOpenOk](r, 1)
			r.send(1, &amqp.ChannelOpen{})
		}, amqp.ChannelError, "CHANNEL_ERROR - second 'channel.open' seen", amqp.ClassChannel, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rawOpen(t, s.Addr, defaultTune)
			tc.send(r)
			cl := r.expectConnClose(tc.code)
			if cl.ReplyText != tc.text || cl.FailingClassID != tc.class || cl.FailingMethodID != tc.methodID {
				t.Fatalf("connection.close %+v, want %q (%d, %d)", cl, tc.text, tc.class, tc.methodID)
			}
		})
	}
}

func TestConnChannelMax(t *testing.T) {
	s := brokertest.Start(t, nil)
	// The usable channel numbers are 1..channel_max (stricter than
	// RabbitMQ, which limits only how many channels are open).
	r := rawOpen(t, s.Addr, rawTune{channelMax: 2, frameMax: 131072})
	r.send(2, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 2)
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	r.send(1, &amqp.ChannelClose{ReplyCode: 200})
	rawExpect[*amqp.ChannelCloseOk](r, 1)
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	r.send(3, &amqp.ChannelOpen{})
	cl := r.expectConnClose(amqp.NotAllowed)
	if want := "NOT_ALLOWED - channel number 3 is above the negotiated channel_max (2)"; cl.ReplyText != want {
		t.Fatalf("reply text %q, want %q", cl.ReplyText, want)
	}
}

func TestConnSoftErrorClosesOnlyChannel(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	connClosed := c.NotifyClose(make(chan *amqp091.Error, 1))
	good := open(t, c)
	bad := open(t, c)
	badClosed := bad.NotifyClose(make(chan *amqp091.Error, 1))
	_, err := bad.QueueDeclarePassive("no-such-queue", false, false, false, false, nil)
	expectCode(t, err, amqp091.NotFound)
	select {
	case e := <-badClosed:
		if e == nil || e.Code != amqp091.NotFound {
			t.Fatalf("channel closed with %v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed")
	}
	if _, err := good.QueueDeclare("soft-ok", false, true, false, false, nil); err != nil {
		t.Fatalf("other channel: %v", err)
	}
	// The client reuses the freed channel number for the next channel.
	publishConsume(t, c)
	select {
	case e := <-connClosed:
		t.Fatalf("connection closed: %v", e)
	default:
	}
	if c.IsClosed() {
		t.Fatal("connection closed by a channel error")
	}
}

func TestConnUpdateSecret(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	if err := c.UpdateSecret("new-secret", "rotation"); err != nil {
		t.Fatalf("update-secret: %v", err)
	}
	publishConsume(t, c)
}

func TestConnManyConnections(t *testing.T) {
	s := brokertest.Start(t, nil)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	conns := make(chan *amqp091.Connection, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := amqp091.Dial(s.URL)
			if err != nil {
				errs <- fmt.Errorf("dial %d: %w", i, err)
				return
			}
			conns <- c
			ch, err := c.Channel()
			if err != nil {
				errs <- fmt.Errorf("channel %d: %w", i, err)
				return
			}
			if _, err := ch.QueueDeclare(fmt.Sprintf("conn-%d", i), false, false, true, false, nil); err != nil {
				errs <- fmt.Errorf("declare %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	close(conns)
	for c := range conns {
		defer c.Close()
	}
	for err := range errs {
		t.Error(err)
	}
}

// TestConnNoGoroutineLeak runs connections through their ways of ending
// and checks that the broker leaves no goroutine behind.
func TestConnNoGoroutineLeak(t *testing.T) {
	// Registered before brokertest.Start, so it runs after the broker's
	// own cleanup has shut it down.
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	s := brokertest.Start(t, &broker.Config{HandshakeTimeout: 500 * time.Millisecond})

	// Orderly close, with channels and a consumer.
	c := dial(t, s)
	publishConsume(t, c)
	ch := open(t, c)
	if _, err := ch.QueueDeclare("leak", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume("leak", "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Protocol errors, refused logins and headers, a client that drops
	// the socket, one that never finishes the handshake.
	r := rawOpen(t, s.Addr, defaultTune)
	r.send(0, &amqp.QueueDeclare{})
	r.expectConnClose(amqp.ChannelError)
	rawStart(t, s.Addr, "guest", "wrong").expectConnClose(amqp.AccessRefused)
	r = rawDial(t, s.Addr)
	r.write([]byte("HTTP/1.1"))
	_, _ = io.ReadAll(r.nc)
	r = rawOpen(t, s.Addr, defaultTune)
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	_ = r.nc.Close()
	r = rawDial(t, s.Addr)
	r.expectEOF()
	// And one left open for broker.Close.
	dial(t, s)
}
