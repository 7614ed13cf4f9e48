package broker

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
)

// Version is Warren's own version (the management API's product_version,
// `warren --version`).
var Version = "0.1.0"

// RabbitMQVersion is the RabbitMQ release whose behaviour Warren matches,
// reported where clients and tools read RabbitMQ's version to decide what
// a broker supports: the version of connection.start's server properties
// and the management API's rabbitmq_version. Applications refuse brokers
// they take for too old (some require 3.10 or later), and client test
// suites run their RabbitMQ-specific checks only for product "RabbitMQ".
const RabbitMQVersion = "3.13.7"

// closeTimeout bounds how long a connection waits for connection.close-ok
// after sending connection.close, and how long the writer may block on a
// final write.
const closeTimeout = 3 * time.Second

// lingerTimeout bounds how long a connection that this side ended keeps
// reading (and discarding) after its last write; see lingerClose.
const lingerTimeout = time.Second

// conn is one client connection. Its reader goroutine (serve) owns every
// field without a comment saying otherwise.
type conn struct {
	b   *Broker
	nc  net.Conn
	log connLog
	id  uint64
	// name is RabbitMQ's name of the connection (connName; immutable).
	name string
	// connectedAt is when the connection was accepted (immutable).
	connectedAt time.Time

	rd  deadlineReader
	fr  *amqp.FrameReader
	dec amqp.MethodDecoder
	out *outbound

	channelMax uint16
	frameMax   uint32
	heartbeat  time.Duration
	vhost      *vhost
	user       *user
	// vhostNm and userNm name the vhost and user once the connection is
	// open, for administration; guarded by Broker.mu.
	vhostNm, userNm string
	// openChannels counts the channels in channels, for the user's
	// max-channels (userlimits.go); written by the reader, read by others
	// under Broker.mu.
	openChannels atomic.Int32
	clientProps  amqp.Table

	capCancelNotify bool
	capAuthFailure  bool
	// capBlocked: the client understands connection.blocked.
	capBlocked bool
	// published is set when a publish completes, for throttle to see
	// (flow control blocks a connection after it publishes).
	published bool
	// blocked is set while throttle holds the reader (alarm.go).
	blocked atomic.Bool
	// closeSig is closed when this side sends connection.close.
	closeSig chan struct{}
	// certUser is the common name of the client's verified TLS
	// certificate, for SASL EXTERNAL (tls.go).
	certUser string

	channels map[uint16]*channel
	// confirmDirty lists channels with confirms to send at the end of the
	// current read batch.
	confirmDirty []*channel
	// batch holds publishes to many queues for one enqueue (batch.go).
	batch routeBatch
	// exclusive lists the exclusive queues this connection declared.
	exclusive []*queueEntity

	// closeNote, sentClose (the connection.close this side sent) and
	// missedHeartbeats say how the connection ended, for its log line.
	closeNote        closeNote
	sentClose        atomic.Pointer[amqp.Error]
	missedHeartbeats atomic.Bool

	// closing is set once either side sent connection.close; after that
	// only close and close-ok are processed.
	closing atomic.Bool
	// opened is set once connection.open-ok went out. Before that a
	// broker shutdown drops the socket without a connection.close, as
	// RabbitMQ does.
	opened atomic.Bool

	// direct is set from newConn until the writer goroutine starts
	// (connection open). Meanwhile the reader is the only goroutine that
	// sends, and send writes to the socket itself: a handshake reply
	// costs no goroutine switch and the handshake no second goroutine.
	// (The management API's socketless conns never set it.)
	direct     atomic.Bool
	writerDone chan struct{}
	// lastRead is the time of the last read (unix nanoseconds).
	lastRead atomic.Int64

	// asyncMu guards asyncConfirms: channels whose journal writes
	// completed, for the writer to confirm.
	asyncMu       sync.Mutex
	asyncConfirms []*channel

	// flowTimer bounds a wait of queue flow control (reader only).
	flowTimer *time.Timer

	// outHeld is set while the reader waits for the writer to drain the
	// outbound buffer (holdForOutbound).
	outHeld atomic.Bool

	starvedMu sync.Mutex
	starved   []*consumer
}

