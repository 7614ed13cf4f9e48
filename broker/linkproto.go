package broker

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// The node link's framing (Config.Link). A link stream carries frames
//
//	length(4, big-endian: type and payload) | type(1) | payload
//
// whose payload is a sequence of fields: integers as uvarints, strings and
// byte slices as a uvarint length and the bytes, flags as one byte. The
// node that opened the stream sends requests (publish, consume, cancel,
// settle, get, status, purge); the queue's home node answers with replies
// (one per request that carries a request id), deliveries and
// cancellations. Frames are appended to the stream's linkWriter under its
// lock and written by its goroutine, many per write.

// Frame types.
const (
	// lkPublish: req, qid, vhost, queue, exchange, routing key, header,
	// body. req 0 asks for no reply; otherwise the reply (code 0 = taken,
	// committed if durable) is the publish's confirm.
	lkPublish byte = 'P'
	// lkConsume: handle (the request id), qid, vhost, queue, tag,
	// flags (1 no-ack, 2 exclusive), prefetch, priority (zigzag).
	lkConsume byte = 'C'
	// lkCancel: handle.
	lkCancel byte = 'X'
	// lkSettle: op (linkSettle, linkReturn, linkDiscard), qid, vhost,
	// queue, count, seqs.
	lkSettle byte = 'S'
	// lkGet: req, qid, vhost, queue, no-ack.
	lkGet byte = 'G'
	// lkStatus: req, qid, vhost, queue; the reply's a and b are the
	// queue's ready messages and consumers.
	lkStatus byte = 'Q'
	// lkPurge: req, qid, vhost, queue; the reply's a is the count.
	lkPurge byte = 'U'
	// lkReply: req, code (0 = ok, else an AMQP reply code), text, a, b,
	// then for a get that found a message: seq, redelivered, exchange,
	// routing key, header, body.
	lkReply byte = 'R'
	// lkDeliver: handle, seq, redelivered, exchange, routing key, header,
	// body.
	lkDeliver byte = 'D'
	// lkCancelled: handle: the home node ended the consumer (its queue
	// was deleted).
	lkCancelled byte = 'K'
	// lkStreamRead: req, group, vhost, queue, id, from, limit: read the
	// chunks of replicated stream {vhost, queue, id} of data group group
	// from the chunk starting at from, below limit, from the
	// answering member's store (streamcatchup.go). Answered by
	// lkStreamData.
	lkStreamRead byte = 'F'
	// lkStreamData: req, code (0 = ok, else an AMQP reply code), end (the
	// offset after the last chunk read), the answering replica's committed
	// and stored offsets, count, then per message: offset, exchange,
	// routing key, header, body, filter value. A read with limit 0 asks
	// for the offsets only (/api/queues).
	lkStreamData byte = 'H'
)

// Settle operations of lkSettle.
const (
	linkSettle byte = iota + 1
	linkReturn
	linkDiscard
)

// Flow control: a link's writer holds at most linkMax bytes not yet
// written; over linkHigh publishers are held back (flow control, as for a
// deep queue) and the home node's link consumers get no credit until it
// drains below linkLow.
const (
	linkHigh = 4 << 20
	linkLow  = 1 << 20
	linkMax  = 64 << 20
	// linkFrameOverhead bounds what a frame adds to a message's header and
	// body (names, ids, lengths).
	linkFrameOverhead = 4 << 10
)

var (
	// errLinkDown is a request to a node whose link is down.
	errLinkDown = errors.New("broker: node link down")
	// errLinkFrame is a malformed link frame.
	errLinkFrame = errors.New("broker: malformed node link frame")
)

// linkWriter batches the frames of one link stream: appenders add frames to
// buf under mu, its goroutine (run) writes what has gathered in one write.
type linkWriter struct {
	conn net.Conn

	// mu is a leaf lock.
	mu     sync.Mutex
	buf    []byte
	spare  []byte
	closed bool
	// drained is closed once buf falls below linkLow (publishers held by
	// flow control wait on it); nil when nobody waits.
	drained chan struct{}
	// starved are the link consumers refused credit while buf was over
	// linkHigh; run dispatches to their queues again once it drains.
	starved []*consumer

	wake chan struct{} // cap 1
	done chan struct{} // closed when run returns
}

