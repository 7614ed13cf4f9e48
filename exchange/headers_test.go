package exchange

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
)

func TestHeadersMatch(t *testing.T) {
	msg := amqp.Table{
		"format":  "pdf",
		"type":    "report",
		"n":       int32(7),
		"f":       1.5,
		"b":       true,
		"raw":     []byte("bytes"),
		"nil":     nil,
		"x-trace": "abc",
	}
	tests := []struct {
		name string
		args amqp.Table
		msg  amqp.Table
		want bool
	}{
		// all (the default)
		{"all default empty", nil, msg, true},
		{"all empty", amqp.Table{"x-match": "all"}, msg, true},
		{"all empty, no headers", amqp.Table{"x-match": "all"}, nil, true},
		{"all one", amqp.Table{"format": "pdf"}, msg, true},
		{"all two", amqp.Table{"x-match": "all", "format": "pdf", "type": "report"}, msg, true},
		{"all one wrong", amqp.Table{"x-match": "all", "format": "pdf", "type": "log"}, msg, false},
		{"all one missing", amqp.Table{"x-match": "all", "format": "pdf", "missing": "x"}, msg, false},
		{"all no headers", amqp.Table{"format": "pdf"}, nil, false},
		{"all ignores x- args", amqp.Table{"x-match": "all", "format": "pdf", "x-trace": "other"}, msg, true},
		{"all only x- args", amqp.Table{"x-match": "all", "x-other": "1"}, msg, true},
		{"invalid x-match is all", amqp.Table{"x-match": "bogus", "format": "pdf", "type": "log"}, msg, false},
		{"invalid x-match is all 2", amqp.Table{"x-match": "bogus", "format": "pdf"}, msg, true},
		{"non-string x-match is all", amqp.Table{"x-match": int32(1), "format": "pdf"}, msg, true},
		// any
		{"any empty", amqp.Table{"x-match": "any"}, msg, false},
		{"any one of two", amqp.Table{"x-match": "any", "format": "zip", "type": "report"}, msg, true},
		{"any none", amqp.Table{"x-match": "any", "format": "zip", "type": "log"}, msg, false},
		{"any missing", amqp.Table{"x-match": "any", "missing": "x"}, msg, false},
		{"any ignores x- args", amqp.Table{"x-match": "any", "x-trace": "abc"}, msg, false},
		{"any no headers", amqp.Table{"x-match": "any", "format": "pdf"}, nil, false},
		// all-with-x
		{"all-with-x matches x-", amqp.Table{"x-match": "all-with-x", "format": "pdf", "x-trace": "abc"}, msg, true},
		{"all-with-x wrong x-", amqp.Table{"x-match": "all-with-x", "format": "pdf", "x-trace": "zzz"}, msg, false},
		{"all-with-x missing x-", amqp.Table{"x-match": "all-with-x", "x-missing": "1"}, msg, false},
		{"all-with-x empty", amqp.Table{"x-match": "all-with-x"}, msg, true},
		// any-with-x
		{"any-with-x x- only", amqp.Table{"x-match": "any-with-x", "x-trace": "abc"}, msg, true},
		{"any-with-x wrong", amqp.Table{"x-match": "any-with-x", "x-trace": "zzz", "format": "zip"}, msg, false},
		{"any-with-x empty", amqp.Table{"x-match": "any-with-x"}, msg, false},
		{"any-with-x does not match on x-match", amqp.Table{"x-match": "any-with-x"}, amqp.Table{"x-match": "any-with-x"}, false},
		// void: presence only
		{"void present", amqp.Table{"format": nil}, msg, true},
		{"void present nil", amqp.Table{"nil": nil}, msg, true},
		{"void absent", amqp.Table{"missing": nil}, msg, false},
		{"void any absent", amqp.Table{"x-match": "any", "missing": nil, "format": "zip"}, msg, false},
		{"void any present", amqp.Table{"x-match": "any", "missing": nil, "type": nil}, msg, true},
		{"value vs nil header", amqp.Table{"nil": "x"}, msg, false},
		// value comparison
		{"int widths", amqp.Table{"n": int64(7)}, msg, true},
		{"int8", amqp.Table{"n": int8(7)}, msg, true},
		{"uint16", amqp.Table{"n": uint16(7)}, msg, true},
		{"int vs float", amqp.Table{"n": 7.0}, msg, true},
		{"int vs float not integral", amqp.Table{"n": 7.5}, msg, false},
		{"int wrong", amqp.Table{"n": int32(8)}, msg, false},
		{"int vs string", amqp.Table{"n": "7"}, msg, false},
		{"float", amqp.Table{"f": float32(1.5)}, msg, true},
		{"bool", amqp.Table{"b": true}, msg, true},
		{"bool wrong", amqp.Table{"b": false}, msg, false},
		{"bool vs int", amqp.Table{"b": int32(1)}, msg, false},
		{"bytes vs bytes", amqp.Table{"raw": []byte("bytes")}, msg, true},
		{"string vs bytes", amqp.Table{"raw": "bytes"}, msg, true},
		{"bytes vs string", amqp.Table{"format": []byte("pdf")}, msg, true},
		{"case sensitive", amqp.Table{"format": "PDF"}, msg, false},
		{"key case sensitive", amqp.Table{"Format": "pdf"}, msg, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRouter(Headers)
			r.Bind(Binding{Destination: q("q"), Key: "ignored", Args: tt.args})
			got := len(r.Route("some.key", tt.msg, nil)) == 1
			if got != tt.want {
				t.Errorf("args %v, headers %v: routed = %v; want %v", tt.args, tt.msg, got, tt.want)
			}
		})
	}
}

