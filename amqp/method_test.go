package amqp

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// contractMethods are the method type names the API contract promises.
var contractMethods = strings.Fields(`ConnectionStart ConnectionStartOk ConnectionTune ConnectionTuneOk
ConnectionOpen ConnectionOpenOk ConnectionClose ConnectionCloseOk ConnectionBlocked ConnectionUnblocked
ConnectionUpdateSecret ConnectionUpdateSecretOk ConnectionSecure ConnectionSecureOk ChannelOpen ChannelOpenOk
ChannelFlow ChannelFlowOk ChannelClose ChannelCloseOk AccessRequest AccessRequestOk ExchangeDeclare
ExchangeDeclareOk ExchangeDelete ExchangeDeleteOk ExchangeBind ExchangeBindOk ExchangeUnbind ExchangeUnbindOk
QueueDeclare QueueDeclareOk QueueBind QueueBindOk QueuePurge QueuePurgeOk QueueDelete QueueDeleteOk
QueueUnbind QueueUnbindOk BasicQos BasicQosOk BasicConsume BasicConsumeOk BasicCancel BasicCancelOk
BasicPublish BasicReturn BasicDeliver BasicGet BasicGetOk BasicGetEmpty BasicAck BasicReject
BasicRecoverAsync BasicRecover BasicRecoverOk BasicNack TxSelect TxSelectOk TxCommit TxCommitOk
TxRollback TxRollbackOk ConfirmSelect ConfirmSelectOk`)

// allMethods returns a new zero value of every known method.
func allMethods() []Method {
	var ms []Method
	for c := range 256 {
		for m := range 256 {
			if v := newMethod(uint16(c), uint16(m)); v != nil {
				ms = append(ms, v)
			}
		}
	}
	return ms
}

// fillMethod sets every field of m to a distinct non-zero value.
func fillMethod(m Method) {
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		name := v.Type().Field(i).Name
		switch f.Kind() {
		case reflect.Uint8:
			f.SetUint(0xD0 + uint64(i))
		case reflect.Uint16:
			f.SetUint(0xA100 + uint64(i))
		case reflect.Uint32:
			f.SetUint(0xB2000000 + uint64(i))
		case reflect.Uint64:
			f.SetUint(0xC300000000000000 + uint64(i))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.String:
			f.SetString(name + "-value")
		case reflect.Map:
			f.Set(reflect.ValueOf(Table{"k": int32(7), "s": "str", "n": Table{"x": true}}))
		default:
			panic("unhandled field kind " + f.Kind().String())
		}
	}
}

func TestMethodsMatchContract(t *testing.T) {
	got := map[string]Method{}
	for _, m := range allMethods() {
		got[reflect.TypeOf(m).Elem().Name()] = m
	}
	for _, name := range contractMethods {
		if got[name] == nil {
			t.Errorf("missing method type %s", name)
		}
	}
	if len(got) != len(contractMethods) {
		t.Errorf("%d method types, contract lists %d", len(got), len(contractMethods))
	}
	content := map[string]bool{"basic.publish": true, "basic.return": true, "basic.deliver": true, "basic.get-ok": true}
	for _, m := range got {
		if m.HasContent() != content[m.Name()] {
			t.Errorf("%s: HasContent = %v", m.Name(), m.HasContent())
		}
		if MethodName(m.ClassID(), m.MethodID()) != m.Name() {
			t.Errorf("MethodName(%d, %d) = %q, want %q", m.ClassID(), m.MethodID(), MethodName(m.ClassID(), m.MethodID()), m.Name())
		}
	}
	for _, c := range []struct {
		m    Method
		sync bool
	}{{&BasicPublish{}, false}, {&BasicAck{}, false}, {&QueueDeclare{}, true}, {&ConnectionStart{}, true}, {&ConnectionStartOk{}, false}, {&BasicRecover{}, true}} {
		if c.m.Synchronous() != c.sync {
			t.Errorf("%s: Synchronous = %v", c.m.Name(), c.m.Synchronous())
		}
	}
	if MethodName(99, 1) != "method 99.1" {
		t.Errorf("MethodName(99, 1) = %q", MethodName(99, 1))
	}
}