// deadlineReader sets a read deadline before each read of the socket, so
// that a silent peer (handshake timeout, missed heartbeats, no answer to
// connection.close) ends the read.
type deadlineReader struct {
	nc net.Conn
	// timeout bounds each read (nanoseconds; 0 = none): twice the
	// heartbeat once the connection is open.
	timeout atomic.Int64
	// until is an absolute deadline (unix nanoseconds; 0 = none): the end
	// of the handshake, or of the wait for connection.close-ok. The reader
	// sets it during the handshake; sendClose may set it from any
	// goroutine, storing it before it sets the socket's deadline.
	until atomic.Int64
	last  *atomic.Int64
	// octets counts the socket's bytes and calls: Read the recv ones,
	// the writer (flush) the send ones.
	octets octets
}

func (r *deadlineReader) Read(p []byte) (int, error) {
	now := time.Now()
	u := r.until.Load()
	var d int64
	if t := r.timeout.Load(); t > 0 {
		d = now.UnixNano() + t
	}
	if u != 0 && (d == 0 || u < d) {
		d = u
	}
	if d != 0 {
		_ = r.nc.SetReadDeadline(time.Unix(0, d))
		// A sendClose that stored until after our load may have set its
		// deadline before ours: set the earlier one again.
		if u2 := r.until.Load(); u2 != u && u2 != 0 && u2 < d {
			_ = r.nc.SetReadDeadline(time.Unix(0, u2))
		}
	}
	n, err := r.nc.Read(p)
	if n > 0 {
		r.last.Store(now.UnixNano())
		r.octets.recvOct.Add(uint64(n))
		r.octets.recvCnt.Add(1)
	}
	return n, err
}

func newConn(b *Broker, nc net.Conn) *conn {
	c := &conn{
		b:          b,
		nc:         nc,
		id:         b.nextID.Add(1),
		out:        newOutbound(2 * int64(b.cfg.OutboundCap)),
		channels:   make(map[uint16]*channel),
		writerDone: make(chan struct{}),
		frameMax:   b.cfg.FrameMax,
		channelMax: b.cfg.ChannelMax,
	}
	c.connectedAt = time.Now()
	c.direct.Store(true)
	c.closeSig = make(chan struct{})
	c.log = connLog{base: b.connLog, id: c.id, peer: nc.RemoteAddr()}
	c.name = nameConn(nc)
	c.rd.nc = nc
	c.rd.last = &c.lastRead
	c.fr = amqp.NewFrameReader(&c.rd, 4096)
	c.dec.MaxTableDepth = b.cfg.MaxTableDepth
	// Until connection.tune-ok, frames are limited to the spec's minimum
	// frame-max (RabbitMQ's initial_frame_max), with RabbitMQ's allowance.
	c.fr.SetMaxFrameSize(amqp.FrameMinSize + frameSizeFudge)
	return c
}

// frameSizeFudge is how far RabbitMQ lets a frame exceed frame-max ("quite
// a few [clients] get it wrong - off-by 1 or 8"): its payload may be as
// large as frame-max itself.
const frameSizeFudge = amqp.FrameOverhead

// serve runs the connection until it ends. It is the reader goroutine;
// the handshake starts the writer (startWriter).
func (c *conn) serve() {
	err := c.runRecovered()
	c.teardownRecovered(endedByUs(err))
	c.logClosed(err)
}

