package main

// The raw client: `warren bench --client raw`, the default. Producers and
// consumers speak AMQP 0-9-1 directly through Warren's codec (package
// amqp, imported here as wire) instead of amqp091-go, so that the tool
// costs the machine as little as possible and a broker comparison measures
// the broker. It implements only what the bench's hot loops need, against
// any 0-9-1 broker: the handshake (PLAIN), channel.open, confirm.select,
// basic.qos, basic.consume, publishing, publisher confirms, deliveries,
// basic.ack and connection.close. Topology stays on amqp091-go
// (bench_topology.go).
//
// Writes go through one buffer per connection, shared by its channels under
// a mutex: a producer appends a prebuilt message (method, header and body
// frames; only the timestamp and sequence in the body are patched) and the
// buffer goes to the socket when it holds rawWriteBuf bytes, when the last
// write is rawFlushInterval old, or when the writer is about to wait (for
// its rate, its confirm window, or, for the connection's reader, for input).
// Each connection has one reader goroutine that handles every frame in
// place: deliveries are counted and acknowledged in it, confirms settled in
// it. Nothing is allocated per message.

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	wire "github.com/warrenmq/warren/amqp"
)

// --client values.
const (
	benchClientRaw     = "raw"
	benchClientAMQP091 = "amqp091"
)

const (
	rawReadBuf       = 256 << 10 // a consumer connection's read buffer: many deliveries per read
	rawReadBufTotal  = 64 << 20  // ... unless there are many: they share this much, 32 KiB at least
	rawReadBufSmall  = 16 << 10  // a producer connection's: confirms only
	rawWriteBuf      = 128 << 10 // a connection's write buffer goes out when this full
	rawFlushInterval = 2 * time.Millisecond
	rawTimeout       = 30 * time.Second // handshake and synchronous methods
	rawHeartbeat     = 10 * time.Second // the most we ask for; a lower server value (0 = none) wins
	rawCloseTimeout  = 5 * time.Second  // for close-ok
)

// Method ids (class << 16 | method) handled without MethodDecoder.
const (
	rawChannelFlow  = 20<<16 | 20
	rawChannelClose = 20<<16 | 40
	rawBasicCancel  = 60<<16 | 30
	rawBasicReturn  = 60<<16 | 50
	rawBasicDeliver = 60<<16 | 60
	rawBasicAck     = 60<<16 | 80
	rawBasicNack    = 60<<16 | 120
)

// errRawClosed is why a channel or connection we closed is closed.
var errRawClosed = errors.New("connection closed")

// rawConn is one client connection.
type rawConn struct {
	nc         net.Conn
	fr         *wire.FrameReader
	dec        wire.MethodDecoder
	frameMax   uint32 // negotiated; 0 = no limit
	channelMax uint16 // negotiated; 0 = no limit
	heartbeat  time.Duration
	chans      []*rawChannel // by channel id; chans[0] is nil

	wmu       sync.Mutex
	wbuf      []byte
	lastFlush int64 // UnixNano of the last write
	closing   bool  // connection.close sent or answered: nothing else may follow
	werr      error // the first write error, sticky

	started  bool          // readLoop runs; set before it starts
	done     chan struct{} // closed when readLoop returns
	err      error         // why readLoop returned, nil for a clean close; read after done
	quit     chan struct{} // closed by shutdown
	quitOnce sync.Once
	bg       sync.WaitGroup // the heartbeat goroutine
}

// rawChannel is one channel of a rawConn. The fields below the atomics are
// owned by the goroutine that reads the connection (the opener until the
// reader starts).
type rawChannel struct {
	c       *rawConn
	id      uint16
	closed  atomic.Bool
	closedC chan struct{} // closed with closed set
	err     error         // why it closed; written before closed is set

	// lost is called (by the reader) when the channel stops delivering: the
	// broker closed it or cancelled the consumer, or the connection ended.
	lost     func(error)
	lostDone bool

	confirms *rawConfirms // producer in confirm mode
	// synced receives a signal when a synchronous reply arrives on the
	// channel once the reader runs (barrier).
	synced chan struct{}

	cons     *benchConsumer // consumer
	autoAck  bool
	multiAck int
	unacked  int
	ack      wire.BasicAck

	// Content being received.
	content  uint8 // rawIdle, rawWantHeader or rawWantBody
	delivery bool  // of a basic.deliver (else a basic.return, dropped)
	tag      uint64
	size     uint64
	got      uint64
	head     [benchMinSize]byte // the first body bytes: timestamp, sequence
}

