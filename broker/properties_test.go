package broker_test

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// richHeaders uses every field-table type amqp091-go encodes, nested.
func richHeaders() amqp091.Table {
	ts := time.Unix(1700000000, 0) // amqp091-go decodes timestamps in local time
	return amqp091.Table{
		"longstr": "text ✓",
		"bytes":   []byte{0, 1, 2, 0xfe, 0xff},
		"true":    true,
		"false":   false,
		"int8":    int8(-8),
		"uint8":   uint8(200),
		"int16":   int16(-16000),
		"int32":   int32(-2000000000),
		"int64":   int64(-9000000000000000000),
		"float32": float32(1.5),
		"float64": float64(-2.25e100),
		"decimal": amqp091.Decimal{Scale: 3, Value: -123456},
		"time":    ts,
		"void":    nil,
		"array": []interface{}{
			"s", int32(1), int64(2), true, nil, []byte("b"), ts,
			amqp091.Decimal{Scale: 1, Value: 5},
			[]interface{}{"nested", []interface{}{int16(3)}},
			amqp091.Table{"in-array": int8(1)},
		},
		"table": amqp091.Table{
			"level2": amqp091.Table{
				"level3": amqp091.Table{"deep": "yes", "arr": []interface{}{float64(1)}},
			},
			"empty": amqp091.Table{},
		},
		"empty-table": amqp091.Table{},
	}
}

func TestPropertiesRoundTrip(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	q := declareQ(t, ch, "", nil)
	declareX(t, ch, "hx", "headers")
	bindQ(t, ch, q, "", "hx", amqp091.Table{"x-match": "all", "int32": int32(-2000000000), "void": nil})
	p := amqp091.Publishing{
		Headers:         richHeaders(),
		ContentType:     "application/octet-stream",
		ContentEncoding: "gzip",
		DeliveryMode:    2,
		Priority:        7,
		CorrelationId:   "corr-1",
		ReplyTo:         "reply-queue",
		Expiration:      "3600000",
		MessageId:       "msg-1",
		Timestamp:       time.Unix(1600000000, 0),
		Type:            "event.kind",
		UserId:          "guest",
		AppId:           "warren-test",
		Body:            []byte("payload"),
	}
	check := func(how string, d amqp091.Delivery) {
		t.Helper()
		got := amqp091.Publishing{
			Headers: d.Headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
			DeliveryMode: d.DeliveryMode, Priority: d.Priority, CorrelationId: d.CorrelationId,
			ReplyTo: d.ReplyTo, Expiration: d.Expiration, MessageId: d.MessageId,
			Timestamp: d.Timestamp, Type: d.Type, UserId: d.UserId, AppId: d.AppId, Body: d.Body,
		}
		if !reflect.DeepEqual(got, p) {
			t.Fatalf("%s:\n got %#v\nwant %#v", how, got, p)
		}
		if d.Exchange != "hx" || d.RoutingKey != "rk" {
			t.Fatalf("%s: exchange %q routing key %q", how, d.Exchange, d.RoutingKey)
		}
	}
	pub(t, ch, "hx", "rk", false, p)
	pub(t, ch, "hx", "rk", false, p)
	m, ok, err := ch.Get(q, true)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	check("basic.get", m)
	d, err := ch.Consume(q, "c", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("basic.deliver", recv(t, d))

	// basic.return carries them too.
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
	pub(t, ch, "", "nowhere", true, p)
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || r.ReplyText != "NO_ROUTE" || r.Exchange != "" || r.RoutingKey != "nowhere" {
			t.Fatalf("return %d %q %q %q", r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)
		}
		got := amqp091.Publishing{
			Headers: r.Headers, ContentType: r.ContentType, ContentEncoding: r.ContentEncoding,
			DeliveryMode: r.DeliveryMode, Priority: r.Priority, CorrelationId: r.CorrelationId,
			ReplyTo: r.ReplyTo, Expiration: r.Expiration, MessageId: r.MessageId,
			Timestamp: r.Timestamp, Type: r.Type, UserId: r.UserId, AppId: r.AppId, Body: r.Body,
		}
		if !reflect.DeepEqual(got, p) {
			t.Fatalf("basic.return:\n got %#v\nwant %#v", got, p)
		}
	case <-waitLimit():
		t.Fatal("no basic.return")
	}
}

