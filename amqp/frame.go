package amqp

import (
	"encoding/binary"
	"errors"
	"io"
	"slices"
)

// Frame layout (0-9-1 §2.3.5, §4.2.3): type octet, channel short, payload
// size long, payload, frame-end octet.
const (
	FrameHeaderSize = 7                   // type + channel + size
	FrameOverhead   = FrameHeaderSize + 1 // header + frame-end
)

// ProtocolHeader is what a 0-9-1 client sends first (0-9-1 §4.2.2).
var ProtocolHeader = []byte("AMQP\x00\x00\x09\x01")

const (
	// defaultMaxFrameSize is the hard cap on a frame when no frame-max is
	// set (SetMaxFrameSize(0)): 128 MiB including the overhead.
	defaultMaxFrameSize = 128 << 20
	defaultBufSize      = 64 << 10
	minBufSize          = 512
)

// Frame is one decoded frame. Payload is borrowed from the FrameReader's
// buffer: it is valid only until the next call to ReadFrame.
type Frame struct {
	Type    uint8
	Channel uint16
	Payload []byte
}

// FrameReader reads frames from an io.Reader through one reusable buffer.
// It reads ahead as much as the buffer holds, so several small frames cost
// one Read. The buffer grows for a large frame, by doubling and only as the
// frame's bytes arrive, never beyond the maximum frame size. A FrameReader
// is used by one goroutine.
type FrameReader struct {
	rd   io.Reader
	buf  []byte // buf[r:w] is buffered and not yet returned
	r, w int
	max  uint32 // whole frame size limit, overhead included
	err  error  // pending I/O error, returned once buffered data is used up
	perr error  // protocol error: sticky, the stream is out of sync
}

// NewFrameReader returns a FrameReader on r with an initial buffer of
// bufSize bytes (64 KiB if bufSize <= 0, at least 512) and the default
// maximum frame size (128 MiB). Set the maximum with SetMaxFrameSize: to
// FrameMinSize before connection.tune-ok (0-9-1 §4.2.3), then to the
// negotiated frame-max.
func NewFrameReader(r io.Reader, bufSize int) *FrameReader {
	if bufSize <= 0 {
		bufSize = defaultBufSize
	}
	bufSize = max(bufSize, minBufSize)
	return &FrameReader{rd: r, buf: make([]byte, bufSize), max: defaultMaxFrameSize}
}

// SetMaxFrameSize sets the largest frame accepted, counted as AMQP frame-max
// is: the whole frame including its 8 octets of overhead. 0 restores the
// default hard cap of 128 MiB. The buffer does not shrink.
func (fr *FrameReader) SetMaxFrameSize(n uint32) {
	if n == 0 {
		n = defaultMaxFrameSize
	}
	fr.max = n
}

// Buffered returns the number of bytes read from the underlying reader and
// not yet returned in a frame. A caller that batches its own output can
// flush when this is 0, i.e. when the next ReadFrame would block.
func (fr *FrameReader) Buffered() int { return fr.w - fr.r }

// ReadFrame reads the next frame. Its Payload is valid until the next call.
//
// Errors from the underlying reader are returned as they are (io.EOF at a
// frame boundary; io.ErrUnexpectedEOF when the stream ends inside a frame)
// and ReadFrame may be called again after one. Protocol errors are a 501
// FRAME_ERROR *Error: an unknown frame type, a size above the maximum
// (detected from the 7-octet header, before the payload is read or any
// buffer grown) or a frame-end octet other than 0xCE. After a protocol error
// every call returns the same error.
func (fr *FrameReader) ReadFrame() (Frame, error) {
	if fr.perr != nil {
		return Frame{}, fr.perr
	}
	if fr.r == fr.w {
		fr.r, fr.w = 0, 0
	}
	if err := fr.fill(FrameHeaderSize); err != nil {
		return Frame{}, err
	}
	h := fr.buf[fr.r : fr.r+FrameHeaderSize]
	typ := h[0]
	channel := binary.BigEndian.Uint16(h[1:])
	size := binary.BigEndian.Uint32(h[3:])
	switch typ {
	case FrameMethod, FrameHeader, FrameBody, FrameHeartbeat:
	default:
		fr.perr = errFrame("type %d, first octets = %x", typ, h)
		return Frame{}, fr.perr
	}
	if uint64(size)+FrameOverhead > uint64(fr.max) {
		fr.perr = errFrame("frame size %d exceeds the maximum of %d", uint64(size)+FrameOverhead, fr.max)
		return Frame{}, fr.perr
	}
	total := FrameOverhead + int(size)
	if err := fr.fill(total); err != nil {
		return Frame{}, err
	}
	frame := fr.buf[fr.r : fr.r+total]
	// 0-9-1 §2.3.5: frame-end must be 0xCE.
	if end := frame[total-1]; end != FrameEnd {
		fr.perr = errFrame("frame-end octet %#02x, want 0xce", end)
		return Frame{}, fr.perr
	}
	fr.r += total
	return Frame{Type: typ, Channel: channel, Payload: frame[FrameHeaderSize : total-1 : total-1]}, nil
}

