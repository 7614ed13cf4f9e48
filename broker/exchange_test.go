package broker_test

import (
	"fmt"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker/brokertest"
)

// routesTo publishes one message to ex with key and headers and reports, for
// each queue of qs, whether it arrived (each queue is drained).
func routesTo(t testing.TB, ch *amqp091.Channel, ex, key string, headers amqp091.Table, qs ...string) []bool {
	t.Helper()
	pub(t, ch, ex, key, false, amqp091.Publishing{Headers: headers, Body: []byte("x")})
	got := make([]bool, len(qs))
	for i, q := range qs {
		switch n := len(drain(t, ch, q)); n {
		case 0:
		case 1:
			got[i] = true
		default:
			t.Fatalf("queue %q got %d copies of one publish", q, n)
		}
	}
	return got
}

func TestDirectExchange(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareX(t, ch, "dx", "direct")
	q1, q2, q3 := declareQ(t, ch, "q1", nil), declareQ(t, ch, "q2", nil), declareQ(t, ch, "q3", nil)
	bindQ(t, ch, q1, "a", "dx", nil)
	bindQ(t, ch, q2, "b", "dx", nil)
	bindQ(t, ch, q3, "a", "dx", nil)
	bindQ(t, ch, q3, "b", "dx", nil)
	for _, tc := range []struct {
		key  string
		want []bool
	}{
		{"a", []bool{true, false, true}},
		{"b", []bool{false, true, true}},
		{"c", []bool{false, false, false}},
		{"", []bool{false, false, false}},
		{"A", []bool{false, false, false}},
	} {
		if got := routesTo(t, ch, "dx", tc.key, nil, q1, q2, q3); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("key %q reached %v, want %v", tc.key, got, tc.want)
		}
	}
}

func TestFanoutExchange(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareX(t, ch, "fx", "fanout")
	q1, q2, q3 := declareQ(t, ch, "q1", nil), declareQ(t, ch, "q2", nil), declareQ(t, ch, "q3", nil)
	bindQ(t, ch, q1, "", "fx", nil)
	bindQ(t, ch, q2, "ignored", "fx", nil)
	bindQ(t, ch, q2, "other", "fx", nil) // a second binding: still one copy
	for _, key := range []string{"", "anything", "ignored"} {
		if got := routesTo(t, ch, "fx", key, nil, q1, q2, q3); fmt.Sprint(got) != "[true true false]" {
			t.Errorf("key %q reached %v", key, got)
		}
	}
}

func TestTopicExchange(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareX(t, ch, "tx", "topic")
	cases := []struct {
		binding string
		match   []string
		miss    []string
	}{
		{"a.b", []string{"a.b"}, []string{"a", "a.b.c", "a.B", "b.a"}},
		{"a.*", []string{"a.b", "a.", "a.xyz"}, []string{"a", "a.b.c", "b.a", ""}},
		{"*", []string{"a", "word"}, []string{"", "a.b", "."}},
		{"*.*", []string{"a.b", ".", "a."}, []string{"a", "a.b.c", ""}},
		{"#", []string{"", "a", "a.b.c", "."}, nil},
		{"a.#", []string{"a", "a.b", "a.b.c", "a."}, []string{"b", "", "ab"}},
		{"#.a", []string{"a", "x.a", "x.y.a", ".a"}, []string{"a.x", ""}},
		{"#.a.#", []string{"a", "x.a.y", "a.a", "x.y.a"}, []string{"x.y", ""}},
		{"#.#", []string{"", "a", "a.b.c"}, nil},
		{"*.#", []string{"a", "a.b"}, []string{""}},
		{"a.*.#", []string{"a.b", "a.b.c"}, []string{"a"}},
		{"a..b", []string{"a..b"}, []string{"a.b", "a.x.b"}},
		{"a.*.b", []string{"a..b", "a.x.b"}, []string{"a.b", "a.x.y.b"}},
		{"", []string{""}, []string{"a", "."}},
		{".", []string{"."}, []string{"", "a"}},
		{"a.", []string{"a."}, []string{"a", "a.b"}},
	}
	qs := make([]string, len(cases))
	for i, tc := range cases {
		qs[i] = declareQ(t, ch, fmt.Sprint("t", i), nil)
		bindQ(t, ch, qs[i], tc.binding, "tx", nil)
	}
	for i, tc := range cases {
		for _, key := range tc.match {
			if got := routesTo(t, ch, "tx", key, nil, qs...); !got[i] {
				t.Errorf("binding %q does not match routing key %q", tc.binding, key)
			}
		}
		for _, key := range tc.miss {
			if got := routesTo(t, ch, "tx", key, nil, qs...); got[i] {
				t.Errorf("binding %q matches routing key %q", tc.binding, key)
			}
		}
	}

	// A queue bound by several matching patterns receives one copy.
	q := declareQ(t, ch, "multi", nil)
	for _, b := range []string{"a.*", "#", "a.b", "*.b", "#.#"} {
		bindQ(t, ch, q, b, "tx", nil)
	}
	if got := routesTo(t, ch, "tx", "a.b", nil, q); !got[0] {
		t.Fatal("no copy")
	}
}

