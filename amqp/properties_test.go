package amqp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fullProperties has every property set to a non-zero value.
func fullProperties() Properties {
	return Properties{
		ContentType:     "application/json",
		ContentEncoding: "gzip",
		Headers:         Table{"x-death": []any{Table{"count": int64(1)}}, "t": time.Unix(100, 0).UTC()},
		DeliveryMode:    2,
		Priority:        9,
		CorrelationID:   "corr",
		ReplyTo:         "reply",
		Expiration:      "60000",
		MessageID:       "msg-1",
		Timestamp:       1700000000,
		Type:            "type",
		UserID:          "guest",
		AppID:           "app",
		ClusterID:       "cluster",
	}
}

// setProperty returns Properties with only the i-th field of fullProperties
// set, and the flag it should produce.
func setProperty(i int) (Properties, string) {
	full := fullProperties()
	var p Properties
	v := reflect.ValueOf(&p).Elem()
	v.Field(i).Set(reflect.ValueOf(full).Field(i))
	return p, v.Type().Field(i).Name
}

func TestPropertiesEachAlone(t *testing.T) {
	flags := []uint16{FlagContentType, FlagContentEncoding, FlagHeaders, FlagDeliveryMode, FlagPriority,
		FlagCorrelationID, FlagReplyTo, FlagExpiration, FlagMessageID, FlagTimestamp, FlagType, FlagUserID,
		FlagAppID, FlagClusterID}
	if n := reflect.TypeFor[Properties]().NumField() - 1; n != len(flags) {
		t.Fatalf("Properties has %d property fields, want %d", n, len(flags))
	}
	for i, flag := range flags {
		p, name := setProperty(i)
		b, err := p.AppendTo(nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := uint16(b[0])<<8 | uint16(b[1]); got != flag {
			t.Errorf("%s: flags %#04x, want %#04x", name, got, flag)
		}
		var q Properties
		if err := DecodeProperties(b, &q); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p.Flags = flag
		if !reflect.DeepEqual(q, p) {
			t.Errorf("%s: got %+v\nwant %+v", name, q, p)
		}
	}
}

func TestPropertiesRoundTrip(t *testing.T) {
	p := fullProperties()
	h := ContentHeader{ClassID: ClassBasic, BodySize: 1 << 40, Properties: p}
	b, err := h.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	var got ContentHeader
	if err := DecodeContentHeader(b, &got); err != nil {
		t.Fatal(err)
	}
	h.Properties.Flags = propertyFlags
	if !reflect.DeepEqual(got, h) {
		t.Errorf("got %+v\nwant %+v", got, h)
	}
	// Decoding into a used value clears what is absent now.
	if err := DecodeProperties([]byte{0x10, 0, 1}, &got.Properties); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Properties, Properties{DeliveryMode: 1, Flags: FlagDeliveryMode}) {
		t.Errorf("reused: %+v", got.Properties)
	}
	// Explicit flags write zero values too.
	b, _ = (&Properties{Flags: FlagPriority | FlagContentType}).AppendTo(nil)
	if !bytes.Equal(b, []byte{0x88, 0, 0, 0}) {
		t.Errorf("explicit flags: % x", b)
	}
	// Reserved and continuation bits in Flags are not written.
	b, _ = (&Properties{Flags: FlagPriority | FlagContinuation | 2}).AppendTo(nil)
	if !bytes.Equal(b, []byte{0x08, 0, 0}) {
		t.Errorf("reserved bits: % x", b)
	}
}

