package broker

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
)

func TestParseMaxAge(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"7D", 7 * 24 * time.Hour, true},
		{"1Y", 365 * 24 * time.Hour, true},
		{"30m", 30 * time.Minute, true},
		{"10s", 10 * time.Second, true},
		{"290Y", 290 * 365 * 24 * time.Hour, true},
		{"300Y", 0, false}, // past time.Duration
		{"4294967295Y", 0, false},
		{"D", 0, false},
		{"-1D", 0, false},
		{"1w", 0, false},
		{"", 0, false},
	} {
		got, ok := parseMaxAge(c.in)
		if ok != c.ok || got != c.want {
			t.Errorf("parseMaxAge(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// Consumer arguments of every AMQP type are answered, never a panic.
func TestParseStreamConsumeArgsAnyType(t *testing.T) {
	values := []any{nil, true, int8(-1), uint8(2), int16(-3), uint16(4), int32(-5), uint32(6), int64(-7),
		uint64(1 << 63), float32(1.5), float64(-2.5), "first", "last", "next", "1h", "bogus", "",
		[]byte("x"), []any{"a", 1, nil}, []any{}, amqp.Table{"a": 1}, time.Unix(1e9, 0),
		amqp.Decimal{Scale: 2, Value: 5}}
	keys := []string{"x-stream-offset", "x-stream-filter", "x-stream-match-unfiltered",
		"x-stream-consumer-name", "x-single-active-consumer"}
	for _, k := range keys {
		for _, v := range values {
			_, err := parseStreamConsumeArgs(amqp.Table{k: v}, "s", "/", time.Now())
			if err != nil {
				var ae *amqp.Error
				if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
					t.Errorf("%s=%#v: %v", k, v, err)
				}
			}
		}
	}
}

// TestStreamHeaderArena: the headers of a chunk's messages written into a
// shared arena are the headers streamHeader makes, each its own (appending
// to one does not touch the next).
func TestStreamHeaderArena(t *testing.T) {
	var headers [][]byte
	for i, props := range []amqp.Properties{
		{},
		{Headers: amqp.Table{"x-stream-filter-value": "eu"}},
		{Headers: amqp.Table{"x-stream-offset": int64(99), "k": "v"}}, // replaced: decoded path
		{ContentType: "text/plain", Headers: amqp.Table{"a-rather-long-header-name": "and a value that takes some room"}},
		{DeliveryMode: 2},
	} {
		h := amqp.ContentHeader{ClassID: amqp.ClassBasic, BodySize: uint64(i), Properties: props}
		b, err := h.AppendTo(nil)
		if err != nil {
			t.Fatal(err)
		}
		headers = append(headers, b)
	}
	var arena []byte
	var got [][]byte
	for i, h := range headers {
		out, filter := streamHeaderIn(&arena, len(headers)-i, h, uint64(100+i))
		want, wantFilter := streamHeader(h, uint64(100+i))
		if !sameHeader(out, want) || filter != wantFilter {
			t.Fatalf("header %d: %x %q, want %x %q", i, out, filter, want, wantFilter)
		}
		got = append(got, out)
	}
	// A large header with many to come gets an arena of its own size, not
	// one sized for all of them.
	big := amqp.ContentHeader{ClassID: amqp.ClassBasic, Properties: amqp.Properties{
		Headers: amqp.Table{"big": strings.Repeat("x", 100<<10)}}}
	bh, err := big.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	var bigArena []byte
	if _, _ = streamHeaderIn(&bigArena, 250, bh, 1); cap(bigArena) > max(len(bh)+32, streamHeaderArenaMax) {
		t.Fatalf("arena of %d bytes for a %d-byte header", cap(bigArena), len(bh))
	}
	for j := range got {
		_ = append(got[j], "overwrite"...)
		for i, h := range headers {
			if want, _ := streamHeader(h, uint64(100+i)); !sameHeader(got[i], want) {
				t.Fatalf("header %d changed by an append to header %d", i, j)
			}
		}
	}
}

// sameHeader reports whether two content headers decode the same (a table's
// fields may come in any order).
func sameHeader(a, b []byte) bool {
	var ha, hb amqp.ContentHeader
	if amqp.DecodeContentHeader(a, &ha) != nil || amqp.DecodeContentHeader(b, &hb) != nil {
		return false
	}
	return reflect.DeepEqual(ha, hb)
}
