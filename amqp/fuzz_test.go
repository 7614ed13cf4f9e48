package amqp

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"math"
	"reflect"
	"testing"
	"testing/iotest"
	"time"
)

// Fuzz targets. Run one at a time, e.g.
//
//	go test ./amqp -run '^$' -fuzz '^FuzzReadFrame$' -fuzztime 60s -parallel 2

// frameResult is what a reader loop saw: the frames and the final error.
type frameResult struct {
	frames []Frame
	err    error
}

func readFrames(r io.Reader, bufSize int, max uint32) frameResult {
	fr := NewFrameReader(r, bufSize)
	fr.SetMaxFrameSize(max)
	var res frameResult
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			res.err = err
			return res
		}
		res.frames = append(res.frames, Frame{f.Type, f.Channel, bytes.Clone(f.Payload)})
	}
}

func FuzzReadFrame(f *testing.F) {
	stream, _ := sampleStream()
	f.Add(append([]byte{0}, stream...))
	f.Add(append([]byte{1}, stream...))
	var all []byte
	for _, m := range allMethods() {
		fillMethod(m)
		all = AppendMethodFrame(all, 1, m)
	}
	f.Add(append([]byte{3}, all...))
	bad := append([]byte{0}, stream...)
	bad[len(bad)-1] = 0
	f.Add(bad)
	f.Add([]byte{2, FrameBody, 0, 1, 0, 0, 0x10, 0x00, 0})

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		mode, data := data[0], data[1:]
		max := uint32(0)
		if mode&2 != 0 {
			max = FrameMinSize
		}
		// Reference: whole reads into a buffer that holds all the input.
		want := readFrames(bytes.NewReader(data), len(data), max)
		// Variant chosen by the first byte: one byte per Read, or halves,
		// through the smallest buffer, so frames straddle reads and growth.
		var r io.Reader = iotest.HalfReader(bytes.NewReader(data))
		if mode&1 != 0 {
			r = iotest.OneByteReader(bytes.NewReader(data))
		}
		got := readFrames(r, 1, max)

		if !reflect.DeepEqual(got.frames, want.frames) {
			t.Fatalf("split reads gave %d frames, whole reads %d", len(got.frames), len(want.frames))
		}
		if !sameError(got.err, want.err) {
			t.Fatalf("split reads ended with %v, whole reads with %v", got.err, want.err)
		}
		switch err := want.err; {
		case err == io.EOF, err == io.ErrUnexpectedEOF:
		default:
			var e *Error
			if !errors.As(err, &e) || e.Code != FrameError {
				t.Fatalf("unexpected error %v", err)
			}
		}

		// Decode what the frames carry, as a connection would.
		var md MethodDecoder
		var h ContentHeader
		for _, fr := range want.frames {
			if max != 0 && len(fr.Payload)+FrameOverhead > int(max) {
				t.Fatalf("frame of %d bytes over the maximum %d", len(fr.Payload)+FrameOverhead, max)
			}
			switch fr.Type {
			case FrameMethod:
				if _, err := md.Decode(fr.Payload); err != nil {
					checkDecodeError(t, err)
				}
			case FrameHeader:
				if err := DecodeContentHeader(fr.Payload, &h); err != nil {
					checkDecodeError(t, err)
				}
			}
		}
	})
}

func sameError(a, b error) bool {
	var ea, eb *Error
	if errors.As(a, &ea) && errors.As(b, &eb) {
		return *ea == *eb
	}
	return a == b
}

func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || (e.Code != FrameError && e.Code != NotImplemented) {
		t.Fatalf("decode error %v is not a 501/540 *Error", err)
	}
	if len(e.Text) > MaxShortstrLen {
		t.Fatalf("error text of %d bytes", len(e.Text))
	}
}

func FuzzDecodeMethod(f *testing.F) {
	for _, m := range allMethods() {
		f.Add(m.AppendTo(nil))
		fillMethod(m)
		f.Add(m.AppendTo(nil))
	}
	f.Add([]byte{0, 60, 0, 40})
	f.Add([]byte{0, 50, 0, 10, 0, 0, 1, 'q', 0x1f, 0, 0, 0, 6, 1, 'a', 'A', 0, 0, 0, 0})

	f.Fuzz(func(t *testing.T, payload []byte) {
		m, err := DecodeMethod(payload)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		// A MethodDecoder holding a fully populated value of the same type
		// must decode to the same thing.
		var md MethodDecoder
		prev := newMethod(m.ClassID(), m.MethodID())
		fillMethod(prev)
		if _, err := md.Decode(prev.AppendTo(nil)); err != nil {
			t.Fatal(err)
		}
		m2, err := md.Decode(payload)
		if err != nil || !methodsEqual(m, m2) {
			t.Fatalf("MethodDecoder: %+v, %v; DecodeMethod: %+v", m2, err, m)
		}
		enc := m.AppendTo(nil)
		m3, err := DecodeMethod(enc)
		if err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", m.Name(), err)
		}
		if !methodsEqual(m, m3) {
			t.Fatalf("round trip of %s:\n%+v\n%+v", m.Name(), m, m3)
		}
	})
}

