package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// formatVersion is the version byte that starts every record this code writes.
const formatVersion = 1

// recordHeaderLen is the version byte plus the CRC-32C.
const recordHeaderLen = 5

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errTruncated is wrapped into ErrCorrupt when a payload ends early or has trailing bytes.
var errTruncated = errors.New("store: truncated or malformed payload")

// beginRecord appends a record header (version, zero checksum) to b; the payload is
// appended after it and sealRecord fills in the checksum.
func beginRecord(b []byte) []byte {
	return append(b, formatVersion, 0, 0, 0, 0)
}

// sealRecord computes the checksum of rec (a value started with beginRecord) in place.
func sealRecord(rec []byte) []byte {
	binary.BigEndian.PutUint32(rec[1:recordHeaderLen], recordCRC(rec))
	return rec
}

// recordCRC is the CRC-32C of the version byte followed by the payload.
func recordCRC(rec []byte) uint32 {
	c := crc32.Update(0, castagnoli, rec[:1])
	return crc32.Update(c, castagnoli, rec[recordHeaderLen:])
}

// openRecord checks v's checksum and version and returns its payload, which aliases v.
// A failure wraps ErrCorrupt.
func openRecord(v []byte) ([]byte, error) {
	version, payload, err := openAnyRecord(v)
	if err == nil && version != formatVersion {
		return nil, fmt.Errorf("%w: format version %d", ErrCorrupt, version)
	}
	return payload, err
}

// openAnyRecord checks v's checksum and returns its version and payload
// (aliasing v), whatever the version. A failure wraps ErrCorrupt.
func openAnyRecord(v []byte) (byte, []byte, error) {
	if len(v) < recordHeaderLen {
		return 0, nil, fmt.Errorf("%w: record of %d bytes", ErrCorrupt, len(v))
	}
	if got, want := recordCRC(v), binary.BigEndian.Uint32(v[1:recordHeaderLen]); got != want {
		return 0, nil, fmt.Errorf("%w: checksum %08x, want %08x", ErrCorrupt, got, want)
	}
	return v[0], v[recordHeaderLen:], nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

// uvarintLen is the encoded length of v as a uvarint.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// decoder reads a payload front to back. The first failure sticks: later reads return
// zero values and err says what went wrong.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errTruncated
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// raw returns a length-prefixed field; it aliases the payload.
func (d *decoder) raw() []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.raw()) }

// bytes returns a copy of a length-prefixed field, nil when empty.
func (d *decoder) bytes() []byte {
	r := d.raw()
	if len(r) == 0 {
		return nil
	}
	return append([]byte(nil), r...)
}

func (d *decoder) bool() bool {
	if len(d.b) < 1 || d.b[0] > 1 {
		d.fail()
		return false
	}
	v := d.b[0] == 1
	d.b = d.b[1:]
	return v
}

// count reads an element count, each element taking at least one byte.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *decoder) strings() []string {
	n := d.count()
	if n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.string()
	}
	return ss
}

// finish reports the first failure, or trailing bytes, as ErrCorrupt.
func (d *decoder) finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = errTruncated
	}
	if d.err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, d.err)
	}
	return nil
}