func newLinkWriter(conn net.Conn) *linkWriter {
	return &linkWriter{conn: conn, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// begin starts a frame of type t: it locks w and returns the buffer with
// the frame's length and type; end finishes it. It returns false, with w
// unlocked, when w is closed or over linkMax.
func (w *linkWriter) begin(t byte) (int, bool) {
	w.mu.Lock()
	if w.closed || len(w.buf) > linkMax {
		w.mu.Unlock()
		return 0, false
	}
	start := len(w.buf)
	w.buf = append(w.buf, 0, 0, 0, 0, t)
	return start, true
}

// end patches the length of the frame begun at start, unlocks w and wakes
// its goroutine. It returns the channel to wait on when w is over linkHigh
// (flow control), else nil.
func (w *linkWriter) end(start int) chan struct{} {
	binary.BigEndian.PutUint32(w.buf[start:], uint32(len(w.buf)-start-4))
	var hold chan struct{}
	if len(w.buf) > linkHigh {
		if w.drained == nil {
			w.drained = make(chan struct{})
		}
		hold = w.drained
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return hold
}

// over reports whether w holds more than linkHigh bytes; if so cons is
// recorded to be dispatched again once it drains.
func (w *linkWriter) over(cons *consumer) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) <= linkHigh || w.closed {
		return w.closed
	}
	w.starved = append(w.starved, cons)
	return true
}

// run writes the gathered frames until the stream fails or w is closed.
func (w *linkWriter) run() {
	defer close(w.done)
	for {
		w.mu.Lock()
		for len(w.buf) == 0 && !w.closed {
			w.mu.Unlock()
			<-w.wake
			w.mu.Lock()
		}
		if w.closed {
			w.mu.Unlock()
			return
		}
		out := w.buf
		w.buf, w.spare = w.spare[:0], nil
		w.mu.Unlock()
		_, err := w.conn.Write(out)
		w.mu.Lock()
		if cap(out) <= 2*linkHigh {
			w.spare = out[:0]
		}
		var starved []*consumer
		if len(w.buf) < linkLow {
			if w.drained != nil {
				close(w.drained)
				w.drained = nil
			}
			starved, w.starved = w.starved, nil
		}
		w.mu.Unlock()
		for _, cons := range starved {
			cons.qe.dispatch()
		}
		if err != nil {
			w.close()
			w.conn.Close() // the reader ends too
			return
		}
	}
}

// close stops w; frames not yet written are dropped. Held publishers are
// released.
func (w *linkWriter) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		if w.drained != nil {
			close(w.drained)
			w.drained = nil
		}
		w.starved = nil
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// linkReader reads frames from a link stream.
type linkReader struct {
	r   *bufio.Reader
	buf []byte
	max int
}

func newLinkReader(conn net.Conn, maxMessage uint64) *linkReader {
	return &linkReader{r: bufio.NewReaderSize(conn, 64<<10), max: int(min(maxMessage, 1<<30)) + linkFrameOverhead}
}

// next returns the next frame's type and payload, valid until the next
// call.
func (r *linkReader) next() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n < 1 || n-1 > r.max {
		return 0, nil, fmt.Errorf("%w: length %d", errLinkFrame, n)
	}
	n--
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	p := r.buf[:n]
	if _, err := io.ReadFull(r.r, p); err != nil {
		return 0, nil, err
	}
	if cap(r.buf) > 1<<20 {
		r.buf = nil // a large message's buffer is not kept
	}
	return hdr[4], p, nil
}

// Field appenders.

func appendU(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendS[T string | []byte](b []byte, s T) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendFlag(b []byte, f bool) []byte {
	if f {
		return append(b, 1)
	}
	return append(b, 0)
}

// linkDecoder reads fields; the first failure sticks in err.
type linkDecoder struct {
	b   []byte
	err error
}

func (d *linkDecoder) u() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errLinkFrame
		return 0
	}
	d.b = d.b[n:]
	return v
}

// raw returns a length-prefixed field, borrowed from the frame.
func (d *linkDecoder) raw() []byte {
	n := d.u()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = errLinkFrame
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *linkDecoder) s() string { return string(d.raw()) }

func (d *linkDecoder) flag() bool {
	if d.err != nil || len(d.b) < 1 {
		d.err = errLinkFrame
		return false
	}
	v := d.b[0] != 0
	d.b = d.b[1:]
	return v
}

func (d *linkDecoder) byte1() byte {
	if d.err != nil || len(d.b) < 1 {
		d.err = errLinkFrame
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// zigzag encodes a signed int as a uvarint.
func zigzag(v int) uint64   { return uint64((int64(v) << 1) ^ (int64(v) >> 63)) }
func unzigzag(u uint64) int { return int(int64(u>>1) ^ -int64(u&1)) }