func TestMethodRoundTrip(t *testing.T) {
	var md MethodDecoder
	for _, m := range allMethods() {
		fillMethod(m)
		enc := m.AppendTo(nil)
		got, err := DecodeMethod(enc)
		if err != nil {
			t.Errorf("%s: %v", m.Name(), err)
			continue
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", m.Name(), got, m)
		}
		got2, err := md.Decode(enc)
		if err != nil || !reflect.DeepEqual(got2, m) {
			t.Errorf("%s: MethodDecoder: %+v, %v", m.Name(), got2, err)
		}
		// Trailing bytes after the arguments are tolerated.
		if got, err := DecodeMethod(append(enc[:len(enc):len(enc)], 1, 2, 3)); err != nil || !reflect.DeepEqual(got, m) {
			t.Errorf("%s: with trailing bytes: %+v, %v", m.Name(), got, err)
		}
		// Zero values too.
		z := reflect.New(reflect.TypeOf(m).Elem()).Interface().(Method)
		if got, err := DecodeMethod(z.AppendTo(nil)); err != nil || !reflect.DeepEqual(got, z) {
			t.Errorf("%s: zero value: %+v, %v", m.Name(), got, err)
		}
	}
}

// TestMethodBits sets each bit argument alone and checks that it, and only
// it, comes back set.
func TestMethodBits(t *testing.T) {
	n := 0
	for _, m := range allMethods() {
		v := reflect.ValueOf(m).Elem()
		for i := range v.NumField() {
			if v.Field(i).Kind() != reflect.Bool {
				continue
			}
			n++
			z := reflect.New(v.Type())
			z.Elem().Field(i).SetBool(true)
			got, err := DecodeMethod(z.Interface().(Method).AppendTo(nil))
			if err != nil {
				t.Fatalf("%s: %v", m.Name(), err)
			}
			if !reflect.DeepEqual(got, z.Interface()) {
				t.Errorf("%s.%s alone: got %+v", m.Name(), v.Type().Field(i).Name, got)
			}
		}
	}
	if n < 30 {
		t.Errorf("only %d bit fields found", n)
	}
}

func TestMethodTruncated(t *testing.T) {
	for _, m := range allMethods() {
		fillMethod(m)
		enc := m.AppendTo(nil)
		for n := range len(enc) {
			_, err := DecodeMethod(enc[:n])
			var e *Error
			if !errors.As(err, &e) || e.Code != FrameError {
				t.Fatalf("%s truncated to %d bytes: %v, want 501", m.Name(), n, err)
			}
			if n >= 4 && (e.ClassID != m.ClassID() || e.MethodID != m.MethodID()) {
				t.Fatalf("%s truncated: error names %d.%d", m.Name(), e.ClassID, e.MethodID)
			}
		}
	}
}

func TestDecodeMethodUnknown(t *testing.T) {
	var md MethodDecoder
	for _, p := range [][]byte{{0, 60, 0, 41}, {0, 99, 0, 10, 1, 2}, {0xff, 0xff, 0xff, 0xff}} {
		for _, dec := range []func([]byte) (Method, error){DecodeMethod, md.Decode} {
			_, err := dec(p)
			var e *Error
			if !errors.As(err, &e) || e.Code != NotImplemented || e.Hard() != true {
				t.Errorf("%x: %v, want 540", p, err)
			}
		}
	}
}

