package broker

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// maxSpare is the largest write buffer a connection keeps for reuse.
const maxSpare = 8 << 20

// bigBody is the body size from which a delivery's body is written from
// the message itself (vectored write) instead of being copied into the
// outbound buffer.
const bigBody = 2 << 10

// outbound is a connection's queue of bytes to write, filled by any
// goroutine (under mu) and drained by the connection's writer goroutine.
type outbound struct {
	mu sync.Mutex
	// buf collects small frames; segs holds earlier pieces when large
	// bodies are referenced rather than copied.
	buf  []byte
	segs net.Buffers
	// pending counts bytes in buf and segs; read without mu by credit
	// checks.
	pending atomic.Int64
	// reserved counts bytes promised to deliveries a queue is handing out
	// but has not appended yet (see consumer.Acquire).
	reserved atomic.Int64
	closed   bool

	// limit is the level of pending at which readers that add to the
	// buffer wait for the writer (holdForOutbound, routeReply): twice the
	// connection's cap, so that deliveries, which stop at the cap, do not
	// hold the connection's reader (0: none).
	limit int64
	// drained, made by a waiter under mu, is closed by the writer once
	// pending is at most limit; waiting tells the writer to look.
	drained chan struct{}
	waiting atomic.Bool

	signal chan struct{}
	// spare is the writer's previous buffer, reused for the next batch.
	spare []byte
	// lastWrite is the time of the last write (whoever runs conn.flush:
	// the reader during the handshake, then the writer).
	lastWrite time.Time
}

func newOutbound(limit int64) *outbound {
	return &outbound{signal: make(chan struct{}, 1), limit: limit}
}

// over reports whether pending is over limit: the reader of the
// connection, and others delivering to it directly, wait (drainedChan).
func (o *outbound) over() bool { return o.limit > 0 && o.pending.Load() > o.limit }

// drainedChan returns a channel the writer closes once pending is at most
// limit, or nil when it is already. Any goroutine, no lock held.
func (o *outbound) drainedChan() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	// waiting before pending is read, the writer's order reversed: either
	// this sees the writer's progress or the writer sees waiting.
	o.waiting.Store(true)
	if o.closed || !o.over() {
		return nil
	}
	if o.drained == nil {
		o.drained = make(chan struct{})
	}
	return o.drained
}

// wakeDrained closes drained when pending is at most limit or the buffer
// is closed (force: the writer is done). Writer goroutine, after a write.
func (o *outbound) wakeDrained(force bool) {
	if !o.waiting.Load() {
		return
	}
	o.mu.Lock()
	if force || o.closed || !o.over() {
		o.waiting.Store(false)
		if o.drained != nil {
			close(o.drained)
			o.drained = nil
		}
	}
	o.mu.Unlock()
}

// wake tells the writer there is something to write.
func (o *outbound) wake() {
	select {
	case o.signal <- struct{}{}:
	default:
	}
}

// lock locks the buffer for appending; unlock publishes what was appended.
// Append with o.buf = append(o.buf, ...) between the two, or appendBody.
func (o *outbound) lock() { o.mu.Lock() }

func (o *outbound) unlock(added int) {
	o.mu.Unlock()
	if added > 0 {
		o.pending.Add(int64(added))
	}
}

// appendRef adds body as a segment of its own, after what buf holds so
// far. Hold mu.
func (o *outbound) appendRefLocked(body []byte) {
	if len(o.buf) > 0 {
		o.segs = append(o.segs, o.buf)
		o.buf = nil
	}
	o.segs = append(o.segs, body)
}

// take hands the writer everything pending. Hold nothing.
func (o *outbound) take() (net.Buffers, []byte, bool) {
	o.mu.Lock()
	segs, buf, closed := o.segs, o.buf, o.closed
	o.segs = nil
	o.buf = o.spare[:0]
	o.spare = nil
	o.mu.Unlock()
	return segs, buf, closed
}

// recycle returns a written buffer for reuse, so that a busy connection
// does not grow a new buffer for every batch. Writer goroutine.
func (o *outbound) recycle(buf []byte) {
	if cap(buf) > maxSpare {
		return
	}
	o.mu.Lock()
	if o.spare == nil {
		o.spare = buf[:0]
	}
	o.mu.Unlock()
}

// dropSpare lets an idle connection's spare buffer go when it is large.
// Writer goroutine.
func (o *outbound) dropSpare() {
	o.mu.Lock()
	if cap(o.spare) > 64<<10 {
		o.spare = nil
	}
	o.mu.Unlock()
}

// close makes the writer flush what is pending and stop.
func (o *outbound) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.wake()
}