func TestContentHeaderBytes(t *testing.T) {
	want := []byte{0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0x90, 0, 1, 't', 2}
	h := ContentHeader{ClassID: 60, BodySize: 5, Properties: Properties{ContentType: "t", DeliveryMode: 2}}
	b, err := h.AppendTo(nil)
	if err != nil || !bytes.Equal(b, want) {
		t.Errorf("got % x, %v", b, err)
	}
	frame := AppendHeaderFrame(nil, 3, 60, 5, &h.Properties)
	if !bytes.Equal(frame, append(append([]byte{2, 0, 3, 0, 0, 0, byte(len(want))}, want...), 0xce)) {
		t.Errorf("frame % x", frame)
	}
	if f := AppendHeaderFrame(nil, 1, 60, 0, nil); !bytes.Equal(f, []byte{2, 0, 1, 0, 0, 0, 14, 0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xce}) {
		t.Errorf("nil properties: % x", f)
	}
	classID, size, err := ParseContentHeaderPrefix(want)
	if classID != 60 || size != 5 || err != nil {
		t.Errorf("prefix: %d %d %v", classID, size, err)
	}
}

func TestPropertiesContinuation(t *testing.T) {
	// Flags with the continuation bit, two more flag words (the last one
	// ending the chain), then the property list.
	b := []byte{0x10, 0x01, 0x00, 0x01, 0x00, 0x00, 2}
	var p Properties
	if err := DecodeProperties(b, &p); err != nil {
		t.Fatal(err)
	}
	if p.DeliveryMode != 2 || p.Flags != FlagDeliveryMode {
		t.Errorf("got %+v", p)
	}
	payload := append([]byte{0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, b...)
	if dm, _, _, err := PeekDeliveryModePriorityExpiration(payload); dm != 2 || err != nil {
		t.Errorf("peek: %d %v", dm, err)
	}
	// A chain that never ends is truncated.
	if err := DecodeProperties([]byte{0, 1, 0, 1}, &p); err == nil {
		t.Error("unterminated flag words decoded")
	}
}

func TestPropertiesErrors(t *testing.T) {
	long := strings.Repeat("x", 256)
	if _, err := (&Properties{ReplyTo: long}).AppendTo(nil); !errors.Is(err, ErrShortstrTooLong) {
		t.Errorf("long reply-to: %v", err)
	}
	if _, err := (&Properties{Headers: Table{"x": uint64(1)}}).AppendTo(nil); !errors.Is(err, ErrUnsupportedValue) {
		t.Errorf("bad header: %v", err)
	}
	// The frame encoder truncates and drops instead.
	f := AppendHeaderFrame(nil, 1, 60, 0, &Properties{ReplyTo: long, Headers: Table{"x": uint64(1), "y": "ok"}})
	var h ContentHeader
	if err := DecodeContentHeader(f[FrameHeaderSize:len(f)-1], &h); err != nil {
		t.Fatal(err)
	}
	if h.Properties.ReplyTo != long[:255] || !reflect.DeepEqual(h.Properties.Headers, Table{"y": "ok"}) {
		t.Errorf("lossy header: %+v", h.Properties)
	}

	full, _ := (&ContentHeader{ClassID: 60, BodySize: 1, Properties: fullProperties()}).AppendTo(nil)
	for n := range len(full) {
		err := DecodeContentHeader(full[:n], &h)
		var e *Error
		if !errors.As(err, &e) || e.Code != FrameError {
			t.Fatalf("prefix %d: %v, want 501", n, err)
		}
	}
	if _, _, err := ParseContentHeaderPrefix(full[:13]); err == nil {
		t.Error("13-byte header prefix accepted")
	}
}

func TestPeek(t *testing.T) {
	tests := []Properties{
		{},
		{DeliveryMode: 2},
		{Priority: 5, ContentType: "text/plain"},
		{Expiration: "1000", Headers: Table{"a": "b", "deep": Table{"x": []any{1, 2}}}, CorrelationID: "c", ReplyTo: "r", AppID: "app"},
		fullProperties(),
	}
	for _, p := range tests {
		b, err := (&ContentHeader{ClassID: 60, BodySize: 3, Properties: p}).AppendTo(nil)
		if err != nil {
			t.Fatal(err)
		}
		dm, pri, exp, err := PeekDeliveryModePriorityExpiration(b)
		if err != nil || dm != p.DeliveryMode || pri != p.Priority || exp != p.Expiration {
			t.Errorf("%+v: peek %d %d %q %v", p, dm, pri, exp, err)
		}
		if n := testing.AllocsPerRun(10, func() { _, _, _, _ = PeekDeliveryModePriorityExpiration(b) }); p.Expiration == "" && n != 0 {
			t.Errorf("peek allocates %v times", n)
		}
	}
	// The headers table is skipped without being decoded: a bad value type
	// inside it does not matter to the peek.
	b := []byte{0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x30, 0x00, 0, 0, 0, 3, 1, 'a', 'Q', 2}
	if dm, _, _, err := PeekDeliveryModePriorityExpiration(b); dm != 2 || err != nil {
		t.Errorf("peek over bad headers: %d %v", dm, err)
	}
	// But a headers length past the end is an error.
	b = []byte{0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x30, 0x00, 0, 0, 0, 9, 1, 'a', 'Q', 2}
	if _, _, _, err := PeekDeliveryModePriorityExpiration(b); err == nil {
		t.Error("peek accepted a headers table past the end")
	}
}

func TestDecodePropertiesReuseNoAlloc(t *testing.T) {
	p := Properties{ContentType: "application/json", DeliveryMode: 2, MessageID: "m"}
	b, _ := (&ContentHeader{ClassID: 60, BodySize: 10, Properties: p}).AppendTo(nil)
	var h ContentHeader
	if err := DecodeContentHeader(b, &h); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = DecodeContentHeader(b, &h) }); n != 0 {
		t.Errorf("reused DecodeContentHeader: %v allocs", n)
	}
}