const (
	rawIdle uint8 = iota
	rawWantHeader
	rawWantBody
)

func newRawConn(nc net.Conn, readBuf int) *rawConn {
	return &rawConn{
		nc:    nc,
		fr:    wire.NewFrameReader(nc, readBuf),
		chans: []*rawChannel{nil},
		wbuf:  make([]byte, 0, 4096), // grows to what a flush carries, then stays
		done:  make(chan struct{}),
		quit:  make(chan struct{}),
	}
}

// rawDial connects to uri and performs the handshake. readBuf is the size
// of the read buffer.
func rawDial(uri, name string, readBuf int) (*rawConn, error) {
	u, err := amqp.ParseURI(uri)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: rawTimeout}
	nc, err := d.Dial("tcp", net.JoinHostPort(u.Host, strconv.Itoa(u.Port)))
	if err != nil {
		return nil, err
	}
	if u.Scheme == "amqps" {
		cfg, err := rawTLSConfig(u)
		if err != nil {
			_ = nc.Close()
			return nil, err
		}
		nc = tls.Client(nc, cfg)
	}
	c := newRawConn(nc, readBuf)
	if err := c.handshake(u, name); err != nil {
		c.shutdown()
		c.bg.Wait()
		return nil, err
	}
	return c, nil
}

func rawTLSConfig(u amqp.URI) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: u.Host}
	if u.ServerName != "" {
		cfg.ServerName = u.ServerName
	}
	if u.CACertFile != "" {
		pem, err := os.ReadFile(u.CACertFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AppendCertsFromPEM(pem)
	}
	if u.CertFile != "" && u.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(u.CertFile, u.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// handshake runs 0-9-1 §4.2.2 to connection.open-ok and starts the
// heartbeats.
func (c *rawConn) handshake(u amqp.URI, name string) error {
	_ = c.nc.SetDeadline(time.Now().Add(rawTimeout))
	c.fr.SetMaxFrameSize(wire.FrameMinSize)
	c.wbuf = append(c.wbuf, wire.ProtocolHeader...)
	if err := c.flush(); err != nil {
		return err
	}
	m, err := c.expectConn()
	if err != nil {
		return err
	}
	start, ok := m.(*wire.ConnectionStart)
	if !ok {
		return fmt.Errorf("handshake: got %s, want connection.start", m.Name())
	}
	if !slices.Contains(strings.Fields(start.Mechanisms), "PLAIN") {
		return fmt.Errorf("handshake: the server offers %q, not PLAIN", start.Mechanisms)
	}
	if err := c.send(nil, &wire.ConnectionStartOk{
		ClientProperties: wire.Table{
			"product":         "warren bench",
			"platform":        "Go " + runtime.Version(),
			"connection_name": name,
			"capabilities": wire.Table{
				"publisher_confirms":           true,
				"basic.nack":                   true,
				"consumer_cancel_notify":       true,
				"authentication_failure_close": true,
			},
		},
		Mechanism: "PLAIN",
		Response:  "\x00" + u.Username + "\x00" + u.Password,
		Locale:    "en_US",
	}); err != nil {
		return err
	}
	if m, err = c.expectConn(); err != nil {
		if !errors.As(err, new(*wire.Error)) {
			err = fmt.Errorf("connection lost after login (bad credentials?): %w", err)
		}
		return err
	}
	tune, ok := m.(*wire.ConnectionTune)
	if !ok {
		return fmt.Errorf("handshake: got %s, want connection.tune", m.Name())
	}
	if tune.FrameMax != 0 && tune.FrameMax < wire.FrameMinSize {
		return fmt.Errorf("handshake: the server's frame-max %d is below the protocol minimum %d", tune.FrameMax, wire.FrameMinSize)
	}
	// The client has no limits of its own: it takes the server's frame-max
	// and channel-max, and the lower non-zero heartbeat (as amqp091-go).
	c.frameMax, c.channelMax = tune.FrameMax, tune.ChannelMax
	hb := uint16(rawHeartbeat / time.Second)
	if tune.Heartbeat == 0 || tune.Heartbeat < hb {
		hb = tune.Heartbeat
	}
	c.heartbeat = time.Duration(hb) * time.Second
	if err := c.send(nil, &wire.ConnectionTuneOk{ChannelMax: c.channelMax, FrameMax: c.frameMax, Heartbeat: hb}); err != nil {
		return err
	}
	// No limit from now on: a broker's frame that exceeds frame-max by a
	// little is no reason to fail a benchmark.
	c.fr.SetMaxFrameSize(0)
	if c.heartbeat > 0 {
		c.bg.Go(c.heartbeats)
	}
	if err := c.send(nil, &wire.ConnectionOpen{VirtualHost: u.Vhost}); err != nil {
		return err
	}
	if m, err = c.expectConn(); err != nil {
		return err
	}
	if _, ok := m.(*wire.ConnectionOpenOk); !ok {
		return fmt.Errorf("handshake: got %s, want connection.open-ok", m.Name())
	}
	return c.nc.SetDeadline(time.Time{})
}

// expectConn reads the next method on channel 0 during the handshake. A
// connection.close is answered and returned as its *wire.Error.
func (c *rawConn) expectConn() (wire.Method, error) {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		if f.Type == wire.FrameHeartbeat {
			continue
		}
		if f.Type != wire.FrameMethod || f.Channel != 0 {
			return nil, fmt.Errorf("handshake: unexpected frame type %d on channel %d", f.Type, f.Channel)
		}
		m, err := c.dec.Decode(f.Payload)
		if err != nil {
			return nil, err
		}
		if cl, ok := m.(*wire.ConnectionClose); ok {
			c.sendClose(&wire.ConnectionCloseOk{})
			return nil, cl.Err()
		}
		return m, nil
	}
}

// heartbeats sends a heartbeat every half interval in which nothing else
// was written, until shutdown.
func (c *rawConn) heartbeats() {
	half := c.heartbeat / 2
	t := time.NewTicker(half)
	defer t.Stop()
	for {
		select {
		case <-c.quit:
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		c.wmu.Lock()
		if !c.closing && c.werr == nil && now-c.lastFlush >= int64(half) {
			c.wbuf = wire.AppendHeartbeat(c.wbuf)
			_ = c.flushLocked(now)
		}
		c.wmu.Unlock()
	}
}

// shutdown closes the socket, which ends the reader and any blocked write,
// and stops the heartbeats.
func (c *rawConn) shutdown() {
	c.quitOnce.Do(func() {
		close(c.quit)
		_ = c.nc.Close()
	})
}

// flushLocked writes the buffer out. c.wmu is held.
func (c *rawConn) flushLocked(now int64) error {
	if c.werr != nil {
		c.wbuf = c.wbuf[:0]
		return c.werr
	}
	if len(c.wbuf) == 0 {
		return nil
	}
	_, err := c.nc.Write(c.wbuf)
	c.wbuf = c.wbuf[:0]
	c.lastFlush = now
	if err != nil {
		c.werr = err
	}
	return err
}

// flush writes out whatever is buffered.
func (c *rawConn) flush() error {
	c.wmu.Lock()
	err := c.flushLocked(time.Now().UnixNano())
	c.wmu.Unlock()
	return err
}

// writableLocked reports why nothing more can be sent on ch (nil: the
// connection) if anything. c.wmu is held.
func (c *rawConn) writableLocked(ch *rawChannel) error {
	switch {
	case c.werr != nil:
		return c.werr
	case c.closing:
		return errRawClosed
	case ch != nil && ch.closed.Load():
		return ch.err
	}
	return nil
}

// send writes one method frame on ch (nil: channel 0) at once: for the
// handshake and the control methods outside the hot paths.
func (c *rawConn) send(ch *rawChannel, m wire.Method) error {
	if ch == nil {
		return c.sendOn(0, m)
	}
	if ch.closed.Load() {
		return ch.err
	}
	return c.sendOn(ch.id, m)
}

// sendOn is send by channel id, whatever the channel's state.
func (c *rawConn) sendOn(id uint16, m wire.Method) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writableLocked(nil); err != nil {
		return err
	}
	c.wbuf = wire.AppendMethodFrame(c.wbuf, id, m)
	return c.flushLocked(time.Now().UnixNano())
}

// sendClose sends connection.close or close-ok, after which nothing else
// may be sent.
func (c *rawConn) sendClose(m wire.Method) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closing {
		return
	}
	c.closing = true
	c.wbuf = wire.AppendMethodFrame(c.wbuf, 0, m)
	_ = c.flushLocked(time.Now().UnixNano())
}

