package exchange

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/warrenmq/warren/amqp"
)

// ErrInvalidXMatch is what errors returned by ValidateHeadersArgs match with errors.Is.
var ErrInvalidXMatch = errors.New("exchange: invalid x-match binding argument")

// xMatchError carries RabbitMQ's wording, so that the caller can reply
// amqp.Errorf(amqp.PreconditionFailed, ..., "%s", err).
type xMatchError struct{ text string }

func (e *xMatchError) Error() string        { return e.text }
func (e *xMatchError) Is(target error) bool { return target == ErrInvalidXMatch }

// ValidateHeadersArgs checks the x-match argument of a binding to a headers exchange, as
// RabbitMQ's rabbit_exchange_type_headers:validate_binding does: absent, or one of the strings
// "all", "any", "all-with-x", "any-with-x". The error text is RabbitMQ's, e.g.
// `Invalid x-match field value <<"foo">>; expected all, any, all-with-x, or any-with-x`;
// the caller closes the channel with 406 PRECONDITION_FAILED and that text.
//
// Bind does not validate: a binding with an invalid x-match matches as "all" (RabbitMQ's
// legacy behaviour).
func ValidateHeadersArgs(args amqp.Table) error {
	v, ok := args["x-match"]
	if !ok {
		return nil
	}
	s, ok := v.(string)
	if !ok {
		return &xMatchError{fmt.Sprintf("Invalid x-match field type %s (value %s); expected longstr",
			amqp.TypeName(v), erlangTerm(v))}
	}
	if _, ok := parseXMatch(s); ok {
		return nil
	}
	return &xMatchError{fmt.Sprintf(
		"Invalid x-match field value %s; expected all, any, all-with-x, or any-with-x", erlangBinary(s))}
}

// parseXMatch returns whether the binding matches on any argument (rather than all) and
// whether arguments starting with "x-" take part.
func parseXMatch(s string) (mode headersMode, ok bool) {
	switch s {
	case "all":
		return headersMode{}, true
	case "any":
		return headersMode{any: true}, true
	case "all-with-x":
		return headersMode{withX: true}, true
	case "any-with-x":
		return headersMode{any: true, withX: true}, true
	}
	return headersMode{}, false
}

type headersMode struct{ any, withX bool }

// headersIndex routes by matching the message headers against each binding's arguments. It
// groups bindings by destination so that Route appends a destination once, on its first
// matching binding, without de-duplicating afterwards.
type headersIndex struct {
	dests []*headersDest
	pos   map[Destination]int // index into dests
}

type headersDest struct {
	dest     Destination
	matchers []headersMatcher
}

// headersMatcher is a binding's arguments compiled for matching: x-match parsed, and the
// arguments that do not take part (x-match itself; other x- keys unless *-with-x) dropped.
type headersMatcher struct {
	e    *bindingEntry
	any  bool
	args []headerArg
}

type headerArg struct {
	key  string
	val  any
	void bool // nil value: the header only has to be present
}

func compileHeaders(e *bindingEntry) headersMatcher {
	var mode headersMode
	if s, ok := e.b.Args["x-match"].(string); ok {
		mode, _ = parseXMatch(s) // invalid: "all", as RabbitMQ's parse_x_match
	}
	m := headersMatcher{e: e, any: mode.any}
	for k, v := range e.b.Args {
		if k == "x-match" || (!mode.withX && strings.HasPrefix(k, "x-")) {
			continue
		}
		m.args = append(m.args, headerArg{key: k, val: v, void: v == nil})
	}
	slices.SortFunc(m.args, func(a, b headerArg) int { return strings.Compare(a.key, b.key) })
	return m
}

// match is RabbitMQ's headers_match: with "all" every argument must be matched (so no
// arguments match every message), with "any" at least one (so no arguments match none).
func (m *headersMatcher) match(h amqp.Table) bool {
	if m.any {
		for i := range m.args {
			a := &m.args[i]
			if v, ok := h[a.key]; ok && (a.void || valuesMatch(a.val, v)) {
				return true
			}
		}
		return false
	}
	for i := range m.args {
		a := &m.args[i]
		v, ok := h[a.key]
		if !ok || (!a.void && !valuesMatch(a.val, v)) {
			return false
		}
	}
	return true
}

func (x *headersIndex) add(e *bindingEntry) {
	d := e.b.Destination
	i, ok := x.pos[d]
	if !ok {
		if x.pos == nil {
			x.pos = make(map[Destination]int)
		}
		i = len(x.dests)
		x.pos[d] = i
		x.dests = append(x.dests, &headersDest{dest: d})
	}
	hd := x.dests[i]
	hd.matchers = append(hd.matchers, compileHeaders(e))
}