func TestValuesMatch(t *testing.T) {
	ts := time.Unix(1700000000, 0).UTC()
	tests := []struct {
		p, v any
		want bool
	}{
		{int64(1), int8(1), true},
		{uint32(4000000000), int64(4000000000), true},
		{uint64(1 << 63), int64(-1), false},
		{1.0, int64(1), true},
		{int64(1), 1.0, true},
		{float32(0.1), 0.1, false}, // as after decoding a float32 into Erlang's double
		{float32(0.5), 0.5, true},
		{ts, int64(1700000000), true},
		{ts, ts, true},
		{ts, ts.Add(time.Second), false},
		{amqp.Decimal{Scale: 2, Value: 150}, amqp.Decimal{Scale: 2, Value: 150}, true},
		{amqp.Decimal{Scale: 2, Value: 150}, amqp.Decimal{Scale: 1, Value: 15}, false},
		{[]any{"a", int32(1)}, []any{"a", int64(1)}, true},
		{[]any{"a", int32(1)}, []any{"a"}, false},
		{amqp.Table{"k": int8(3)}, amqp.Table{"k": int64(3)}, true},
		{amqp.Table{"k": int8(3)}, map[string]any{"k": int64(3)}, true},
		{amqp.Table{"k": int8(3)}, amqp.Table{"k": int64(3), "l": 1}, false},
		{"s", nil, false},
		{nil, nil, true},
		{[]int{1}, []int{1}, false}, // not a field-table type, not comparable: no panic
	}
	for i, tt := range tests {
		if got := valuesMatch(tt.p, tt.v); got != tt.want {
			t.Errorf("%d: valuesMatch(%#v, %#v) = %v; want %v", i, tt.p, tt.v, got, tt.want)
		}
	}
}

func TestHeadersMultipleBindings(t *testing.T) {
	r := NewRouter(Headers)
	r.Bind(Binding{Destination: q("a"), Args: amqp.Table{"k": "1"}})
	r.Bind(Binding{Destination: q("a"), Args: amqp.Table{"k": "2"}})
	r.Bind(Binding{Destination: q("a"), Key: "other", Args: amqp.Table{"x-match": "any", "k": "1", "l": "1"}})
	r.Bind(Binding{Destination: q("b"), Args: amqp.Table{"k": "2"}})
	route := func(h amqp.Table) []string {
		t.Helper()
		out := r.Route("", h, nil)
		checkUnique(t, out)
		return names(out)
	}
	if got := fmt.Sprint(route(amqp.Table{"k": "1", "l": "1"})); got != "[a]" {
		t.Errorf("k=1: %s", got)
	}
	if got := fmt.Sprint(route(amqp.Table{"k": "2", "l": "1"})); got != "[a b]" {
		t.Errorf("k=2: %s", got)
	}
	r.Unbind(Binding{Destination: q("a"), Args: amqp.Table{"k": "2"}})
	if got := fmt.Sprint(route(amqp.Table{"k": "2"})); got != "[b]" {
		t.Errorf("after unbind k=2: %s", got)
	}
	if got := fmt.Sprint(route(amqp.Table{"k": "2", "l": "1"})); got != "[a b]" {
		t.Errorf("any binding still there: %s", got)
	}
	if n := r.RemoveDestination(q("a")); n != 2 {
		t.Errorf("RemoveDestination = %d; want 2", n)
	}
	if got := fmt.Sprint(route(amqp.Table{"k": "1", "l": "1"})); got != "[]" {
		t.Errorf("after removing a: %s", got)
	}
}