func TestHeadersExchange(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareX(t, ch, "hx", "headers")
	cases := []struct {
		args  amqp091.Table
		match []amqp091.Table
		miss  []amqp091.Table
	}{
		{ // x-match defaults to all
			amqp091.Table{"a": int32(1), "b": "x"},
			[]amqp091.Table{{"a": int32(1), "b": "x"}, {"a": int32(1), "b": "x", "c": "extra"}, {"a": int64(1), "b": "x"}},
			[]amqp091.Table{{"a": int32(1)}, {"a": int32(2), "b": "x"}, nil, {"a": "1", "b": "x"}},
		},
		{
			amqp091.Table{"x-match": "all", "a": int32(1)},
			[]amqp091.Table{{"a": int32(1)}},
			[]amqp091.Table{{"b": int32(1)}},
		},
		{
			amqp091.Table{"x-match": "any", "a": int32(1), "b": "x"},
			[]amqp091.Table{{"a": int32(1)}, {"b": "x"}, {"a": int32(9), "b": "x"}},
			[]amqp091.Table{{"c": int32(1)}, nil, {"a": int32(2)}},
		},
		{ // all and any ignore x- arguments
			amqp091.Table{"x-match": "all", "x-foo": "bar", "a": int32(1)},
			[]amqp091.Table{{"a": int32(1)}},
			nil,
		},
		{
			amqp091.Table{"x-match": "any", "x-foo": "bar"},
			nil,
			[]amqp091.Table{{"x-foo": "bar"}},
		},
		{ // the -with-x variants do not
			amqp091.Table{"x-match": "all-with-x", "x-foo": "bar", "a": int32(1)},
			[]amqp091.Table{{"a": int32(1), "x-foo": "bar"}},
			[]amqp091.Table{{"a": int32(1)}},
		},
		{
			amqp091.Table{"x-match": "any-with-x", "x-foo": "bar", "a": int32(1)},
			[]amqp091.Table{{"x-foo": "bar"}, {"a": int32(1)}},
			[]amqp091.Table{{"x-foo": "baz"}},
		},
		{ // a void value matches the header's presence
			amqp091.Table{"a": nil},
			[]amqp091.Table{{"a": "anything"}, {"a": int32(0)}, {"a": nil}},
			[]amqp091.Table{{"b": "x"}, nil},
		},
		{ // no arguments: all matches everything
			amqp091.Table{},
			[]amqp091.Table{nil, {"a": int32(1)}},
			nil,
		},
		{ // no arguments: any matches nothing
			amqp091.Table{"x-match": "any"},
			nil,
			[]amqp091.Table{nil, {"a": int32(1)}},
		},
	}
	qs := make([]string, len(cases))
	for i, tc := range cases {
		qs[i] = declareQ(t, ch, fmt.Sprint("h", i), nil)
		bindQ(t, ch, qs[i], "", "hx", tc.args)
	}
	for i, tc := range cases {
		for _, h := range tc.match {
			if got := routesTo(t, ch, "hx", "", h, qs...); !got[i] {
				t.Errorf("binding %v does not match headers %v", tc.args, h)
			}
		}
		for _, h := range tc.miss {
			if got := routesTo(t, ch, "hx", "", h, qs...); got[i] {
				t.Errorf("binding %v matches headers %v", tc.args, h)
			}
		}
	}

	// amq.headers and amq.match are headers exchanges too.
	for _, x := range []string{"amq.headers", "amq.match"} {
		q := declareQ(t, ch, "", nil)
		bindQ(t, ch, q, "", x, amqp091.Table{"x-match": "any", "k": "v"})
		if got := routesTo(t, ch, x, "", amqp091.Table{"k": "v"}, q); !got[0] {
			t.Errorf("%s did not route by headers", x)
		}
		if got := routesTo(t, ch, x, "k", nil, q); got[0] {
			t.Errorf("%s routed without headers", x)
		}
	}

	// An invalid x-match is refused.
	q := declareQ(t, ch, "", nil)
	err := ch.QueueBind(q, "", "hx", false, amqp091.Table{"x-match": "some"})
	e := expectCode(t, err, 406)
	expectReason(t, e, `PRECONDITION_FAILED - Invalid x-match field value <<"some">>; expected all, any, all-with-x, or any-with-x`)
}