// write appends a method frame on ch (basic.ack) and writes the buffer out
// if it is full or old.
func (c *rawConn) write(ch *rawChannel, m wire.Method, now int64) error {
	c.wmu.Lock()
	err := c.writableLocked(ch)
	if err == nil {
		c.wbuf = wire.AppendMethodFrame(c.wbuf, ch.id, m)
		if len(c.wbuf) >= rawWriteBuf || now-c.lastFlush >= int64(rawFlushInterval) {
			err = c.flushLocked(now)
		}
	}
	c.wmu.Unlock()
	return err
}

// publish appends a prebuilt message (method, header and body frames on
// ch) and writes the buffer out if it is full or old. A large message is
// written from msg without a copy.
func (c *rawConn) publish(ch *rawChannel, msg []byte, now int64) error {
	c.wmu.Lock()
	err := c.writableLocked(ch)
	switch {
	case err != nil:
	case len(msg) >= rawWriteBuf/2:
		if err = c.flushLocked(now); err == nil {
			if _, err = c.nc.Write(msg); err != nil {
				c.werr = err
			}
		}
	default:
		c.wbuf = append(c.wbuf, msg...)
		if len(c.wbuf) >= rawWriteBuf || now-c.lastFlush >= int64(rawFlushInterval) {
			err = c.flushLocked(now)
		}
	}
	c.wmu.Unlock()
	return err
}

