package amqp

import (
	"encoding/binary"
	"math"
)

// MaxShortstrLen is the longest shortstr the wire format can carry
// (0-9-1 §4.2.5.3: a shortstr has a one-octet length).
const MaxShortstrLen = 255

// Append primitives. All of them append big-endian ("network byte order",
// 0-9-1 §4.2.5.2) and allocate only when b has no spare capacity.

func appendUint16(b []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(b, v) }
func appendUint32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }
func appendUint64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }

// appendShortstr appends s as a shortstr, truncating it to MaxShortstrLen
// bytes so that the result is always a well-formed shortstr. Callers that
// must not lose data check the length first (see appendShortstrStrict).
func appendShortstr(b []byte, s string) []byte {
	if len(s) > MaxShortstrLen {
		s = s[:MaxShortstrLen]
	}
	b = append(b, uint8(len(s)))
	return append(b, s...)
}

// appendShortstrStrict appends s as a shortstr or fails if it is too long.
func appendShortstrStrict(b []byte, s string) ([]byte, error) {
	if len(s) > MaxShortstrLen {
		return b, errShortstrTooLong(len(s))
	}
	b = append(b, uint8(len(s)))
	return append(b, s...), nil
}

// appendLongstr appends s as a longstr. Strings longer than 4 GiB - 1 cannot
// be represented and are truncated; no frame can carry them anyway.
func appendLongstr(b []byte, s string) []byte {
	if uint64(len(s)) > math.MaxUint32 {
		s = s[:math.MaxUint32]
	}
	b = appendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// decoder reads wire primitives from a bounded byte slice. Reads past the end
// set a sticky failure and return zero values, so generated decoders can read
// every argument and check once at the end. It never panics and never
// allocates more than the bytes actually present.
type decoder struct {
	b   []byte
	off int
	bad bool   // a read ran past the end of b
	err *Error // a more specific failure (from a field table), if any
	// maxDepth bounds the nesting of field tables (see tableDepthLimit).
	maxDepth int
}

func (d *decoder) fail() { d.bad = true; d.off = len(d.b) }

func (d *decoder) uint8() uint8 {
	if d.off >= len(d.b) {
		d.fail()
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) uint16() uint16 {
	if len(d.b)-d.off < 2 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint16(d.b[d.off:])
	d.off += 2
	return v
}

func (d *decoder) uint32() uint32 {
	if len(d.b)-d.off < 4 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v
}

func (d *decoder) uint64() uint64 {
	if len(d.b)-d.off < 8 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

// bytes returns the next n bytes (borrowed from d.b) or fails.
func (d *decoder) bytes(n uint64) []byte {
	if n > uint64(len(d.b)-d.off) {
		d.fail()
		return nil
	}
	v := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return v
}

// shortstr decodes a shortstr into *dst. If *dst already holds the same
// bytes it is kept, so a reused value (MethodDecoder, a reused Properties)
// decodes repeated exchange names, routing keys and content types without
// allocating. The string never aliases d.b.
func (d *decoder) shortstr(dst *string) {
	n := d.uint8()
	setString(dst, d.bytes(uint64(n)))
}

// longstr is shortstr for longstrs (four-octet length).
func (d *decoder) longstr(dst *string) {
	n := d.uint32()
	setString(dst, d.bytes(uint64(n)))
}

// setString stores a copy of s in *dst unless *dst already equals s.
func setString(dst *string, s []byte) {
	if string(s) != *dst {
		*dst = string(s)
	}
}

// table decodes a field table into *dst (nil for an empty table).
func (d *decoder) table(dst *Table) {
	if d.bad || d.err != nil {
		*dst = nil
		return
	}
	t, n, err := decodeTable(d.b[d.off:], 1, tableDepthLimit(d.maxDepth))
	if err != nil {
		d.err = err
		d.off = len(d.b)
		*dst = nil
		return
	}
	d.off += n
	*dst = t
}

// result converts the decoder's state into the error a Decode returns:
// nil, or a 501 FRAME_ERROR naming the method.
func (d *decoder) result(classID, methodID uint16) error {
	if d.err != nil {
		e := *d.err
		e.ClassID, e.MethodID = classID, methodID
		return &e
	}
	if d.bad {
		return Errorf(FrameError, classID, methodID, "%s: truncated arguments", MethodName(classID, methodID))
	}
	return nil
}