func TestValidateHeadersArgs(t *testing.T) {
	tests := []struct {
		args amqp.Table
		want string // "" for valid
	}{
		{nil, ""},
		{amqp.Table{"k": "v"}, ""},
		{amqp.Table{"x-match": "all"}, ""},
		{amqp.Table{"x-match": "any"}, ""},
		{amqp.Table{"x-match": "all-with-x"}, ""},
		{amqp.Table{"x-match": "any-with-x"}, ""},
		{amqp.Table{"x-match": "foo"}, `Invalid x-match field value <<"foo">>; expected all, any, all-with-x, or any-with-x`},
		{amqp.Table{"x-match": "ALL"}, `Invalid x-match field value <<"ALL">>; expected all, any, all-with-x, or any-with-x`},
		{amqp.Table{"x-match": ""}, `Invalid x-match field value <<"">>; expected all, any, all-with-x, or any-with-x`},
		{amqp.Table{"x-match": `a"b`}, `Invalid x-match field value <<"a\"b">>; expected all, any, all-with-x, or any-with-x`},
		{amqp.Table{"x-match": "é"}, `Invalid x-match field value <<"é"/utf8>>; expected all, any, all-with-x, or any-with-x`},
		{amqp.Table{"x-match": "\x01\x02"}, `Invalid x-match field value <<1,2>>; expected all, any, all-with-x, or any-with-x`},
		{amqp.Table{"x-match": int32(1)}, `Invalid x-match field type signedint (value 1); expected longstr`},
		{amqp.Table{"x-match": []byte("all")}, `Invalid x-match field type binary (value <<"all">>); expected longstr`},
		{amqp.Table{"x-match": nil}, `Invalid x-match field type void (value undefined); expected longstr`},
	}
	for _, tt := range tests {
		err := ValidateHeadersArgs(tt.args)
		if tt.want == "" {
			if err != nil {
				t.Errorf("ValidateHeadersArgs(%v) = %v; want nil", tt.args, err)
			}
			continue
		}
		if err == nil || err.Error() != tt.want {
			t.Errorf("ValidateHeadersArgs(%v) = %v; want %s", tt.args, err, tt.want)
		}
		if !errors.Is(err, ErrInvalidXMatch) {
			t.Errorf("ValidateHeadersArgs(%v) error is not ErrInvalidXMatch", tt.args)
		}
	}
}

// fillHeaders binds n queues h-<i>, a quarter each with: all of format=pdf,type=report
// (matches the benchmark's headers); any of format=zip,n=<i>; all with a void argument
// that is absent; any-with-x on x-trace=1 (matches).
func fillHeaders(r Router, n int) {
	for i := range n {
		var args amqp.Table
		switch i % 4 {
		case 0:
			args = amqp.Table{"x-match": "all", "format": "pdf", "type": "report"}
		case 1:
			args = amqp.Table{"x-match": "any", "format": "zip", "n": int64(i)}
		case 2:
			args = amqp.Table{"x-match": "all", "format": "pdf", "missing": nil}
		case 3:
			args = amqp.Table{"x-match": "any-with-x", "x-trace": "1", "format": "zip"}
		}
		r.Bind(Binding{Destination: q(fmt.Sprintf("h-%d", i)), Args: args})
	}
}

func BenchmarkRouteHeaders(b *testing.B) {
	r := NewRouter(Headers)
	fillHeaders(r, 100)
	headers := amqp.Table{"format": "pdf", "type": "report", "n": int32(7), "x-trace": "1"}
	out := make([]Destination, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		out = r.Route("", headers, out[:0])
	}
	if len(out) != 50 {
		b.Fatalf("routed to %d", len(out))
	}
}