// openChannel opens the next channel. Before the reader starts only.
func (c *rawConn) openChannel() (*rawChannel, error) {
	id := len(c.chans)
	if id > 65535 || (c.channelMax != 0 && id > int(c.channelMax)) {
		return nil, fmt.Errorf("channel %d: above the server's channel-max %d", id, c.channelMax)
	}
	ch := &rawChannel{c: c, id: uint16(id), closedC: make(chan struct{}), synced: make(chan struct{}, 1)}
	c.chans = append(c.chans, ch)
	if _, err := c.call(ch, &wire.ChannelOpen{}); err != nil {
		return nil, err
	}
	return ch, nil
}

// call sends a synchronous method on ch and returns its reply, handling
// whatever else arrives meanwhile. Before the reader starts only.
func (c *rawConn) call(ch *rawChannel, m wire.Method) (wire.Method, error) {
	if err := c.send(ch, m); err != nil {
		return nil, err
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(rawTimeout))
	defer func() { _ = c.nc.SetReadDeadline(time.Time{}) }()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		id, reply, err := c.handle(f)
		if err != nil {
			return nil, err
		}
		if ch.closed.Load() {
			return nil, ch.err
		}
		if reply != nil && id == ch.id {
			if reply.ClassID() != m.ClassID() || reply.MethodID() != m.MethodID()+1 {
				return nil, fmt.Errorf("%s answered with %s", m.Name(), reply.Name())
			}
			return reply, nil
		}
	}
}

// readLoop reads and handles frames until the connection ends. It writes
// the buffer out whenever it is about to wait for input.
func (c *rawConn) readLoop() {
	defer close(c.done)
	var err error
	for {
		if c.fr.Buffered() == 0 {
			_ = c.flush()
		}
		var f wire.Frame
		if f, err = c.fr.ReadFrame(); err != nil {
			break
		}
		var id uint16
		var reply wire.Method
		if id, reply, err = c.handle(f); err != nil {
			break
		}
		if reply != nil && id != 0 {
			select {
			case c.chans[id].synced <- struct{}{}:
			default:
			}
		}
	}
	reason := err
	if errors.Is(err, errRawClosed) {
		err, reason = nil, errRawClosed
	}
	c.err = err
	for _, ch := range c.chans[1:] {
		ch.close(reason)
	}
	c.shutdown()
}