func TestContentHeaderByteExact(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	w := dialWire(t, s)
	w.send(1, &amqp.QueueDeclare{Queue: "exact"})
	w.expect(1, &amqp.QueueDeclareOk{})
	w.send(1, &amqp.BasicConsume{Queue: "exact", ConsumerTag: "c", NoAck: true})
	w.expect(1, &amqp.BasicConsumeOk{})

	headers := amqp.Table{
		"s": "str", "x": []byte{1, 2}, "t": true, "b": int8(-1), "B": uint8(1), "sh": int16(-2),
		"u": uint16(2), "I": int32(-3), "i": uint32(3), "l": int64(-4), "f": float32(0.5),
		"d": float64(0.25), "D": amqp.Decimal{Scale: 2, Value: 314}, "T": time.Unix(1, 0).UTC(),
		"V": nil, "A": []any{int32(1), "two", []any{}, amqp.Table{}},
		"F": amqp.Table{"n": amqp.Table{"m": amqp.Table{"o": []any{amqp.Table{"p": "q"}}}}},
	}
	all := &amqp.Properties{
		ContentType: "text/plain", ContentEncoding: "utf-8", Headers: headers, DeliveryMode: 1,
		Priority: 9, CorrelationID: "c", ReplyTo: "r", Expiration: "1000000", MessageID: "m",
		Timestamp: 1234567890, Type: "t", UserID: "guest", AppID: "a", ClusterID: "cl",
	}
	for _, props := range []*amqp.Properties{all, nil, {DeliveryMode: 2}, {Headers: amqp.Table{}}} {
		body := []byte("body")
		frame := amqp.AppendHeaderFrame(nil, 1, amqp.ClassBasic, uint64(len(body)), props)
		sent := frame[amqp.FrameHeaderSize : len(frame)-1]
		b := amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "exact"})
		b = append(b, frame...)
		b = amqp.AppendBodyFrames(b, 1, body, 0)
		w.write(b)
		_, got, gotBody := w.delivery(1)
		if !bytes.Equal(got, sent) {
			t.Fatalf("content header changed in transit:\nsent %x\n got %x", sent, got)
		}
		if !bytes.Equal(gotBody, body) {
			t.Fatalf("body %q", gotBody)
		}
	}
}

func TestBodySizes(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	declareX(t, ch, "fan", "fanout")
	q1, q2 := declareQ(t, ch, "", nil), declareQ(t, ch, "", nil)
	bindQ(t, ch, q1, "", "fan", nil)
	bindQ(t, ch, q2, "", "fan", nil)
	d, err := ch.Consume(q1, "c", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	frameMax := c.Config.FrameSize
	if frameMax == 0 {
		t.Fatal("no negotiated frame size")
	}
	body := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + i/251)
		}
		return b
	}
	// Around the body frame payload size (frame-max minus 8), around the
	// size from which bodies are written by reference, and 1 MiB.
	for _, n := range []int{0, 1, frameMax - 9, frameMax - 8, frameMax - 7, 8<<10 - 1, 8 << 10, 2*(frameMax-8) + 1, 1 << 20} {
		want := body(n)
		pub(t, ch, "fan", "", false, amqp091.Publishing{Body: want})
		if m := recv(t, d); !bytes.Equal(m.Body, want) {
			t.Fatalf("delivered body of %d bytes differs (got %d bytes)", n, len(m.Body))
		}
		m, ok, err := ch.Get(q2, true)
		if err != nil || !ok || !bytes.Equal(m.Body, want) {
			t.Fatalf("got body of %d bytes: ok=%v err=%v len %d", n, ok, err, len(m.Body))
		}
	}
}