func TestDefaultExchange(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	q := declareQ(t, ch, "named", nil)
	declareX(t, ch, "x", "direct")
	if got := routesTo(t, ch, "", "named", nil, q); !got[0] {
		t.Fatal("the default exchange does not route to a queue by its name")
	}
	if got := routesTo(t, ch, "", "nosuchqueue", nil, q); got[0] {
		t.Fatal("routed to the wrong queue")
	}
	const refused = "ACCESS_REFUSED - operation not permitted on the default exchange"
	for _, tc := range []struct {
		name string
		op   func(ch *amqp091.Channel) error
	}{
		{"queue.bind", func(ch *amqp091.Channel) error { return ch.QueueBind(q, "k", "", false, nil) }},
		{"queue.bind by the queue's name", func(ch *amqp091.Channel) error { return ch.QueueBind(q, q, "", false, nil) }},
		{"queue.unbind", func(ch *amqp091.Channel) error { return ch.QueueUnbind(q, q, "", nil) }},
		{"exchange.delete", func(ch *amqp091.Channel) error { return ch.ExchangeDelete("", false, false) }},
		{"exchange.declare", func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclare("", "direct", true, false, false, false, nil)
		}},
		{"exchange.declare passive", func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclarePassive("", "direct", true, false, false, false, nil)
		}},
		{"exchange.bind from it", func(ch *amqp091.Channel) error { return ch.ExchangeBind("x", "k", "", false, nil) }},
		{"exchange.bind to it", func(ch *amqp091.Channel) error { return ch.ExchangeBind("", "k", "x", false, nil) }},
		{"exchange.unbind", func(ch *amqp091.Channel) error { return ch.ExchangeUnbind("x", "k", "", false, nil) }},
	} {
		e := expectCode(t, tc.op(open(t, c)), 403)
		if e.Reason != refused {
			t.Errorf("%s: %q", tc.name, e.Reason)
		}
	}
	// Still routing.
	if got := routesTo(t, ch, "", "named", nil, q); !got[0] {
		t.Fatal("the default exchange stopped routing")
	}
}