// handle processes one frame. It returns a method it does not handle
// itself, a synchronous reply, with its channel.
func (c *rawConn) handle(f wire.Frame) (uint16, wire.Method, error) {
	if f.Type == wire.FrameHeartbeat {
		return 0, nil, nil
	}
	if f.Channel == 0 {
		return c.handleConn(f)
	}
	if int(f.Channel) >= len(c.chans) {
		return 0, nil, wire.Errorf(wire.ChannelError, 0, 0, "frame on channel %d, which was never opened", f.Channel)
	}
	ch := c.chans[f.Channel]
	if f.Type != wire.FrameMethod {
		return 0, nil, ch.contentFrame(f)
	}
	p := f.Payload
	if len(p) < 4 {
		return 0, nil, wire.Errorf(wire.FrameError, 0, 0, "method frame of %d bytes", len(p))
	}
	switch binary.BigEndian.Uint32(p) {
	case rawBasicDeliver:
		// consumer-tag (shortstr), delivery-tag: nothing else is needed.
		if len(p) < 5 || len(p) < 5+int(p[4])+8 {
			return 0, nil, wire.Errorf(wire.FrameError, wire.ClassBasic, 60, "basic.deliver: truncated arguments")
		}
		return 0, nil, ch.startContent(true, binary.BigEndian.Uint64(p[5+int(p[4]):]))
	case rawBasicAck, rawBasicNack:
		// delivery-tag, then the bits: multiple first.
		if len(p) < 13 {
			return 0, nil, wire.Errorf(wire.FrameError, wire.ClassBasic, 0, "basic.ack/nack: truncated arguments")
		}
		if ch.confirms != nil {
			ch.confirms.settle(binary.BigEndian.Uint64(p[4:]), p[12]&1 != 0, binary.BigEndian.Uint32(p) == rawBasicAck)
		}
		return 0, nil, nil
	case rawBasicReturn:
		return 0, nil, ch.startContent(false, 0)
	case rawChannelClose:
		m, err := c.dec.Decode(p)
		if err != nil {
			return 0, nil, err
		}
		ch.close(fmt.Errorf("channel closed by the broker: %w", m.(*wire.ChannelClose).Err()))
		_ = c.sendOn(ch.id, &wire.ChannelCloseOk{})
		return 0, nil, nil
	case rawBasicCancel:
		ch.lose(errors.New("consumer cancelled by the broker"))
		return 0, nil, nil
	case rawChannelFlow:
		m, err := c.dec.Decode(p)
		if err != nil {
			return 0, nil, err
		}
		_ = c.send(ch, &wire.ChannelFlowOk{Active: m.(*wire.ChannelFlow).Active})
		return 0, nil, nil
	}
	m, err := c.dec.Decode(p)
	return f.Channel, m, err
}

// handleConn handles a frame on channel 0.
func (c *rawConn) handleConn(f wire.Frame) (uint16, wire.Method, error) {
	if f.Type != wire.FrameMethod {
		return 0, nil, wire.Errorf(wire.CommandInvalid, 0, 0, "frame type %d on channel 0", f.Type)
	}
	m, err := c.dec.Decode(f.Payload)
	if err != nil {
		return 0, nil, err
	}
	switch m := m.(type) {
	case *wire.ConnectionClose:
		c.sendClose(&wire.ConnectionCloseOk{})
		return 0, nil, fmt.Errorf("connection closed by the broker: %w", m.Err())
	case *wire.ConnectionCloseOk:
		return 0, nil, errRawClosed
	case *wire.ConnectionBlocked, *wire.ConnectionUnblocked:
		return 0, nil, nil
	}
	return 0, m, nil
}

// close sends connection.close; the reader ends with the close-ok. A
// connection whose reader never started is just shut down.
func (c *rawConn) close() {
	if !c.started {
		c.shutdown()
		return
	}
	c.sendClose(&wire.ConnectionClose{ReplyCode: wire.ReplySuccess, ReplyText: "bench done"})
}

// close marks ch closed for err and tells whoever consumes from it.
func (ch *rawChannel) close(err error) {
	if ch.closed.Load() {
		return
	}
	ch.err = err
	ch.closed.Store(true)
	close(ch.closedC)
	ch.lose(err)
}

// lose reports, once, that the consumer on ch stopped receiving.
func (ch *rawChannel) lose(err error) {
	if ch.lost != nil && !ch.lostDone {
		ch.lostDone = true
		ch.lost(err)
	}
}

// startContent begins a message: a header frame and body frames follow.
func (ch *rawChannel) startContent(delivery bool, tag uint64) error {
	if ch.content != rawIdle {
		return wire.Errorf(wire.UnexpectedFrame, 0, 0, "channel %d: method frame inside a message", ch.id)
	}
	ch.content, ch.delivery, ch.tag = rawWantHeader, delivery, tag
	return nil
}