// TestAppendHeaderInt64: the entry is added to the table there is, or in a
// new one, and every other property decodes as before; a table that has
// the name already, or a malformed payload, is left to the caller.
func TestAppendHeaderInt64(t *testing.T) {
	cases := []Properties{{}, {ContentType: "text/plain"}, {ContentEncoding: "gzip", DeliveryMode: 2},
		{Headers: Table{}}, {Headers: Table{"a": "b", "n": int32(7)}, Priority: 3}, fullProperties()}
	for i := range 14 {
		p, _ := setProperty(i)
		cases = append(cases, p)
	}
	for _, p := range cases {
		h := ContentHeader{ClassID: 60, BodySize: 42, Properties: p}
		payload, err := h.AppendTo(nil)
		if err != nil {
			t.Fatal(err)
		}
		out, ok := AppendHeaderInt64([]byte("prefix"), payload, "x-stream-offset", 1<<40+3)
		if !ok {
			t.Fatalf("%+v: refused", p)
		}
		if string(out[:6]) != "prefix" {
			t.Fatalf("dst's bytes changed: %q", out[:6])
		}
		var got ContentHeader
		if err := DecodeContentHeader(out[6:], &got); err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		want := h
		want.Properties.Headers = Table{"x-stream-offset": int64(1<<40 + 3)}
		for k, v := range p.Headers {
			want.Properties.Headers[k] = v
		}
		got.Properties.Flags, want.Properties.Flags = 0, 0
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %+v\nwant %+v", got, want)
		}
		if _, ok := AppendHeaderInt64(nil, out[6:], "x-stream-offset", 1); ok {
			t.Fatalf("%+v: a second entry of the same name added", p)
		}
		// Cut anywhere up to the end of the headers table (or of
		// what precedes its place), the payload is refused.
		end := 14
		if p.ContentType != "" {
			end += 1 + len(p.ContentType)
		}
		if p.ContentEncoding != "" {
			end += 1 + len(p.ContentEncoding)
		}
		if p.Headers != nil {
			end += 4 + int(binary.BigEndian.Uint32(payload[end:]))
		}
		for cut := range end {
			if _, ok := AppendHeaderInt64(nil, payload[:cut], "x-stream-offset", 1); ok {
				t.Fatalf("%+v: payload cut at %d of %d accepted", p, cut, end)
			}
		}
	}
}