func TestBodyFramesOnTheWire(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	w := dialWire(t, s)
	w.send(1, &amqp.QueueDeclare{Queue: "frames"})
	w.expect(1, &amqp.QueueDeclareOk{})
	// A 300 KiB body published in small frames comes back in frames of at
	// most frame-max bytes.
	body := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16)
	b := amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "frames"})
	b = amqp.AppendHeaderFrame(b, 1, amqp.ClassBasic, uint64(len(body)), nil)
	b = amqp.AppendBodyFrames(b, 1, body, 1000)
	w.write(b)
	w.send(1, &amqp.BasicGet{Queue: "frames", NoAck: true})
	w.expect(1, &amqp.BasicGetOk{})
	h := w.frame()
	if h.Type != amqp.FrameHeader {
		t.Fatalf("frame type %d", h.Type)
	}
	var got []byte
	frames := 0
	for len(got) < len(body) {
		f := w.frame()
		if f.Type != amqp.FrameBody {
			t.Fatalf("frame type %d after %d body bytes", f.Type, len(got))
		}
		if len(f.Payload)+8 > 131072 || len(f.Payload) == 0 {
			t.Fatalf("body frame of %d bytes", len(f.Payload))
		}
		frames++
		got = append(got, f.Payload...)
	}
	if !bytes.Equal(got, body) || frames != 3 {
		t.Fatalf("body of %d bytes in %d frames", len(got), frames)
	}
}

func TestMandatoryReturn(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	returns := ch.NotifyReturn(make(chan amqp091.Return, 4))
	q := declareQ(t, ch, "", nil)
	declareX(t, ch, "lonely", "direct")
	pub(t, ch, "", q, true, amqp091.Publishing{Body: []byte("routed")})
	pub(t, ch, "lonely", "k", true, amqp091.Publishing{Body: []byte("unbound")})
	pub(t, ch, "", "nowhere", false, amqp091.Publishing{Body: []byte("dropped")})
	pub(t, ch, "", "nowhere", true, amqp091.Publishing{Body: []byte("returned"), MessageId: "id"})
	// A synchronous method answered after the publishes: any return is
	// already with the client.
	if n := readyCount(t, ch, q); n != 1 {
		t.Fatalf("ready = %d", n)
	}
	for _, want := range []struct{ ex, key, body string }{{"lonely", "k", "unbound"}, {"", "nowhere", "returned"}} {
		select {
		case r := <-returns:
			if r.ReplyCode != 312 || r.ReplyText != "NO_ROUTE" || r.Exchange != want.ex || r.RoutingKey != want.key || string(r.Body) != want.body {
				t.Fatalf("return %d %q %q %q %q, want %+v", r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey, r.Body, want)
			}
		default:
			t.Fatalf("no basic.return for %+v", want)
		}
	}
	select {
	case r := <-returns:
		t.Fatalf("unexpected return of %q", r.Body)
	default:
	}
}

func TestPublishImmediate(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	closed := notifyConnClose(c)
	ch := open(t, c)
	q := declareQ(t, ch, "", nil)
	if err := ch.Publish("", q, false, true, amqp091.Publishing{Body: []byte("now")}); err != nil {
		t.Fatal(err)
	}
	e := expectClosed(t, closed, 540)
	expectReason(t, e, "NOT_IMPLEMENTED - immediate=true")
}

func TestMaxMessageSize(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, &broker.Config{MaxMessageSize: 1024})
	c := dial(t, s)
	ch := open(t, c)
	q := declareQ(t, ch, "", nil)
	pub(t, ch, "", q, false, amqp091.Publishing{Body: make([]byte, 1024)})
	if n := readyCount(t, ch, q); n != 1 {
		t.Fatalf("ready = %d", n)
	}
	closed := notifyClose(ch)
	pub(t, ch, "", q, false, amqp091.Publishing{Body: make([]byte, 1025)})
	e := expectClosed(t, closed, 406)
	expectReason(t, e, "PRECONDITION_FAILED - message size 1025 is larger than configured max size 1024")
	// A channel error only.
	if n := readyCount(t, open(t, c), q); n != 1 {
		t.Fatalf("ready = %d", n)
	}
}

func TestPublishUserID(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	q := declareQ(t, ch, "", nil)
	pub(t, ch, "", q, false, amqp091.Publishing{UserId: "guest"})
	closed := notifyClose(ch)
	pub(t, ch, "", q, false, amqp091.Publishing{UserId: "mallory"})
	e := expectClosed(t, closed, 406)
	expectReason(t, e, "PRECONDITION_FAILED - user_id property set to 'mallory' but authenticated user was 'guest'")
	if n := readyCount(t, open(t, c), q); n != 1 {
		t.Fatalf("ready = %d", n)
	}
}