// run runs the handshake, then reads and handles frames until the
// connection ends. It returns what ended it: nil after an orderly close.
func (c *conn) run() error {
	if err := c.handshake(); err != nil {
		return c.fail(err)
	}
	for {
		c.throttle()
		if c.out.over() {
			c.holdForOutbound()
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			return c.fail(err)
		}
		if c.closing.Load() {
			if c.handleWhileClosing(f) {
				return nil
			}
			continue
		}
		if err := c.handleFrame(f); err != nil {
			if errors.Is(err, errConnClosed) {
				return nil
			}
			return c.fail(err)
		}
		if c.fr.Buffered() == 0 {
			c.flushConfirms()
		}
	}
}

// errConnClosed ends the reader after an orderly close, or after a
// refused protocol header.
var errConnClosed = errors.New("broker: connection closed")

// silentError is a protocol error that closes the connection without a
// connection.close: RabbitMQ answers most failures before the handshake
// reaches connection.open that way.
type silentError struct{ err *amqp.Error }

func (e *silentError) Error() string { return e.err.Error() }
func (e *silentError) Unwrap() error { return e.err }

// silent marks a protocol error as one to close the connection for without
// telling the peer. Other errors are returned as they are.
func silent(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return &silentError{ae}
	}
	return err
}

// fail reports err to the peer when it is a protocol error and, when a
// connection.close went out, waits for the peer's answer. It returns the
// error that ended the connection.
func (c *conn) fail(err error) error {
	// Publishes read before the failure were taken: enqueue them.
	c.flushRoutes()
	// As RabbitMQ, the channels (and exclusive queues) go before the
	// connection.close: a client told of the failure finds them gone
	// (a user's max-channels counts them no more).
	var ae0 *amqp.Error
	if errors.As(err, &ae0) {
		c.release()
	}
	c.handleErr(err)
	if !c.closing.Load() {
		return err
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.FrameError {
		// The stream is out of sync: nothing more can be read from it.
		return err
	}
	return c.drainUntilCloseOk()
}

// endedByUs reports whether the connection ended by this side's decision
// (an orderly close, a protocol error) rather than by the socket failing.
func endedByUs(err error) bool {
	var ae *amqp.Error
	return err == nil || errors.As(err, &ae) || errors.Is(err, errConnClosed)
}

// handleErr reports err to the peer when it is a protocol error.
func (c *conn) handleErr(err error) {
	var se *silentError
	if errors.As(err, &se) {
		c.log.Info("closing connection during handshake", zap.Uint16("reply-code", se.err.Code), zap.String("reply-text", se.err.Text))
		return
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		c.log.Info("closing connection", zap.Uint16("reply-code", ae.Code), zap.String("reply-text", ae.Text))
		c.sendClose(ae)
		return
	}
	if errors.Is(err, errConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded) {
		c.log.Debug("connection ended", zap.Error(err))
		return
	}
	c.log.Debug("connection failed", zap.Error(err))
}

// sendClose sends connection.close once; later calls do nothing. Any
// goroutine.
func (c *conn) sendClose(ae *amqp.Error) {
	if !c.closing.CompareAndSwap(false, true) {
		return
	}
	c.sentClose.Store(ae)
	close(c.closeSig)
	c.send(0, ae.ConnectionClose())
	d := time.Now().Add(closeTimeout)
	c.rd.until.Store(d.UnixNano())
	_ = c.nc.SetReadDeadline(d)
}

// forceClose is the broker's shutdown of this connection; any goroutine.
// An open connection gets connection.close 320 CONNECTION_FORCED; one
// still in its handshake is dropped, as RabbitMQ drops it.
func (c *conn) forceClose(reason string) {
	if !c.opened.Load() {
		_ = c.nc.Close()
		return
	}
	c.sendClose(amqp.Errorf(amqp.ConnectionForced, 0, 0, "%s", reason))
}

// drainUntilCloseOk reads until the peer answers connection.close or the
// close timeout passes; it returns the read error in the second case.
func (c *conn) drainUntilCloseOk() error {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return err
		}
		if c.handleWhileClosing(f) {
			return nil
		}
	}
}

