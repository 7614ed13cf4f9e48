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

	signal chan struct{}
	// spare is the writer's previous buffer, reused for the next batch.
	spare []byte
	// lastWrite is the time of the last write (whoever runs conn.flush:
	// the reader during the handshake, then the writer).
	lastWrite time.Time
}

func newOutbound() *outbound {
	return &outbound{signal: make(chan struct{}, 1)}
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