// contentFrame takes a header or body frame. Of the body only the first
// benchMinSize bytes are kept.
func (ch *rawChannel) contentFrame(f wire.Frame) error {
	switch {
	case f.Type == wire.FrameHeader && ch.content == rawWantHeader:
		_, size, err := wire.ParseContentHeaderPrefix(f.Payload)
		if err != nil {
			return err
		}
		ch.size, ch.got, ch.content = size, 0, rawWantBody
	case f.Type == wire.FrameBody && ch.content == rawWantBody:
		if ch.got < benchMinSize {
			copy(ch.head[ch.got:], f.Payload)
		}
		ch.got += uint64(len(f.Payload))
	default:
		return wire.Errorf(wire.UnexpectedFrame, 0, 0, "channel %d: unexpected frame type %d", ch.id, f.Type)
	}
	if ch.got < ch.size {
		return nil
	}
	ch.content = rawIdle
	if ch.delivery {
		ch.delivered()
	}
	return nil
}

// delivered records a complete delivery and acknowledges it as configured.
func (ch *rawChannel) delivered() {
	k := ch.cons
	if k == nil {
		return
	}
	now := time.Now().UnixNano()
	if ch.size >= benchMinSize {
		k.hist.record(now - int64(binary.BigEndian.Uint64(ch.head[:])))
	}
	k.last.Store(now)
	k.received.Add(1)
	if ch.autoAck {
		return
	}
	multiple := false
	if ch.multiAck > 1 {
		if ch.unacked++; ch.unacked < ch.multiAck {
			return
		}
		ch.unacked, multiple = 0, true
	}
	ch.ack.DeliveryTag, ch.ack.Multiple = ch.tag, multiple
	_ = ch.c.write(ch, &ch.ack, now) // a failure ends the connection, and the reader reports it
}

// rawConfirms tracks the publishes of a channel in confirm mode: tags
// [low, next) are published, pending[tag&mask] says which of them await
// their ack. The window limits next-low, so the ring never wraps onto a
// pending tag.
type rawConfirms struct {
	mu      sync.Mutex
	pending []bool
	sentAt  []int64      // UnixNano of each pending publish, by tag
	hist    *latencyHist // publish-to-confirm latencies
	mask    uint64
	window  uint64
	next    uint64 // the tag of the next publish; tags start at 1
	low     uint64 // the lowest unsettled tag, next if none
	waiting bool   // the producer waits for wake
	wake    chan struct{}
	acked   *atomic.Uint64
	nacked  *atomic.Uint64
}

func newRawConfirms(window int, acked, nacked *atomic.Uint64, hist *latencyHist) *rawConfirms {
	n := 1
	for n < window {
		n <<= 1
	}
	return &rawConfirms{
		pending: make([]bool, n), sentAt: make([]int64, n), hist: hist, mask: uint64(n - 1), window: uint64(window),
		next: 1, low: 1, wake: make(chan struct{}, 1), acked: acked, nacked: nacked,
	}
}

// reserve takes the next tag, for a publish sent at now (UnixNano), if
// the window allows; otherwise the caller waits for wake.
func (k *rawConfirms) reserve(now int64) bool {
	k.mu.Lock()
	ok := k.next-k.low < k.window
	if ok {
		k.pending[k.next&k.mask] = true
		k.sentAt[k.next&k.mask] = now
		k.next++
	} else {
		k.waiting = true
	}
	k.mu.Unlock()
	return ok
}

// settled reports whether every publish is confirmed; otherwise the caller
// waits for wake.
func (k *rawConfirms) settled() bool {
	k.mu.Lock()
	ok := k.low == k.next
	k.waiting = !ok
	k.mu.Unlock()
	return ok
}