// fill makes sure at least n bytes are buffered, reading as much as the
// buffer holds. n is at most fr.max (checked by the caller), so the buffer
// never grows beyond the maximum frame size (or the initial size).
func (fr *FrameReader) fill(n int) error {
	empty := 0
	for fr.w-fr.r < n {
		if err := fr.err; err != nil {
			fr.err = nil
			if err == io.EOF && fr.w > fr.r {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if fr.w == len(fr.buf) {
			fr.makeRoom(n)
		}
		m, err := fr.rd.Read(fr.buf[fr.w:])
		if m < 0 || m > len(fr.buf)-fr.w {
			return errInvalidRead
		}
		fr.w += m
		switch {
		case err != nil:
			fr.err = err
		case m > 0:
			empty = 0
		default:
			if empty++; empty >= 100 {
				fr.err = io.ErrNoProgress
			}
		}
	}
	return nil
}

// makeRoom frees space at the end of the buffer for a frame of n bytes
// starting at fr.r: it moves the buffered bytes to the front or, when the
// buffer is full of this frame, doubles it (capped at n).
func (fr *FrameReader) makeRoom(n int) {
	if fr.r > 0 {
		copy(fr.buf, fr.buf[fr.r:fr.w])
		fr.w -= fr.r
		fr.r = 0
		return
	}
	grow := min(2*len(fr.buf), n) - len(fr.buf)
	fr.buf = slices.Grow(fr.buf, grow)[:len(fr.buf)+grow]
}

var errInvalidRead = errors.New("amqp: reader returned an invalid count")

// AppendFrame appends a frame with the given type, channel and payload to
// b. The payload must fit in 4 GiB - 1 bytes (in practice, in frame-max).
func AppendFrame(b []byte, typ uint8, channel uint16, payload []byte) []byte {
	b = append(b, typ)
	b = appendUint16(b, channel)
	b = appendUint32(b, uint32(len(payload)))
	b = append(b, payload...)
	return append(b, FrameEnd)
}

// beginFrame appends a frame header with a zero size and returns the offset
// of the header; endFrame patches the size and appends the frame-end.
func beginFrame(b []byte, typ uint8, channel uint16) ([]byte, int) {
	start := len(b)
	return append(b, typ, uint8(channel>>8), uint8(channel), 0, 0, 0, 0), start
}

func endFrame(b []byte, start int) []byte {
	binary.BigEndian.PutUint32(b[start+3:], uint32(len(b)-start-FrameHeaderSize))
	return append(b, FrameEnd)
}

// AppendMethodFrame appends a method frame carrying m to b. It never fails;
// see Method.AppendTo for how unencodable values are handled.
func AppendMethodFrame(b []byte, channel uint16, m Method) []byte {
	b, start := beginFrame(b, FrameMethod, channel)
	b = m.AppendTo(b)
	return endFrame(b, start)
}

// AppendHeaderFrame appends a content header frame to b (weight 0). A nil p
// means no properties. Like Method.AppendTo it never fails: shortstr
// properties longer than 255 bytes are truncated and header entries that
// cannot be encoded are left out (check with Properties.AppendTo or
// Table.Validate first if that matters).
func AppendHeaderFrame(b []byte, channel uint16, classID uint16, bodySize uint64, p *Properties) []byte {
	b, start := beginFrame(b, FrameHeader, channel)
	b = appendUint16(b, classID)
	b = appendUint16(b, 0)
	b = appendUint64(b, bodySize)
	b, _ = appendProperties(b, p, false)
	return endFrame(b, start)
}

// AppendHeartbeat appends a heartbeat frame (channel 0, empty payload).
func AppendHeartbeat(b []byte) []byte {
	return append(b, FrameHeartbeat, 0, 0, 0, 0, 0, 0, FrameEnd)
}

// AppendBodyFrames appends body as content body frames of at most frameMax
// bytes each, overhead included (0 = one frame however large; values too
// small to carry a payload byte are treated as 0). An empty body appends
// nothing (0-9-1 §4.2.6.2 allows zero body frames).
func AppendBodyFrames(b []byte, channel uint16, body []byte, frameMax uint32) []byte {
	if len(body) == 0 {
		return b
	}
	chunk := len(body)
	if frameMax > FrameOverhead && uint64(frameMax-FrameOverhead) < uint64(chunk) {
		chunk = int(frameMax - FrameOverhead)
	}
	frames := (len(body) + chunk - 1) / chunk
	b = slices.Grow(b, len(body)+frames*FrameOverhead)
	for len(body) > 0 {
		n := min(chunk, len(body))
		b = AppendFrame(b, FrameBody, channel, body[:n])
		body = body[n:]
	}
	return b
}