func FuzzDecodeTable(f *testing.F) {
	for _, tb := range []Table{
		nil,
		{"a": int32(1)},
		fullProperties().Headers,
		{"all": []any{true, int8(-1), uint8(1), int16(-2), uint16(2), int32(-3), uint32(3), int64(-4), float32(1.5), 2.5,
			Decimal{2, 314}, "s", time.Unix(7, 0).UTC(), Table{"x": nil}, nil, []byte("b"), []any{}}},
		nest(MaxTableDepth),
	} {
		b, err := tb.AppendTo(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}

	f.Fuzz(func(t *testing.T, b []byte) {
		tb, n, err := DecodeTable(b)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		if n < 4 || n > len(b) {
			t.Fatalf("consumed %d of %d bytes", n, len(b))
		}
		enc, err := tb.AppendTo(nil)
		if err != nil {
			t.Fatalf("decoded table does not encode: %v", err)
		}
		tb2, n2, err := DecodeTable(enc)
		if err != nil || n2 != len(enc) {
			t.Fatalf("re-encoded table: n=%d/%d %v", n2, len(enc), err)
		}
		if !valuesEqual(tb, tb2) {
			t.Fatalf("round trip:\n%#v\n%#v", tb, tb2)
		}
	})
}

func FuzzDecodeContentHeader(f *testing.F) {
	for _, p := range []Properties{{}, fullProperties(), {DeliveryMode: 2, Expiration: "5"}} {
		b, err := (&ContentHeader{ClassID: 60, BodySize: 12, Properties: p}).AppendTo(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x10, 0x01, 0x00, 0x01, 0x00, 0x00, 2})

	f.Fuzz(func(t *testing.T, payload []byte) {
		var h ContentHeader
		err := DecodeContentHeader(payload, &h)
		dm, pri, exp, perr := PeekDeliveryModePriorityExpiration(payload)
		spliced, sok := AppendHeaderInt64(nil, payload, "x-stream-offset", -7)
		if err == nil {
			// A valid header takes the entry unless it has it already,
			// and decodes as before with it.
			_, had := h.Properties.Headers["x-stream-offset"]
			if sok == had {
				t.Fatalf("AppendHeaderInt64 ok %v with the entry there %v", sok, had)
			}
			if sok {
				var h2 ContentHeader
				if err := DecodeContentHeader(spliced, &h2); err != nil {
					t.Fatalf("spliced header does not decode: %v", err)
				}
				want := h
				want.Properties.Headers = Table{"x-stream-offset": int64(-7)}
				maps.Copy(want.Properties.Headers, h.Properties.Headers)
				want.Properties.Flags |= FlagHeaders
				if !headersEqual(&h2, &want) {
					t.Fatalf("spliced: %+v, want %+v", h2, want)
				}
			}
		}
		if err != nil {
			checkDecodeError(t, err)
			if perr != nil {
				checkDecodeError(t, perr)
			}
			return
		}
		if ts, ok := PeekTimestamp(payload); ok != (h.Properties.Flags&FlagTimestamp != 0) || ts != h.Properties.Timestamp {
			t.Fatalf("peek timestamp %d %v disagrees with %+v", ts, ok, h.Properties)
		}
		if perr != nil || dm != h.Properties.DeliveryMode || pri != h.Properties.Priority || exp != h.Properties.Expiration {
			t.Fatalf("peek %d %d %q %v disagrees with %+v", dm, pri, exp, perr, h.Properties)
		}
		classID, size, err := ParseContentHeaderPrefix(payload)
		if err != nil || classID != h.ClassID || size != h.BodySize {
			t.Fatalf("prefix %d %d %v disagrees with %+v", classID, size, err, h)
		}
		// Decoding into a used value gives the same result.
		reused := ContentHeader{ClassID: 1, Weight: 2, BodySize: 3, Properties: fullProperties()}
		if err := DecodeContentHeader(payload, &reused); err != nil || !headersEqual(&reused, &h) {
			t.Fatalf("reused value: %+v, %v", reused, err)
		}
		enc, err := h.AppendTo(nil)
		if err != nil {
			t.Fatalf("decoded header does not encode: %v", err)
		}
		var h2 ContentHeader
		if err := DecodeContentHeader(enc, &h2); err != nil || !headersEqual(&h, &h2) {
			t.Fatalf("round trip: %+v, %v", h2, err)
		}
	})
}

// methodsEqual compares two methods, treating tables with valuesEqual.
func methodsEqual(a, b Method) bool {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	if va.Type() != vb.Type() {
		return false
	}
	for i := range va.NumField() {
		fa, fb := va.Field(i).Interface(), vb.Field(i).Interface()
		if ta, ok := fa.(Table); ok {
			if !valuesEqual(ta, fb.(Table)) {
				return false
			}
		} else if fa != fb {
			return false
		}
	}
	return true
}

func headersEqual(a, b *ContentHeader) bool {
	pa, pb := a.Properties, b.Properties
	if !valuesEqual(pa.Headers, pb.Headers) {
		return false
	}
	pa.Headers, pb.Headers = nil, nil
	return a.ClassID == b.ClassID && a.Weight == b.Weight && a.BodySize == b.BodySize && reflect.DeepEqual(pa, pb)
}

// valuesEqual compares decoded field values; floats compare by their bits
// so that NaNs round-trip.
func valuesEqual(a, b any) bool {
	switch a := a.(type) {
	case Table:
		b, ok := b.(Table)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			w, ok := b[k]
			if !ok || !valuesEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !valuesEqual(a[i], b[i]) {
				return false
			}
		}
		return true
	case []byte:
		b, ok := b.([]byte)
		return ok && bytes.Equal(a, b)
	case float32:
		b, ok := b.(float32)
		return ok && math.Float32bits(a) == math.Float32bits(b)
	case float64:
		b, ok := b.(float64)
		return ok && math.Float64bits(a) == math.Float64bits(b)
	case time.Time:
		b, ok := b.(time.Time)
		return ok && a.Equal(b)
	default:
		return a == b
	}
}