// TestMethodBytes checks exact encodings worked out by hand from the spec.
func TestMethodBytes(t *testing.T) {
	tests := []struct {
		m    Method
		want []byte
	}{
		{
			// basic.publish: ticket, exchange, routing-key, bits: mandatory=bit 0, immediate=bit 1.
			&BasicPublish{Exchange: "ex", RoutingKey: "rk", Mandatory: true},
			[]byte{0, 60, 0, 40, 0, 0, 2, 'e', 'x', 2, 'r', 'k', 0x01},
		},
		{
			&BasicPublish{Immediate: true},
			[]byte{0, 60, 0, 40, 0, 0, 0, 0, 0x02},
		},
		{
			// queue.declare: passive=0 durable=1 exclusive=2 auto-delete=3 nowait=4 in one octet.
			&QueueDeclare{Queue: "q", Durable: true, AutoDelete: true},
			[]byte{0, 50, 0, 10, 0, 0, 1, 'q', 0x0a, 0, 0, 0, 0},
		},
		{
			&QueueDeclare{Passive: true, Exclusive: true, NoWait: true},
			[]byte{0, 50, 0, 10, 0, 0, 0, 0x15, 0, 0, 0, 0},
		},
		{
			// basic.deliver: bit between a longlong and shortstrs takes its own octet.
			&BasicDeliver{ConsumerTag: "c", DeliveryTag: 0x0102030405060708, Redelivered: true, Exchange: "", RoutingKey: "k"},
			[]byte{0, 60, 0, 60, 1, 'c', 1, 2, 3, 4, 5, 6, 7, 8, 1, 0, 1, 'k'},
		},
		{
			&ConnectionTune{ChannelMax: 2047, FrameMax: 131072, Heartbeat: 60},
			[]byte{0, 10, 0, 30, 0x07, 0xff, 0, 2, 0, 0, 0, 60},
		},
		{
			&ConnectionClose{ReplyCode: 320, ReplyText: "x", FailingClassID: 60, FailingMethodID: 40},
			[]byte{0, 10, 0, 50, 0x01, 0x40, 1, 'x', 0, 60, 0, 40},
		},
		{
			// basic.nack: multiple=bit 0, requeue=bit 1.
			&BasicNack{DeliveryTag: 5, Requeue: true},
			[]byte{0, 60, 0, 120, 0, 0, 0, 0, 0, 0, 0, 5, 0x02},
		},
		{
			&ExchangeUnbindOk{},
			[]byte{0, 40, 0, 51},
		},
	}
	for _, tt := range tests {
		got := tt.m.AppendTo(nil)
		if !bytes.Equal(got, tt.want) {
			t.Errorf("%s: encoded\n% x\nwant\n% x", tt.m.Name(), got, tt.want)
		}
		dec, err := DecodeMethod(tt.want)
		if err != nil || !reflect.DeepEqual(dec, tt.m) {
			t.Errorf("%s: decoded %+v, %v", tt.m.Name(), dec, err)
		}
	}

	// The whole frame of the publish above, on channel 1.
	frame := AppendMethodFrame(nil, 1, &BasicPublish{Exchange: "ex", RoutingKey: "rk", Mandatory: true})
	want := []byte{1, 0, 1, 0, 0, 0, 13, 0, 60, 0, 40, 0, 0, 2, 'e', 'x', 2, 'r', 'k', 0x01, 0xce}
	if !bytes.Equal(frame, want) {
		t.Errorf("publish frame\n% x\nwant\n% x", frame, want)
	}
}

func TestMethodEncodeNeverCorrupts(t *testing.T) {
	long := strings.Repeat("x", 300)
	m := &BasicPublish{Exchange: long, RoutingKey: "rk", Mandatory: true}
	got, err := DecodeMethod(m.AppendTo(nil))
	if err != nil {
		t.Fatal(err)
	}
	p := got.(*BasicPublish)
	if p.Exchange != long[:255] || p.RoutingKey != "rk" || !p.Mandatory {
		t.Errorf("truncated publish decoded as %+v", p)
	}

	// Entries that cannot be encoded are left out, the rest survive.
	q := &QueueDeclare{Queue: "q", Arguments: Table{"ok": int32(1), "bad": uint64(1), long: "long key", "nested": Table{"bad": struct{}{}}}}
	got, err = DecodeMethod(q.AppendTo(nil))
	if err != nil {
		t.Fatal(err)
	}
	if args := got.(*QueueDeclare).Arguments; !reflect.DeepEqual(args, Table{"ok": int32(1)}) {
		t.Errorf("arguments decoded as %v", args)
	}

	// Longstrs are not limited to 255 bytes.
	s := &ConnectionStartOk{Mechanism: "PLAIN", Response: strings.Repeat("r", 70000), Locale: "en_US"}
	got, err = DecodeMethod(s.AppendTo(nil))
	if err != nil || !reflect.DeepEqual(got, s) {
		t.Errorf("long longstr: %v", err)
	}
}

