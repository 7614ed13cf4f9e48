package amqp

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Table is an AMQP field table (0-9-1 §4.2.5.5 with RabbitMQ's value types).
//
// Decoded values have these Go types, by wire type:
//
//	't' bool     'b' int8     'B' uint8    's' int16    'u' uint16
//	'I' int32    'i' uint32   'l' int64    'f' float32  'd' float64
//	'D' Decimal  'S' string   'A' []any    'T' time.Time (UTC, whole seconds)
//	'F' Table    'V' nil      'x' []byte
//
// Encoding accepts the same Go types plus int (as 'l') and map[string]any
// (as 'F'); any other type is an error. An empty table, array or byte array
// decodes as a nil Table, []any or []byte. Decoded values never alias the
// input.
type Table map[string]any

// Decimal is an AMQP decimal value: Value / 10^Scale.
type Decimal struct {
	Scale uint8
	Value int32
}

// MaxTableDepth bounds the nesting of tables and arrays: the outermost
// table is depth 1. Deeper input is rejected with 501 FRAME_ERROR when
// decoding and ErrTableTooDeep when encoding (which also stops a table that
// contains itself).
const MaxTableDepth = 32

// tableDepthLimit returns the nesting limit for a configured maxDepth: 0,
// negative or above MaxTableDepth mean MaxTableDepth (encoding refuses
// deeper tables, so accepting them would only lose them later).
func tableDepthLimit(maxDepth int) int {
	if maxDepth <= 0 || maxDepth > MaxTableDepth {
		return MaxTableDepth
	}
	return maxDepth
}

// AppendTo appends t's wire form (four-octet length, then entries) to b.
// On error b is returned unchanged. Entry order follows map iteration and is
// therefore not deterministic.
func (t Table) AppendTo(b []byte) ([]byte, error) {
	out, err := appendTable(b, t, 1)
	if err != nil {
		return b, err
	}
	return out, nil
}

// Validate reports whether t can be encoded: keys of at most 255 bytes,
// supported value types, nesting within MaxTableDepth.
func (t Table) Validate() error {
	_, err := appendTable(nil, t, 1)
	return err
}

// DecodeTable decodes the field table at the start of b (b begins with the
// table's four-octet length) and returns it with the number of bytes
// consumed. Malformed input yields a 501 FRAME_ERROR *Error.
func DecodeTable(b []byte) (Table, int, error) {
	t, n, err := decodeTable(b, 1, MaxTableDepth)
	if err != nil {
		return nil, 0, err
	}
	return t, n, nil
}

func appendTable(b []byte, t map[string]any, depth int) ([]byte, error) {
	if depth > MaxTableDepth {
		return b, ErrTableTooDeep
	}
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	for k, v := range t {
		var err error
		if b, err = appendEntry(b, k, v, depth); err != nil {
			return b[:start], err
		}
	}
	return patchLength(b, start)
}

// appendTableLossy encodes t, leaving out the entries that cannot be
// encoded (see Table.Validate). It backs the encoders whose signature has
// no error (Method.AppendTo, AppendHeaderFrame): the frame stays
// well-formed whatever the caller put in the table.
func appendTableLossy(b []byte, t Table) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	for k, v := range t {
		mark := len(b)
		var err error
		if b, err = appendEntry(b, k, v, 1); err != nil {
			b = b[:mark]
		}
	}
	out, err := patchLength(b, start)
	if err != nil {
		return append(b[:start], 0, 0, 0, 0)
	}
	return out
}

// patchLength writes the length of b[start+4:] into b[start:start+4].
func patchLength(b []byte, start int) ([]byte, error) {
	n := len(b) - start - 4
	if uint64(n) > math.MaxUint32 {
		return b[:start], ErrTooLarge
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return b, nil
}

func appendEntry(b []byte, k string, v any, depth int) ([]byte, error) {
	var err error
	if b, err = appendShortstrStrict(b, k); err != nil {
		return b, fmt.Errorf("table key: %w", err)
	}
	if b, err = appendValue(b, v, depth); err != nil {
		return b, fmt.Errorf("key %q: %w", k, err)
	}
	return b, nil
}

func appendValue(b []byte, v any, depth int) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(b, 'V'), nil
	case bool:
		if v {
			return append(b, 't', 1), nil
		}
		return append(b, 't', 0), nil
	case int8:
		return append(b, 'b', uint8(v)), nil
	case uint8:
		return append(b, 'B', v), nil
	case int16:
		return appendUint16(append(b, 's'), uint16(v)), nil
	case uint16:
		return appendUint16(append(b, 'u'), v), nil
	case int32:
		return appendUint32(append(b, 'I'), uint32(v)), nil
	case uint32:
		return appendUint32(append(b, 'i'), v), nil
	case int64:
		return appendUint64(append(b, 'l'), uint64(v)), nil
	case int:
		return appendUint64(append(b, 'l'), uint64(v)), nil
	case float32:
		return appendUint32(append(b, 'f'), math.Float32bits(v)), nil
	case float64:
		return appendUint64(append(b, 'd'), math.Float64bits(v)), nil
	case Decimal:
		return appendUint32(append(b, 'D', v.Scale), uint32(v.Value)), nil
	case string:
		if uint64(len(v)) > math.MaxUint32 {
			return b, ErrTooLarge
		}
		return appendLongstr(append(b, 'S'), v), nil
	case []byte:
		if uint64(len(v)) > math.MaxUint32 {
			return b, ErrTooLarge
		}
		b = appendUint32(append(b, 'x'), uint32(len(v)))
		return append(b, v...), nil
	case time.Time:
		return appendUint64(append(b, 'T'), uint64(v.Unix())), nil
	case Table:
		return appendTable(append(b, 'F'), v, depth+1)
	case map[string]any:
		return appendTable(append(b, 'F'), v, depth+1)
	case []any:
		return appendArray(append(b, 'A'), v, depth+1)
	default:
		return b, fmt.Errorf("%w: %T", ErrUnsupportedValue, v)
	}
}