func TestPredeclaredExchanges(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	for _, x := range []struct{ name, kind, key string }{
		{"amq.direct", "direct", "k"},
		{"amq.fanout", "fanout", "whatever"},
		{"amq.topic", "topic", "a.b"},
	} {
		if err := ch.ExchangeDeclarePassive(x.name, x.kind, true, false, false, false, nil); err != nil {
			t.Fatalf("%s: %v", x.name, err)
		}
		// Redeclaring a predeclared exchange with its own properties is
		// allowed (the reserved prefix only stops creation).
		if err := ch.ExchangeDeclare(x.name, x.kind, true, false, false, false, nil); err != nil {
			t.Fatalf("redeclare %s: %v", x.name, err)
		}
		q := declareQ(t, ch, "", nil)
		bindQ(t, ch, q, x.key, x.name, nil)
		if got := routesTo(t, ch, x.name, x.key, nil, q); !got[0] {
			t.Errorf("%s did not route", x.name)
		}
	}
	for _, x := range []string{"amq.headers", "amq.match"} {
		if err := ch.ExchangeDeclarePassive(x, "headers", true, false, false, false, nil); err != nil {
			t.Fatalf("%s: %v", x, err)
		}
	}

	e := expectCode(t, open(t, c).ExchangeDeclare("amq.direct", "fanout", true, false, false, false, nil), 406)
	expectReason(t, e, "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'amq.direct' in vhost '/': received 'fanout' but current is 'direct'")
	e = expectCode(t, open(t, c).ExchangeDeclare("amq.custom", "direct", false, false, false, false, nil), 403)
	expectReason(t, e, "ACCESS_REFUSED - exchange name 'amq.custom' contains reserved prefix 'amq.*'")
	e = expectCode(t, open(t, c).ExchangeDelete("amq.direct", false, false), 403)
	expectReason(t, e, "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed")
	// Passive declare of an amq. name that does not exist: 404, not 403.
	expectCode(t, open(t, c).ExchangeDeclarePassive("amq.custom", "direct", false, false, false, false, nil), 404)
	if err := open(t, c).ExchangeDeclarePassive("amq.direct", "direct", true, false, false, false, nil); err != nil {
		t.Fatalf("amq.direct gone: %v", err)
	}
}