func TestMethodDecoderReuse(t *testing.T) {
	var md MethodDecoder
	a := AppendMethodFrame(nil, 1, &BasicPublish{Exchange: "amq.direct", RoutingKey: "key.1"})[FrameHeaderSize:]
	a = a[:len(a)-1]
	b := (&BasicPublish{Exchange: "other", RoutingKey: "key.2", Mandatory: true}).AppendTo(nil)

	m1, err := md.Decode(a)
	if err != nil {
		t.Fatal(err)
	}
	p1 := m1.(*BasicPublish)
	ex := p1.Exchange
	m2, err := md.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if m2 != m1 {
		t.Error("MethodDecoder returned a new value for the same method type")
	}
	if p := m2.(*BasicPublish); p.Exchange != "other" || p.RoutingKey != "key.2" || !p.Mandatory {
		t.Errorf("second decode: %+v", p)
	}
	if ex != "amq.direct" {
		t.Errorf("string taken from the first decode changed to %q", ex)
	}
	// Strings never alias the payload.
	m3, _ := md.Decode(a)
	for i := range a {
		a[i] = 'Z'
	}
	if p := m3.(*BasicPublish); p.Exchange != "amq.direct" || p.RoutingKey != "key.1" {
		t.Errorf("decoded strings alias the payload: %+v", p)
	}

	// Steady state with repeated names allocates nothing.
	c := (&BasicPublish{Exchange: "amq.direct", RoutingKey: "key.1"}).AppendTo(nil)
	if n := testing.AllocsPerRun(100, func() { _, _ = md.Decode(c) }); n != 0 {
		t.Errorf("MethodDecoder.Decode of a repeated publish: %v allocs", n)
	}
}

func TestErrorHelpers(t *testing.T) {
	e := Errorf(NotFound, ClassQueue, 10, "no queue '%s' in vhost '%s'", "q", "/")
	if e.Text != "NOT_FOUND - no queue 'q' in vhost '/'" {
		t.Errorf("Text = %q", e.Text)
	}
	if e.Hard() {
		t.Error("404 is soft")
	}
	if got := e.Error(); got != "amqp 404: NOT_FOUND - no queue 'q' in vhost '/' (queue.declare)" {
		t.Errorf("Error() = %q", got)
	}
	for code, hard := range map[uint16]bool{311: false, 312: false, 313: false, 403: false, 405: false, 406: false,
		320: true, 402: true, 501: true, 502: true, 503: true, 504: true, 505: true, 506: true, 530: true, 540: true, 541: true} {
		if (&Error{Code: code}).Hard() != hard {
			t.Errorf("%d: Hard() != %v", code, hard)
		}
	}
	long := Errorf(PreconditionFailed, 0, 0, "%s", strings.Repeat("é", 200))
	if len(long.Text) > 255 || !strings.HasPrefix(long.Text, "PRECONDITION_FAILED - é") || !utf8Valid(long.Text) {
		t.Errorf("long text: %d bytes %q", len(long.Text), long.Text)
	}
	for code, text := range map[uint16]string{ReplySuccess: "REPLY_SUCCESS", AccessRefused: "ACCESS_REFUSED", InternalError: "INTERNAL_ERROR", 999: ""} {
		if ReplyText(code) != text {
			t.Errorf("ReplyText(%d) = %q", code, ReplyText(code))
		}
	}
	cc := e.ChannelClose()
	if cc.ReplyCode != 404 || cc.ReplyText != e.Text || cc.FailingClassID != 50 || cc.FailingMethodID != 10 {
		t.Errorf("ChannelClose() = %+v", cc)
	}
	if back := cc.Err(); *back != *e {
		t.Errorf("Err() = %+v", back)
	}
	if back := e.ConnectionClose().Err(); *back != *e {
		t.Errorf("ConnectionClose().Err() = %+v", back)
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