func appendArray(b []byte, a []any, depth int) ([]byte, error) {
	if depth > MaxTableDepth {
		return b, ErrTableTooDeep
	}
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	for i, v := range a {
		var err error
		if b, err = appendValue(b, v, depth); err != nil {
			return b[:start], fmt.Errorf("array element %d: %w", i, err)
		}
	}
	return patchLength(b, start)
}

// decodeTable decodes a table at depth (the outermost table is 1), tables
// and arrays nested deeper than limit being a 501 FRAME_ERROR. An empty
// table decodes as nil.
func decodeTable(b []byte, depth, limit int) (Table, int, *Error) {
	if depth > limit {
		return nil, 0, errFrame("field table nested deeper than %d", limit)
	}
	body, n, err := lengthPrefixed(b, "field table")
	if err != nil {
		return nil, 0, err
	}
	var t Table
	for off := 0; off < len(body); {
		kl := int(body[off])
		off++
		if kl > len(body)-off {
			return nil, 0, errFrame("field table: truncated key")
		}
		key := body[off : off+kl]
		off += kl
		v, m, err := decodeValue(body[off:], depth, limit)
		if err != nil {
			return nil, 0, err
		}
		off += m
		if t == nil {
			t = make(Table)
		}
		t[string(key)] = v
	}
	return t, n, nil
}

// decodeArray decodes an 'A' value's body (length, then values).
func decodeArray(b []byte, depth, limit int) ([]any, int, *Error) {
	if depth > limit {
		return nil, 0, errFrame("field array nested deeper than %d", limit)
	}
	body, n, err := lengthPrefixed(b, "field array")
	if err != nil {
		return nil, 0, err
	}
	var a []any
	for off := 0; off < len(body); {
		v, m, err := decodeValue(body[off:], depth, limit)
		if err != nil {
			return nil, 0, err
		}
		off += m
		a = append(a, v)
	}
	return a, n, nil
}

// lengthPrefixed splits a four-octet length and the bytes it covers off b,
// checking the length against what is there before anything else.
func lengthPrefixed(b []byte, what string) (body []byte, consumed int, err *Error) {
	if len(b) < 4 {
		return nil, 0, errFrame("%s: truncated length", what)
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, 0, errFrame("%s: length %d exceeds the %d bytes left", what, n, len(b)-4)
	}
	return b[4 : 4+int(n)], 4 + int(n), nil
}

// decodeValue decodes one typed value (type octet first) found inside a
// table or array at depth; nested tables and arrays are at depth+1.
func decodeValue(b []byte, depth, limit int) (any, int, *Error) {
	if len(b) == 0 {
		return nil, 0, errFrame("field table: truncated value")
	}
	d := decoder{b: b, off: 1}
	var v any
	switch typ := b[0]; typ {
	case 't':
		v = d.uint8() != 0
	case 'b':
		v = int8(d.uint8())
	case 'B':
		v = d.uint8()
	case 's':
		v = int16(d.uint16())
	case 'u':
		v = d.uint16()
	case 'I':
		v = int32(d.uint32())
	case 'i':
		v = d.uint32()
	case 'l':
		v = int64(d.uint64())
	case 'f':
		v = math.Float32frombits(d.uint32())
	case 'd':
		v = math.Float64frombits(d.uint64())
	case 'D':
		scale := d.uint8()
		v = Decimal{Scale: scale, Value: int32(d.uint32())}
	case 'S':
		v = string(d.bytes(uint64(d.uint32())))
	case 'x':
		p := d.bytes(uint64(d.uint32()))
		if len(p) > 0 {
			v = append([]byte(nil), p...)
		} else {
			v = []byte(nil)
		}
	case 'T':
		v = time.Unix(int64(d.uint64()), 0).UTC()
	case 'V':
		v = nil
	case 'F':
		t, n, err := decodeTable(b[1:], depth+1, limit)
		if err != nil {
			return nil, 0, err
		}
		return t, 1 + n, nil
	case 'A':
		a, n, err := decodeArray(b[1:], depth+1, limit)
		if err != nil {
			return nil, 0, err
		}
		return a, 1 + n, nil
	default:
		return nil, 0, errFrame("field table: unknown value type %q", typ)
	}
	if d.bad {
		return nil, 0, errFrame("field table: truncated %q value", b[0])
	}
	return v, d.off, nil
}

// TableJSON is t as RabbitMQ's management API and definitions show a
// field table in JSON: byte arrays as strings, timestamps as unix
// seconds, decimals as numbers, nested tables and arrays converted alike;
// nil becomes an empty object.
func TableJSON(t Table) map[string]any {
	out := make(map[string]any, len(t))
	for k, v := range t {
		out[k] = ValueJSON(v)
	}
	return out
}

// ValueJSON is one field value as TableJSON shows it.
func ValueJSON(v any) any {
	switch x := v.(type) {
	case Table:
		return TableJSON(x)
	case map[string]any:
		return TableJSON(Table(x))
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = ValueJSON(e)
		}
		return out
	case []byte:
		return string(x)
	case time.Time:
		return x.Unix()
	case Decimal:
		return float64(x.Value) / math.Pow10(int(x.Scale))
	}
	return v
}