// settle applies a basic.ack or basic.nack from the broker.
func (k *rawConfirms) settle(tag uint64, multiple, ack bool) {
	var n uint64
	now := time.Now().UnixNano()
	k.mu.Lock()
	if tag >= k.low && tag < k.next {
		if multiple {
			for t := k.low; t <= tag; t++ {
				if k.pending[t&k.mask] {
					k.pending[t&k.mask] = false
					k.hist.record(now - k.sentAt[t&k.mask])
					n++
				}
			}
		} else if k.pending[tag&k.mask] {
			k.pending[tag&k.mask] = false
			k.hist.record(now - k.sentAt[tag&k.mask])
			n = 1
		}
		for k.low < k.next && !k.pending[k.low&k.mask] {
			k.low++
		}
	}
	wake := k.waiting && n > 0
	if wake {
		k.waiting = false
	}
	k.mu.Unlock()
	if ack {
		k.acked.Add(n)
	} else {
		k.nacked.Add(n)
	}
	if wake {
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
}

// rawMessage builds the frames of one publish of cfg.Size bytes on channel
// ch and returns them with the offset of the body in them.
func rawMessage(ch uint16, exchange string, route benchRoute, cfg *benchConfig, frameMax uint32) ([]byte, int, error) {
	if len(exchange) > wire.MaxShortstrLen || len(route.key) > wire.MaxShortstrLen {
		return nil, 0, fmt.Errorf("exchange %q or routing key %q longer than %d bytes", exchange, route.key, wire.MaxShortstrLen)
	}
	props := wire.Properties{DeliveryMode: 1, Headers: wire.Table(route.headers)}
	if cfg.Persistent {
		props.DeliveryMode = 2
	}
	if err := props.Headers.Validate(); err != nil {
		return nil, 0, err
	}
	b := wire.AppendMethodFrame(nil, ch, &wire.BasicPublish{Exchange: exchange, RoutingKey: route.key})
	b = wire.AppendHeaderFrame(b, ch, wire.ClassBasic, uint64(cfg.Size), &props)
	off := len(b) + wire.FrameHeaderSize
	return wire.AppendBodyFrames(b, ch, make([]byte, cfg.Size), frameMax), off, nil
}

// rawClient runs the producers and consumers of a benchRun on rawConns.
type rawClient struct {
	r     *benchRun
	conns []*rawConn
}

func (rc *rawClient) open() (int, error) {
	r, cfg := rc.r, rc.r.cfg
	workers := cfg.Producers + cfg.Consumers
	n := cfg.Connections
	if n == 0 || n > workers {
		n = workers
	}
	consumerConns := min(cfg.Consumers, n)
	readBuf := min(rawReadBuf, max(32<<10, rawReadBufTotal/max(consumerConns, 1)))
	for i := range n {
		size := rawReadBufSmall
		for w := i; w < workers; w += n {
			if w >= cfg.Producers {
				size = readBuf
			}
		}
		c, err := rawDial(cfg.workerURI(i), fmt.Sprintf("warren-bench-%d", i), size)
		if err != nil {
			return len(rc.conns), fmt.Errorf("connect: %w", err)
		}
		rc.conns = append(rc.conns, c)
	}
	for w := range workers {
		c := rc.conns[w%n]
		ch, err := c.openChannel()
		if err != nil {
			return n, fmt.Errorf("open channel: %w", err)
		}
		if w < cfg.Producers {
			p := &benchProducer{raw: ch, route: r.topo.routes[w]}
			if cfg.Confirm > 0 {
				if _, err := c.call(ch, &wire.ConfirmSelect{}); err != nil {
					return n, fmt.Errorf("confirm.select: %w", err)
				}
				ch.confirms = newRawConfirms(cfg.Confirm, &p.confirmed, &p.nacked, &p.confirmHist)
			}
			if p.rawMsg, p.rawBody, err = rawMessage(ch.id, r.topo.exchange, p.route, cfg, c.frameMax); err != nil {
				return n, err
			}
			r.producers = append(r.producers, p)
			continue
		}
		if cfg.Prefetch > 0 {
			if _, err := c.call(ch, &wire.BasicQos{PrefetchCount: uint16(cfg.Prefetch)}); err != nil {
				return n, fmt.Errorf("basic.qos: %w", err)
			}
		}
		q := r.topo.queues[(w-cfg.Producers)%len(r.topo.queues)]
		r.consumers = append(r.consumers, &benchConsumer{raw: ch, queue: q})
	}
	return n, nil
}

// consume starts the consumers, then a reader per connection (into wg).
func (rc *rawClient) consume(wg *sync.WaitGroup) error {
	r := rc.r
	for _, k := range r.consumers {
		ch := k.raw
		ch.cons, ch.autoAck, ch.multiAck = k, r.cfg.AutoAck, r.cfg.MultiAck
		if _, err := ch.c.call(ch, &wire.BasicConsume{Queue: k.queue, NoAck: r.cfg.AutoAck, Arguments: wire.Table(r.cfg.ConsumerArgs)}); err != nil {
			return fmt.Errorf("consume %q: %w", k.queue, err)
		}
		ch.lost = func(err error) {
			if !r.consumersDone.Load() {
				r.fail(fmt.Errorf("consumer of %q: %w", k.queue, err))
			}
		}
	}
	for _, c := range rc.conns {
		c.started = true
		wg.Go(c.readLoop)
	}
	return nil
}

// produce publishes until stopped or PMessages are sent, then collects the
// outstanding confirms for up to 5 s.
func (rc *rawClient) produce(p *benchProducer) {
	r, cfg := rc.r, rc.r.cfg
	defer r.producerDone()
	ch := p.raw
	c, k, msg, off := ch.c, ch.confirms, p.rawMsg, p.rawBody
	fail := func(err error) {
		if !r.forced.Load() {
			r.fail(fmt.Errorf("publish: %w", err))
		}
	}
	var pace *time.Timer
	if cfg.Rate > 0 {
		pace = time.NewTimer(time.Hour)
		defer pace.Stop()
	}
	start := time.Now()
	var seq uint64
loop:
	for !r.stopping.Load() && (cfg.PMessages == 0 || seq < uint64(cfg.PMessages)) {
		if pace != nil {
			due := start.Add(time.Duration(float64(seq) * float64(time.Second) / cfg.Rate))
			if d := time.Until(due); d > 0 {
				if err := c.flush(); err != nil {
					fail(err)
					return
				}
				pace.Reset(d)
				select {
				case <-pace.C:
				case <-r.stopProducers:
					break loop
				}
			}
		}
		now := time.Now().UnixNano()
		for k != nil && !k.reserve(now) {
			if err := c.flush(); err != nil {
				fail(err)
				return
			}
			select {
			case <-k.wake:
			case <-r.stopProducers:
				break loop
			case <-ch.closedC:
				fail(ch.err)
				return
			}
			now = time.Now().UnixNano()
		}
		binary.BigEndian.PutUint64(msg[off:], uint64(now))
		binary.BigEndian.PutUint64(msg[off+8:], seq)
		if err := c.publish(ch, msg, now); err != nil {
			fail(err)
			return
		}
		seq++
		p.sent.Add(1)
	}
	if err := c.flush(); err != nil {
		fail(err)
		return
	}
	if k == nil {
		return
	}
	grace := time.NewTimer(5 * time.Second)
	defer grace.Stop()
	for !k.settled() {
		select {
		case <-k.wake:
		case <-grace.C:
			return
		case <-ch.closedC:
			return
		}
	}
}

// barrier sends basic.qos (harmless on a channel that does not consume) on
// every producer channel and waits for the qos-ok, which the broker sends
// after handling the publishes before it.
func (rc *rawClient) barrier() {
	timeout := time.NewTimer(benchBarrierTimeout)
	defer timeout.Stop()
	var waiting []*rawChannel
	for _, p := range rc.r.producers {
		ch := p.raw
		if ch == nil || ch.closed.Load() {
			continue
		}
		if ch.c.send(ch, &wire.BasicQos{}) != nil || ch.c.flush() != nil {
			continue
		}
		waiting = append(waiting, ch)
	}
	for _, ch := range waiting {
		select {
		case <-ch.synced:
		case <-ch.closedC:
		case <-timeout.C:
			return
		}
	}
}

// abort fails the sockets under producers stuck in a write.
func (rc *rawClient) abort() {
	for _, c := range rc.conns {
		_ = c.nc.SetDeadline(time.Now())
	}
}

// stopConsumers closes every connection and waits for the readers (in
// wg), for up to rawCloseTimeout before it shuts the sockets.
func (rc *rawClient) stopConsumers(wg *sync.WaitGroup) {
	rc.r.consumersDone.Store(true)
	for _, c := range rc.conns {
		c.close()
	}
	if !waitGroupTimeout(wg, rawCloseTimeout) {
		for _, c := range rc.conns {
			c.shutdown()
		}
		wg.Wait()
	}
}

func (rc *rawClient) close() {
	for _, c := range rc.conns {
		c.shutdown()
		if c.started {
			<-c.done
		}
		c.bg.Wait()
	}
}