// handleWhileClosing processes a frame after connection.close was sent and
// reports whether the connection is done.
func (c *conn) handleWhileClosing(f amqp.Frame) bool {
	if f.Type != amqp.FrameMethod || f.Channel != 0 {
		return false
	}
	m, err := c.dec.Decode(f.Payload)
	if err != nil {
		return true
	}
	switch m.(type) {
	case *amqp.ConnectionCloseOk:
		return true
	case *amqp.ConnectionClose:
		c.send(0, &amqp.ConnectionCloseOk{})
		return true
	}
	return false
}

// send appends one method frame to the outbound buffer. Before the writer
// runs (during the handshake) the reader writes it out at once.
func (c *conn) send(channel uint16, m amqp.Method) {
	o := c.out
	o.lock()
	was := len(o.buf) + len(o.segs)
	start := len(o.buf)
	o.buf = amqp.AppendMethodFrame(o.buf, channel, m)
	o.unlock(len(o.buf) - start)
	if c.direct.Load() {
		c.flush()
		return
	}
	if was == 0 {
		o.wake()
	}
}

// startWriter starts the writer goroutine, which sends heartbeats every
// half heartbeat interval (none when it is 0). Reader goroutine, once.
func (c *conn) startWriter(heartbeat time.Duration) {
	_ = c.nc.SetWriteDeadline(time.Time{})
	c.direct.Store(false)
	go c.writeLoop(heartbeat)
}

// teardown releases everything the connection holds. linger asks for
// lingerClose rather than an abrupt close of the socket.
func (c *conn) teardown(linger bool) {
	c.release()
	_ = c.nc.SetWriteDeadline(time.Now().Add(closeTimeout))
	c.out.close()
	if !c.direct.Load() {
		<-c.writerDone
	} else {
		// The handshake did not finish: no writer ever ran.
		c.flush()
		close(c.writerDone)
	}
	if linger {
		c.lingerClose()
		return
	}
	_ = c.nc.Close()
}

// release shuts the connection's channels down and deletes its exclusive
// queues. Reader goroutine (or teardown after it).
func (c *conn) release() {
	for id, ch := range c.channels {
		ch.shutdown()
		delete(c.channels, id)
		c.openChannels.Add(-1)
	}
	for _, qe := range c.exclusive {
		_, _ = qe.vhost.removeQueue(qe, false, false, true)
	}
	c.exclusive = nil
}

// lingerClose closes the socket after the writer's last write: it sends
// FIN, then reads and discards what the peer still sends until the peer
// closes or lingerTimeout passes. Closing a socket with unread input makes
// the kernel send a reset, which can destroy the connection.close (or
// protocol header) just written before the peer reads it.
func (c *conn) lingerClose() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = c.nc.SetReadDeadline(time.Now().Add(lingerTimeout))
		var buf [4096]byte
		for {
			if _, err := c.nc.Read(buf[:]); err != nil {
				break
			}
		}
	}
	_ = c.nc.Close()
}

// writeLoop is the writer goroutine: it writes what is appended to the
// outbound buffer, sends heartbeats every hb/2 (none when hb is 0), and
// detects missed ones.
func (c *conn) writeLoop(hb time.Duration) {
	defer close(c.writerDone)
	defer c.out.wakeDrained(true)
	defer func() {
		if r := recover(); r != nil {
			c.writerPanicked(r)
		}
	}()
	o := c.out
	var tick <-chan time.Time
	if hb > 0 {
		ticker := time.NewTicker(hb / 2)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		select {
		case <-o.signal:
		case now := <-tick:
			if !c.blocked.Load() && !c.outHeld.Load() && now.Sub(time.Unix(0, c.lastRead.Load())) > 2*hb {
				c.log.Info("missed heartbeats from client, closing connection", zap.Duration("timeout", 2*hb))
				c.missedHeartbeats.Store(true)
				_ = c.nc.Close()
				continue
			}
			if now.Sub(o.lastWrite) >= hb/2 {
				// Idle: let a large spare buffer go, then send a heartbeat.
				o.dropSpare()
				o.lock()
				start := len(o.buf)
				o.buf = amqp.AppendHeartbeat(o.buf)
				o.unlock(len(o.buf) - start)
			}
		}
		if h := testWriteHook.Load(); h != nil {
			name, _ := c.clientProps["connection_name"].(string)
			(*h)(name)
		}
		c.flushAsyncConfirms()
		if c.flush() {
			return
		}
		c.out.wakeDrained(false)
		c.kickStarved()
	}
}

