package amqp

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestTableRoundTrip(t *testing.T) {
	ts := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	tests := []struct {
		name string
		in   any // value to encode
		want any // value decoded, if different
	}{
		{"bool true", true, nil},
		{"bool false", false, nil},
		{"int8", int8(-5), nil},
		{"uint8", uint8(250), nil},
		{"int16", int16(-30000), nil},
		{"uint16", uint16(60000), nil},
		{"int32", int32(-2_000_000_000), nil},
		{"uint32", uint32(4_000_000_000), nil},
		{"int64", int64(math.MinInt64), nil},
		{"int", 42, int64(42)},
		{"float32", float32(1.5), nil},
		{"float64", -2.25, nil},
		{"float64 inf", math.Inf(1), nil},
		{"decimal", Decimal{Scale: 2, Value: -12345}, nil},
		{"string", "hello", nil},
		{"long string", strings.Repeat("s", 70000), nil},
		{"empty string", "", nil},
		{"timestamp", ts, nil},
		{"timestamp local", ts.In(time.FixedZone("x", 3600)), ts},
		{"timestamp subsecond", ts.Add(time.Millisecond), ts},
		{"timestamp max", time.Unix(math.MaxInt64, 0).UTC(), nil},
		{"timestamp before 1970", time.Unix(-1e10, 0).UTC(), nil},
		{"void", nil, nil},
		{"bytes", []byte{0, 1, 0xff}, nil},
		{"empty bytes", []byte{}, []byte(nil)},
		{"array", []any{int32(1), "two", []any{true, nil}, Table{"k": int8(1)}}, nil},
		{"empty array", []any{}, []any(nil)},
		{"table", Table{"a": int32(1), "b": Table{"c": "d", "e": []any{Decimal{1, 2}}}}, nil},
		{"map", map[string]any{"a": "b"}, Table{"a": "b"}},
		{"empty table", Table{}, Table(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want == nil {
				want = tt.in
			}
			in := Table{"key": tt.in}
			b, err := in.AppendTo([]byte("prefix"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(b, []byte("prefix")) {
				t.Fatal("AppendTo did not append")
			}
			got, n, err := DecodeTable(b[6:])
			if err != nil {
				t.Fatal(err)
			}
			if n != len(b)-6 {
				t.Errorf("consumed %d of %d bytes", n, len(b)-6)
			}
			if !reflect.DeepEqual(got, Table{"key": want}) {
				t.Errorf("got %#v, want %#v", got["key"], want)
			}
			if err := in.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestTableNaN(t *testing.T) {
	b, err := Table{"f": float32(math.NaN()), "d": math.NaN()}.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := DecodeTable(b)
	if err != nil || !math.IsNaN(float64(got["f"].(float32))) || !math.IsNaN(got["d"].(float64)) {
		t.Errorf("NaN: %v %v", got, err)
	}
}

func TestTableBytes(t *testing.T) {
	b, err := Table{"a": int32(1)}.AppendTo(nil)
	want := []byte{0, 0, 0, 7, 1, 'a', 'I', 0, 0, 0, 1}
	if err != nil || !bytes.Equal(b, want) {
		t.Errorf("got % x, %v; want % x", b, err, want)
	}
	b, _ = Table{"x": []any{"s", Decimal{Scale: 3, Value: 5}}}.AppendTo(nil)
	want = []byte{0, 0, 0, 0x13, 1, 'x', 'A', 0, 0, 0, 0x0c, 'S', 0, 0, 0, 1, 's', 'D', 3, 0, 0, 0, 5}
	if !bytes.Equal(b, want) {
		t.Errorf("got % x; want % x", b, want)
	}
	if b, _ := Table(nil).AppendTo(nil); !bytes.Equal(b, []byte{0, 0, 0, 0}) {
		t.Errorf("nil table: % x", b)
	}
}

func TestTableEncodeErrors(t *testing.T) {
	self := Table{}
	self["self"] = self
	tests := []struct {
		name string
		t    Table
		want error
	}{
		{"uint64", Table{"k": uint64(1)}, ErrUnsupportedValue},
		{"struct", Table{"k": struct{}{}}, ErrUnsupportedValue},
		{"nested", Table{"k": []any{Table{"x": uint(1)}}}, ErrUnsupportedValue},
		{"long key", Table{strings.Repeat("k", 256): 1}, ErrShortstrTooLong},
		{"cycle", self, ErrTableTooDeep},
	}
	for _, tt := range tests {
		b, err := tt.t.AppendTo([]byte{1, 2})
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: err %v, want %v", tt.name, err, tt.want)
		}
		if !bytes.Equal(b, []byte{1, 2}) {
			t.Errorf("%s: buffer changed on error: % x", tt.name, b)
		}
		if err := tt.t.Validate(); !errors.Is(err, tt.want) {
			t.Errorf("%s: Validate: %v", tt.name, err)
		}
	}
}

// nest returns a table nested depth deep (depth 1 = a flat table).
func nest(depth int) Table {
	t := Table{"leaf": true}
	for range depth - 1 {
		t = Table{"t": t}
	}
	return t
}

func TestTableDepth(t *testing.T) {
	ok := nest(MaxTableDepth)
	b, err := ok.AppendTo(nil)
	if err != nil {
		t.Fatalf("depth %d: %v", MaxTableDepth, err)
	}
	if _, _, err := DecodeTable(b); err != nil {
		t.Fatalf("decode depth %d: %v", MaxTableDepth, err)
	}
	if _, err := nest(MaxTableDepth + 1).AppendTo(nil); !errors.Is(err, ErrTableTooDeep) {
		t.Errorf("encode depth %d: %v", MaxTableDepth+1, err)
	}

	// Hand-build a table one level too deep: each level is
	// {len, 1, 't', 'F', <inner>}.
	inner := []byte{0, 0, 0, 0}
	for range MaxTableDepth {
		level := []byte{0, 0, 0, 0, 1, 't', 'F'}
		level = append(level, inner...)
		putLen(level)
		inner = level
	}
	_, _, err = DecodeTable(inner)
	var e *Error
	if !errors.As(err, &e) || e.Code != FrameError {
		t.Errorf("decode depth %d: %v, want 501", MaxTableDepth+1, err)
	}

	// Arrays count as levels too.
	arr := []byte{0, 0, 0, 0}
	for range MaxTableDepth * 2 {
		level := []byte{0, 0, 0, 0, 'A'}
		level = append(level, arr...)
		putLen(level)
		arr = level
	}
	arr = append([]byte{0, 0, 0, 0, 1, 'a', 'A'}, arr...)
	putLen(arr)
	if _, _, err := DecodeTable(arr); !errors.As(err, &e) || e.Code != FrameError {
		t.Errorf("deep arrays: %v, want 501", err)
	}
}

func putLen(b []byte) {
	n := len(b) - 4
	b[0], b[1], b[2], b[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
}

func TestTableDecodeErrors(t *testing.T) {
	tests := map[string][]byte{
		"short length":    {0, 0, 0},
		"length too long": {0, 0, 0, 5, 1, 'a', 'V'},
		"huge length":     {0xff, 0xff, 0xff, 0xff, 1, 'a', 'V'},
		"key past end":    {0, 0, 0, 2, 5, 'a'},
		"no value":        {0, 0, 0, 2, 1, 'a'},
		"unknown type":    {0, 0, 0, 3, 1, 'a', 'Z'},
		"short int":       {0, 0, 0, 4, 1, 'a', 'I', 0},
		"string past end": {0, 0, 0, 8, 1, 'a', 'S', 0xff, 0xff, 0xff, 0xff, 'x'},
		"bytes past end":  {0, 0, 0, 7, 1, 'a', 'x', 0, 0, 0, 1},
		"array past end":  {0, 0, 0, 8, 1, 'a', 'A', 0, 0, 0, 9, 'V'},
		"array bad elem":  {0, 0, 0, 8, 1, 'a', 'A', 0, 0, 0, 1, 'Q'},
		"nested bad":      {0, 0, 0, 10, 1, 'a', 'F', 0, 0, 0, 3, 1, 'b', 'Q'},
	}
	for name, b := range tests {
		_, _, err := DecodeTable(b)
		var e *Error
		if !errors.As(err, &e) || e.Code != FrameError {
			t.Errorf("%s: %v, want 501", name, err)
		}
	}
	// Every strict prefix of a valid table fails cleanly.
	full, _ := Table{"a": []any{int32(1), "x"}, "b": Table{"c": Decimal{1, 1}}, "d": time.Unix(5, 0).UTC(), "e": []byte("xx")}.AppendTo(nil)
	for n := range len(full) {
		if _, _, err := DecodeTable(full[:n]); err == nil {
			t.Errorf("prefix %d decoded", n)
		}
	}
	// Trailing bytes after the table are not consumed.
	if _, n, err := DecodeTable(append(full, 9, 9)); err != nil || n != len(full) {
		t.Errorf("trailing: n=%d err=%v", n, err)
	}
}

func TestTableNoAlias(t *testing.T) {
	b, _ := Table{"s": "abc", "x": []byte("def")}.AppendTo(nil)
	got, _, _ := DecodeTable(b)
	for i := range b {
		b[i] = 0
	}
	if got["s"] != "abc" || string(got["x"].([]byte)) != "def" {
		t.Errorf("decoded table aliases input: %v", got)
	}
}

func TestTypeName(t *testing.T) {
	for v, want := range map[any]string{
		true: "bool", int8(1): "byte", uint8(1): "unsignedbyte", int16(1): "short", int32(1): "signedint",
		uint32(1): "unsignedint", int64(1): "long", float64(1): "double", "s": "longstr",
	} {
		if got := TypeName(v); got != want {
			t.Errorf("TypeName(%T) = %q, want %q", v, got, want)
		}
	}
	if TypeName(nil) != "void" || TypeName(Table{}) != "table" || TypeName([]byte("x")) != "binary" || TypeName([]any{}) != "array" {
		t.Error("TypeName of void, table, binary or array wrong")
	}
}

// TestMethodDecoderMaxTableDepth checks MethodDecoder.MaxTableDepth on
// method arguments (every method with a table argument, nested in a table
// or an array) and on content headers.
func TestMethodDecoderMaxTableDepth(t *testing.T) {
	deepArray := Table{"a": []any{nest(2)}} // table, array, table, table: depth 4
	tests := []struct {
		name  string
		limit int
		args  Table
		ok    bool
	}{
		{"default accepts MaxTableDepth", 0, nest(MaxTableDepth), true},
		{"within limit", 3, nest(3), true},
		{"over limit", 3, nest(4), false},
		{"array counts", 4, deepArray, true},
		{"array counts over limit", 3, deepArray, false},
		{"limit 1 accepts a flat table", 1, Table{"x": int32(1)}, true},
		{"limit 1 refuses nesting", 1, nest(2), false},
		{"above MaxTableDepth is MaxTableDepth", MaxTableDepth + 10, nest(MaxTableDepth), true},
	}
	for _, tt := range tests {
		d := MethodDecoder{MaxTableDepth: tt.limit}
		for _, m := range allMethods() {
			f := reflect.ValueOf(m).Elem()
			var set bool
			for i := range f.NumField() {
				if f.Field(i).Type() == reflect.TypeFor[Table]() {
					f.Field(i).Set(reflect.ValueOf(tt.args))
					set = true
				}
			}
			if !set {
				continue
			}
			if _, ok := m.(depthDecoder); !ok {
				t.Fatalf("%s has a table argument but no decodeDepth", m.Name())
			}
			_, err := d.Decode(m.AppendTo(nil))
			var e *Error
			switch {
			case tt.ok && err != nil:
				t.Errorf("%s: %s: %v", tt.name, m.Name(), err)
			case !tt.ok && (!errors.As(err, &e) || e.Code != FrameError || e.ClassID != m.ClassID() || e.MethodID != m.MethodID()):
				t.Errorf("%s: %s: %v, want 501 naming the method", tt.name, m.Name(), err)
			}
		}

		h := ContentHeader{ClassID: ClassBasic, BodySize: 1, Properties: Properties{Headers: tt.args}}
		b, err := h.AppendTo(nil)
		if err != nil {
			t.Fatal(err)
		}
		var got ContentHeader
		err = d.DecodeContentHeader(b, &got)
		var e *Error
		switch {
		case tt.ok && (err != nil || !reflect.DeepEqual(got.Properties.Headers, tt.args)):
			t.Errorf("%s: content header: %v, headers %v", tt.name, err, got.Properties.Headers)
		case !tt.ok && (!errors.As(err, &e) || e.Code != FrameError):
			t.Errorf("%s: content header: %v, want 501", tt.name, err)
		}
		// The package function keeps the default limit.
		if err := DecodeContentHeader(b, &got); err != nil {
			t.Errorf("%s: DecodeContentHeader: %v", tt.name, err)
		}
	}
}