func TestExchangeDeclare(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)

	e := expectCode(t, open(t, c).ExchangeDeclarePassive("nope", "direct", false, false, false, false, nil), 404)
	expectReason(t, e, "NOT_FOUND - no exchange 'nope' in vhost '/'")

	args := amqp091.Table{"alternate-exchange": "ae", "x-custom": int32(1)}
	if err := ch.ExchangeDeclare("e", "topic", true, true, false, false, args); err != nil {
		t.Fatal(err)
	}
	// Passive declare ignores everything but the name.
	if err := ch.ExchangeDeclarePassive("e", "fanout", false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	// An equivalent redeclare is fine; RabbitMQ compares only the
	// alternate-exchange argument.
	if err := ch.ExchangeDeclare("e", "topic", true, true, false, false, amqp091.Table{"alternate-exchange": "ae"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("e", "topic", true, true, false, true, args); err != nil { // nowait
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind                        string
		durable, autoDelete, intern bool
		args                        amqp091.Table
		text                        string
	}{
		{"direct", true, true, false, args, "inequivalent arg 'type' for exchange 'e' in vhost '/': received 'direct' but current is 'topic'"},
		{"topic", false, true, false, args, "inequivalent arg 'durable' for exchange 'e' in vhost '/': received 'false' but current is 'true'"},
		{"topic", true, false, false, args, "inequivalent arg 'auto_delete' for exchange 'e' in vhost '/': received 'false' but current is 'true'"},
		{"topic", true, true, true, args, "inequivalent arg 'internal' for exchange 'e' in vhost '/': received 'true' but current is 'false'"},
		{"topic", true, true, false, amqp091.Table{"alternate-exchange": "other"}, "inequivalent arg 'alternate-exchange' for exchange 'e' in vhost '/': received 'other' but current is 'ae'"},
		{"topic", true, true, false, nil, "inequivalent arg 'alternate-exchange' for exchange 'e' in vhost '/': received none but current is the value 'ae' of type 'longstr'"},
	} {
		err := open(t, c).ExchangeDeclare("e", tc.kind, tc.durable, tc.autoDelete, tc.intern, false, tc.args)
		expectReason(t, expectCode(t, err, 406), "PRECONDITION_FAILED - "+tc.text)
	}

	// Unknown exchange type: a connection error.
	closed := notifyConnClose(c)
	err := open(t, c).ExchangeDeclare("weird", "x-unknown", false, false, false, false, nil)
	expectReason(t, expectCode(t, err, 503), "COMMAND_INVALID - unknown exchange type 'x-unknown'")
	expectClosed(t, closed, 503)
}

func TestInternalExchange(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	if err := ch.ExchangeDeclare("inner", "fanout", false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	declareX(t, ch, "outer", "fanout")
	q := declareQ(t, ch, "", nil)
	bindQ(t, ch, q, "", "inner", nil)
	if err := ch.ExchangeBind("inner", "", "outer", false, nil); err != nil {
		t.Fatal(err)
	}
	// Reachable through an exchange-to-exchange binding ...
	if got := routesTo(t, ch, "outer", "", nil, q); !got[0] {
		t.Fatal("not routed through the internal exchange")
	}
	// ... but not by publishing to it.
	pch := open(t, c)
	closed := notifyClose(pch)
	pubText(t, pch, "inner", "", "x")
	expectReason(t, expectClosed(t, closed, 403), "ACCESS_REFUSED - cannot publish to internal exchange 'inner' in vhost '/'")
	expectEmpty(t, ch, q)
}

func TestPublishToMissingExchange(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	closed := notifyClose(ch)
	pubText(t, ch, "missing", "k", "x")
	expectReason(t, expectClosed(t, closed, 404), "NOT_FOUND - no exchange 'missing' in vhost '/'")
	// The connection is fine.
	declareQ(t, open(t, c), "still-ok", nil)
}

func TestExchangeDelete(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	declareX(t, ch, "src", "fanout")
	declareX(t, ch, "dst", "fanout")
	q := declareQ(t, ch, "", nil)
	bindQ(t, ch, q, "", "src", nil)
	if err := ch.ExchangeBind("dst", "", "src", false, nil); err != nil {
		t.Fatal(err)
	}
	bindQ(t, ch, q, "", "dst", nil)

	err := open(t, c).ExchangeDelete("src", true, false)
	expectReason(t, expectCode(t, err, 406), "PRECONDITION_FAILED - exchange 'src' in vhost '/' in use")
	// "dst" is the destination of a binding but the source of one too.
	expectCode(t, open(t, c).ExchangeDelete("dst", true, false), 406)

	// Unused: only bound as a destination.
	declareX(t, ch, "leaf", "fanout")
	if err := ch.ExchangeBind("leaf", "", "src", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDelete("leaf", true, false); err != nil {
		t.Fatalf("if-unused delete of an exchange with no bindings from it: %v", err)
	}

	if err := ch.ExchangeDelete("src", false, false); err != nil {
		t.Fatal(err)
	}
	expectCode(t, open(t, c).ExchangeDeclarePassive("src", "fanout", false, false, false, false, nil), 404)
	// Deleting a missing exchange is not an error.
	if err := ch.ExchangeDelete("src", false, false); err != nil {
		t.Fatal(err)
	}
	// Redeclared, it has no bindings left: neither to q nor to "dst" (which
	// q is bound to as well).
	declareX(t, ch, "src", "fanout")
	if got := routesTo(t, ch, "src", "", nil, q); got[0] {
		t.Fatal("bindings of a deleted exchange survived")
	}
	if err := ch.ExchangeDelete("src", true, false); err != nil {
		t.Fatal(err)
	}
}

// TestPublishThroughExchangeDeletedMidMessage: a message whose exchange is
// deleted between its basic.publish and its last body frame routes nowhere
// (mandatory: basic.return NO_ROUTE), not through an exchange of the same
// name declared since, as RabbitMQ routes by the exchange it looked up.
func TestPublishThroughExchangeDeletedMidMessage(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareX(t, ch, "mid", "direct")
	before := declareQ(t, ch, "", nil)
	bindQ(t, ch, before, "k", "mid", nil)

	r := rawOpen(t, s.Addr, defaultTune)
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	r.send(1, &amqp.BasicPublish{Exchange: "mid", RoutingKey: "k", Mandatory: true})
	r.write(amqp.AppendHeaderFrame(nil, 1, amqp.ClassBasic, 1, &amqp.Properties{}))
	// The connection's frames are handled in order: once channel 2 is
	// open, the publish has looked its exchange up.
	r.send(2, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 2)

	if err := ch.ExchangeDelete("mid", false, false); err != nil {
		t.Fatal(err)
	}
	declareX(t, ch, "mid", "direct")
	after := declareQ(t, ch, "", nil)
	bindQ(t, ch, after, "k", "mid", nil)

	r.write(amqp.AppendBodyFrames(nil, 1, []byte("x"), 131072))
	ret := rawExpect[*amqp.BasicReturn](r, 1)
	if ret.ReplyCode != amqp.NoRoute || ret.Exchange != "mid" {
		t.Fatalf("basic.return %d %q from %q, want %d NO_ROUTE from mid", ret.ReplyCode, ret.ReplyText, ret.Exchange, amqp.NoRoute)
	}
	for _, q := range []string{before, after} {
		if got := drain(t, ch, q); len(got) != 0 {
			t.Fatalf("queue %s got %q through a deleted exchange", q, got)
		}
	}
	// The exchange declared since routes.
	if got := routesTo(t, ch, "mid", "k", nil, after); !got[0] {
		t.Fatal("the redeclared exchange does not route")
	}
}

func TestExchangeToExchange(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	declareX(t, ch, "e1", "topic")
	declareX(t, ch, "e2", "direct")
	declareX(t, ch, "e3", "fanout")
	q2, q3 := declareQ(t, ch, "q2", nil), declareQ(t, ch, "q3", nil)
	bindQ(t, ch, q2, "a.b", "e2", nil)
	bindQ(t, ch, q3, "", "e3", nil)
	if err := ch.ExchangeBind("e2", "a.*", "e1", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeBind("e3", "#", "e2", false, nil); err != nil { // direct: key "#" literally
		t.Fatal(err)
	}
	if got := routesTo(t, ch, "e1", "a.b", nil, q2, q3); fmt.Sprint(got) != "[true false]" {
		t.Fatalf("a.b reached %v", got)
	}
	if got := routesTo(t, ch, "e1", "a.c", nil, q2, q3); fmt.Sprint(got) != "[false false]" {
		t.Fatalf("a.c reached %v", got)
	}
	if err := ch.ExchangeBind("e3", "a.c", "e2", false, nil); err != nil {
		t.Fatal(err)
	}
	if got := routesTo(t, ch, "e1", "a.c", nil, q2, q3); fmt.Sprint(got) != "[false true]" {
		t.Fatalf("a.c reached %v", got)
	}
	if err := ch.ExchangeUnbind("e2", "a.*", "e1", false, nil); err != nil {
		t.Fatal(err)
	}
	if got := routesTo(t, ch, "e1", "a.b", nil, q2, q3); fmt.Sprint(got) != "[false false]" {
		t.Fatalf("after unbind a.b reached %v", got)
	}

	// Cycles are harmless: every queue gets one copy.
	declareX(t, ch, "c1", "fanout")
	declareX(t, ch, "c2", "fanout")
	declareX(t, ch, "c3", "fanout")
	for _, b := range [][2]string{{"c2", "c1"}, {"c3", "c2"}, {"c1", "c3"}, {"c1", "c1"}, {"c1", "c2"}} {
		if err := ch.ExchangeBind(b[0], "", b[1], false, nil); err != nil {
			t.Fatal(err)
		}
	}
	qa, qb := declareQ(t, ch, "qa", nil), declareQ(t, ch, "qb", nil)
	bindQ(t, ch, qa, "", "c1", nil)
	bindQ(t, ch, qa, "", "c3", nil)
	bindQ(t, ch, qb, "", "c2", nil)
	for _, x := range []string{"c1", "c2", "c3"} {
		if got := routesTo(t, ch, x, "", nil, qa, qb); fmt.Sprint(got) != "[true true]" {
			t.Fatalf("publish to %s reached %v", x, got)
		}
	}

	// Missing ends.
	err := open(t, c).ExchangeBind("nope", "", "e1", false, nil)
	expectReason(t, expectCode(t, err, 404), "NOT_FOUND - no exchange 'nope' in vhost '/'")
	err = open(t, c).ExchangeBind("e1", "", "nope", false, nil)
	expectReason(t, expectCode(t, err, 404), "NOT_FOUND - no exchange 'nope' in vhost '/'")
}

func TestAutoDeleteExchange(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	gone := func(x string) bool {
		err := open(t, c).ExchangeDeclarePassive(x, "fanout", false, true, false, false, nil)
		if err != nil && amqpCode(err) != 404 {
			t.Fatalf("passive declare %s: %v", x, err)
		}
		return err != nil
	}
	autoX := func(x string) {
		t.Helper()
		if err := ch.ExchangeDeclare(x, "fanout", false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}

	// Never bound: it stays.
	autoX("idle")
	if gone("idle") {
		t.Fatal("auto-delete exchange without bindings was deleted")
	}

	// Last queue binding removed by unbind.
	autoX("ad1")
	q1, q2 := declareQ(t, ch, "", nil), declareQ(t, ch, "", nil)
	bindQ(t, ch, q1, "", "ad1", nil)
	bindQ(t, ch, q2, "", "ad1", nil)
	if err := ch.QueueUnbind(q1, "", "ad1", nil); err != nil {
		t.Fatal(err)
	}
	if gone("ad1") {
		t.Fatal("deleted with a binding left")
	}
	if err := ch.QueueUnbind(q2, "", "ad1", nil); err != nil {
		t.Fatal(err)
	}
	if !gone("ad1") {
		t.Fatal("auto-delete exchange survived its last unbind")
	}

	// Last binding removed by deleting the queue.
	autoX("ad2")
	q3 := declareQ(t, ch, "", nil)
	bindQ(t, ch, q3, "", "ad2", nil)
	if _, err := ch.QueueDelete(q3, false, false, false); err != nil {
		t.Fatal(err)
	}
	if !gone("ad2") {
		t.Fatal("auto-delete exchange survived the deletion of its last bound queue")
	}

	// Exchange-to-exchange: removed when its destination exchange goes, and
	// when the exchange binding is unbound.
	autoX("ad3")
	declareX(t, ch, "d3", "fanout")
	if err := ch.ExchangeBind("d3", "", "ad3", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDelete("d3", false, false); err != nil {
		t.Fatal(err)
	}
	if !gone("ad3") {
		t.Fatal("auto-delete exchange survived the deletion of its last destination exchange")
	}
	autoX("ad4")
	declareX(t, ch, "d4", "fanout")
	if err := ch.ExchangeBind("d4", "", "ad4", false, nil); err != nil {
		t.Fatal(err)
	}
	// Being a destination does not keep it alive, nor does it count.
	if err := ch.ExchangeBind("ad4", "", "d4", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeUnbind("d4", "", "ad4", false, nil); err != nil {
		t.Fatal(err)
	}
	if !gone("ad4") {
		t.Fatal("auto-delete exchange survived its last exchange unbind")
	}
}