// holdForOutbound stops reading the connection while its outbound buffer
// is over its limit (twice Config.OutboundCap), until the writer drains it
// or the connection closes: whatever the peer asks for (basic.get,
// mandatory publishes coming back, confirms, declare-oks) is answered into
// that buffer, so a peer that does not read its answers is slowed by TCP
// backpressure instead of growing it. Consumer deliveries stop at the cap
// by themselves (consumer.Acquire). Reader goroutine, no lock held.
func (c *conn) holdForOutbound() {
	c.flushConfirms()
	c.outHeld.Store(true)
	for {
		d := c.out.drainedChan()
		if d == nil {
			break
		}
		select {
		case <-d:
			continue
		case <-c.closeSig:
		case <-c.writerDone:
		}
		break
	}
	c.outHeld.Store(false)
	// The peer's heartbeats went unread meanwhile.
	c.lastRead.Store(time.Now().UnixNano())
}

// flush writes everything pending in the outbound buffer and reports
// whether the writing is over: the buffer was closed, or a write failed
// (which closes the socket). The writer goroutine calls it, or the reader
// before the writer runs.
func (c *conn) flush() bool {
	o := c.out
	segs, buf, closed := o.take()
	n := len(buf)
	for _, s := range segs {
		n += len(s)
	}
	if n > 0 {
		var err error
		if len(segs) > 0 {
			if len(buf) > 0 {
				segs = append(segs, buf)
			}
			_, err = segs.WriteTo(c.nc)
		} else {
			_, err = c.nc.Write(buf)
		}
		o.pending.Add(-int64(n))
		c.rd.octets.sendOct.Add(uint64(n))
		c.rd.octets.sendCnt.Add(1)
		o.lastWrite = time.Now()
		if err != nil {
			_ = c.nc.Close()
			o.mu.Lock()
			o.closed = true
			o.mu.Unlock()
			return true
		}
	}
	o.recycle(buf)
	return closed
}

// starve records that cons was refused a delivery by a connection- or
// channel-wide limit; kickStarved retries it once there is room.
func (c *conn) starve(cons *consumer) {
	c.starvedMu.Lock()
	if !cons.starved {
		cons.starved = true
		c.starved = append(c.starved, cons)
	}
	c.starvedMu.Unlock()
	// The limit may have lifted between the check and now: let the writer
	// look again.
	c.out.wake()
}

// kickStarved dispatches again to every starved consumer whose limits have
// lifted. Call with no lock held.
func (c *conn) kickStarved() {
	c.starvedMu.Lock()
	if len(c.starved) == 0 {
		c.starvedMu.Unlock()
		return
	}
	if c.out.pending.Load() > int64(c.b.cfg.OutboundCap) {
		c.starvedMu.Unlock()
		return
	}
	list := c.starved
	c.starved = nil
	for _, cons := range list {
		cons.starved = false
	}
	c.starvedMu.Unlock()
	for _, cons := range list {
		cons.qe.dispatch()
	}
}

// flushConfirms sends the publisher confirms gathered during the read
// batch, one basic.ack per channel covering all of them.
func (c *conn) flushConfirms() {
	c.flushRoutes()
	for i, ch := range c.confirmDirty {
		ch.flushConfirms()
		c.confirmDirty[i] = nil
	}
	c.confirmDirty = c.confirmDirty[:0]
}