func (x *headersIndex) remove(e *bindingEntry) {
	d := e.b.Destination
	i, ok := x.pos[d]
	if !ok {
		return
	}
	hd := x.dests[i]
	hd.matchers = slices.DeleteFunc(hd.matchers, func(m headersMatcher) bool { return m.e == e })
	if len(hd.matchers) > 0 {
		return
	}
	last := len(x.dests) - 1
	if i != last {
		x.dests[i] = x.dests[last]
		x.pos[x.dests[i].dest] = i
	}
	x.dests[last] = nil
	x.dests = x.dests[:last]
	delete(x.pos, d)
}

func (x *headersIndex) route(_ string, headers amqp.Table, out []Destination) []Destination {
	for _, hd := range x.dests {
		for i := range hd.matchers {
			if hd.matchers[i].match(headers) {
				out = append(out, hd.dest)
				break
			}
		}
	}
	return out
}

// valuesMatch reports whether header value v equals binding value p as RabbitMQ compares
// them (Erlang ==, the field types themselves are not compared): integers of any width,
// floats and timestamps by numeric value (int8(1), int64(1), 1.0 and the timestamp 1 are all
// equal); strings and byte arrays by content; arrays and tables element by element; other
// values (amqp.Decimal) when of the same type and ==. It does not allocate.
func valuesMatch(p, v any) bool {
	if x, ok := p.(string); ok { // the common case first
		switch y := v.(type) {
		case string:
			return x == y
		case []byte:
			return x == string(y)
		}
		return false
	}
	if pi, pf, pk := number(p); pk != notNumber {
		vi, vf, vk := number(v)
		switch {
		case vk == notNumber:
			return false
		case pk == intNumber && vk == intNumber:
			return pi == vi
		case pk == floatNumber && vk == floatNumber:
			return pf == vf
		case pk == intNumber:
			return floatIsInt(vf, pi)
		default:
			return floatIsInt(pf, vi)
		}
	}
	switch x := p.(type) {
	case nil:
		return v == nil
	case []byte:
		switch y := v.(type) {
		case string:
			return string(x) == y
		case []byte:
			return bytes.Equal(x, y)
		}
		return false
	case bool:
		y, ok := v.(bool)
		return ok && x == y
	case []any:
		y, ok := v.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !valuesMatch(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	if x, ok := asTable(p); ok {
		y, ok := asTable(v)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			if yv, ok := y[k]; !ok || !valuesMatch(xv, yv) {
				return false
			}
		}
		return true
	}
	t := reflect.TypeOf(p)
	return t == reflect.TypeOf(v) && t.Comparable() && p == v
}

type numberKind uint8

const (
	notNumber numberKind = iota
	intNumber
	floatNumber
)

// number returns v's numeric value. Timestamps are integers (seconds), as in RabbitMQ.
func number(v any) (int64, float64, numberKind) {
	switch x := v.(type) {
	case int8:
		return int64(x), 0, intNumber
	case uint8:
		return int64(x), 0, intNumber
	case int16:
		return int64(x), 0, intNumber
	case uint16:
		return int64(x), 0, intNumber
	case int32:
		return int64(x), 0, intNumber
	case uint32:
		return int64(x), 0, intNumber
	case int64:
		return x, 0, intNumber
	case int:
		return int64(x), 0, intNumber
	case uint:
		if uint64(x) <= math.MaxInt64 {
			return int64(x), 0, intNumber
		}
		return 0, float64(x), floatNumber
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), 0, intNumber
		}
		return 0, float64(x), floatNumber
	case float32:
		return 0, float64(x), floatNumber
	case float64:
		return 0, x, floatNumber
	case time.Time:
		return x.Unix(), 0, intNumber
	}
	return 0, 0, notNumber
}

// floatIsInt reports whether f is exactly the integer i.
func floatIsInt(f float64, i int64) bool {
	return f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 && int64(f) == i
}

// erlangTerm formats v roughly as Erlang's ~tp prints the decoded field value.
func erlangTerm(v any) string {
	switch x := v.(type) {
	case nil:
		return "undefined"
	case string:
		return erlangBinary(x)
	case []byte:
		return erlangBinary(string(x))
	case time.Time:
		return strconv.FormatInt(x.Unix(), 10)
	case amqp.Decimal:
		return fmt.Sprintf("{%d,%d}", x.Scale, x.Value)
	}
	return fmt.Sprint(v)
}

// erlangBinary formats s as Erlang's ~tp prints a binary: <<"abc">>, <<"é"/utf8>> or, when
// not printable, <<1,2,3>>.
func erlangBinary(s string) string {
	printable, ascii := utf8.ValidString(s), true
	for _, r := range s {
		if r >= utf8.RuneSelf {
			ascii = false
		}
		if !unicode.IsPrint(r) {
			printable = false
		}
	}
	var b strings.Builder
	b.WriteString("<<")
	if printable {
		b.WriteByte('"')
		for _, r := range s {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
		if !ascii {
			b.WriteString("/utf8")
		}
	} else {
		for i := 0; i < len(s); i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(int(s[i])))
		}
	}
	b.WriteString(">>")
	return b.String()
}
