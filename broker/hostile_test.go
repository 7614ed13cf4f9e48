package broker_test

import (
	"encoding/binary"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// nestedTable returns a table nested depth deep.
func nestedTable(depth int) amqp.Table {
	t := amqp.Table{"leaf": "x"}
	for range depth - 1 {
		t = amqp.Table{"t": t}
	}
	return t
}

// rawMethod encodes a method frame by hand, so that its fields can be
// anything.
func rawFrame(typ uint8, channel uint16, payload []byte) []byte {
	return amqp.AppendFrame(nil, typ, channel, payload)
}

func methodPayload(classID, methodID uint16, fields ...byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, classID)
	b = binary.BigEndian.AppendUint16(b, methodID)
	return append(b, fields...)
}

// queueDeclareWithArgs encodes queue.declare with a raw arguments table.
func queueDeclareWithArgs(table []byte) []byte {
	p := methodPayload(amqp.ClassQueue, 10, 0, 0) // ticket
	p = append(p, 1, 'q')                         // queue
	p = append(p, 0)                              // bits
	return append(p, table...)
}

func TestHostileInput(t *testing.T) {
	s := brokertest.Start(t, nil)
	other := dial(t, s)
	publish := amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "nowhere"})
	header := func(size uint64) []byte { return amqp.AppendHeaderFrame(nil, 1, amqp.ClassBasic, size, nil) }
	body := func(n int) []byte { return rawFrame(amqp.FrameBody, 1, make([]byte, n)) }
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	deep, err := nestedTable(amqp.MaxTableDepth).AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	// One level deeper than allowed, encoded by hand: a table holding the
	// deepest allowed table.
	tooDeep := append([]byte{1, 't', 'F'}, deep...)
	tooDeep = append(binary.BigEndian.AppendUint32(nil, uint32(len(tooDeep))), tooDeep...)
	hugeTable := binary.BigEndian.AppendUint32(nil, 0x7fffffff) // longer than the frame

	tests := []struct {
		name  string
		input []byte
		// code is the connection.close reply code expected, or 0 for a
		// socket closed without one (before the handshake is done).
		code uint16
		// preOpen sends input instead of the handshake.
		preOpen bool
	}{
		{"wrong frame-end", []byte{amqp.FrameMethod, 0, 1, 0, 0, 0, 4, 0, 20, 0, 10, 0x00}, amqp.FrameError, false},
		{"oversize length", []byte{amqp.FrameMethod, 0, 1, 0x7f, 0xff, 0xff, 0xff}, amqp.FrameError, false},
		{"negative length", []byte{amqp.FrameBody, 0, 1, 0xff, 0xff, 0xff, 0xfe}, amqp.FrameError, false},
		{"unknown frame type", []byte{7, 0, 1, 0, 0, 0, 0, amqp.FrameEnd}, amqp.FrameError, false},
		{"unknown class", rawFrame(amqp.FrameMethod, 1, methodPayload(999, 10)), amqp.NotImplemented, false},
		{"unknown method", rawFrame(amqp.FrameMethod, 1, methodPayload(amqp.ClassBasic, 999)), amqp.NotImplemented, false},
		{"truncated method", rawFrame(amqp.FrameMethod, 1, methodPayload(amqp.ClassQueue, 10, 0)), amqp.FrameError, false},
		{"method payload under 4 bytes", rawFrame(amqp.FrameMethod, 1, []byte{0, 50}), amqp.FrameError, false},
		{"content header without a method", header(1), amqp.UnexpectedFrame, false},
		{"content body without a method", body(1), amqp.UnexpectedFrame, false},
		{"method in the middle of content", cat(publish, header(10), amqp.AppendMethodFrame(nil, 1, &amqp.BasicQos{})), amqp.UnexpectedFrame, false},
		{"method between method and header", cat(publish, amqp.AppendMethodFrame(nil, 1, &amqp.BasicQos{})), amqp.UnexpectedFrame, false},
		{"body longer than the header said", cat(publish, header(4), body(8)), amqp.UnexpectedFrame, false},
		{"second body frame past the size", cat(publish, header(10), body(6), body(6)), amqp.UnexpectedFrame, false},
		{"header of another class", cat(publish, amqp.AppendHeaderFrame(nil, 1, amqp.ClassQueue, 1, nil)), amqp.UnexpectedFrame, false},
		{"content on channel 0", amqp.AppendHeaderFrame(nil, 0, amqp.ClassBasic, 1, nil), amqp.UnexpectedFrame, false},
		{"heartbeat on a channel", []byte{amqp.FrameHeartbeat, 0, 1, 0, 0, 0, 0, amqp.FrameEnd}, amqp.UnexpectedFrame, false},
		{"table nested too deep", rawFrame(amqp.FrameMethod, 1, queueDeclareWithArgs(tooDeep)), amqp.FrameError, false},
		{"table longer than its frame", rawFrame(amqp.FrameMethod, 1, queueDeclareWithArgs(hugeTable)), amqp.FrameError, false},
		{"connection.start-ok after open", amqp.AppendMethodFrame(nil, 0, &amqp.ConnectionStartOk{Mechanism: "PLAIN"}), amqp.ChannelError, false},
		{"method before the protocol header", amqp.AppendMethodFrame(nil, 0, &amqp.ConnectionStartOk{Mechanism: "PLAIN"}), 0, true},
		{"heartbeat before the protocol header", []byte{amqp.FrameHeartbeat, 0, 0, 0, 0, 0, 0, amqp.FrameEnd}, 0, true},
		{"frame-end garbage after the header", append(append([]byte{}, amqp.ProtocolHeader...), 0xce, 0xce, 0xce, 0xce, 0xce, 0xce, 0xce, 0xce), 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.preOpen {
				r := rawDial(t, s.Addr)
				r.write(tc.input)
				// The broker answers with its protocol header or a
				// connection.start, then closes the socket.
				if _, err := io.ReadAll(r.nc); err != nil && !isClosedErr(err) {
					t.Fatal(err)
				}
				return
			}
			r := rawOpen(t, s.Addr, defaultTune)
			r.send(1, &amqp.ChannelOpen{})
			rawExpect[*amqp.ChannelOpenOk](r, 1)
			r.write(tc.input)
			cl := r.expectConnClose(tc.code)
			t.Logf("%d %s", cl.ReplyCode, cl.ReplyText)
		})
	}
	// The deepest allowed table is fine.
	r := rawOpen(t, s.Addr, defaultTune)
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	r.write(rawFrame(amqp.FrameMethod, 1, queueDeclareWithArgs(deep)))
	rawExpect[*amqp.QueueDeclareOk](r, 1)

	publishConsume(t, other)
}

// Channel numbers run from 1 to channel_max (RabbitMQ limits only how many
// are open).
func TestHostileChannelNumbers(t *testing.T) {
	// The highest number opens when channel_max allows it.
	s := brokertest.Start(t, &broker.Config{ChannelMax: 65535})
	r := rawOpen(t, s.Addr, rawTune{channelMax: 65535, frameMax: 131072})
	r.send(65535, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 65535)
	r = rawOpen(t, s.Addr, rawTune{channelMax: 2, frameMax: 131072})
	r.send(2, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 2)
	r.send(65535, &amqp.ChannelOpen{})
	cl := r.expectConnClose(amqp.NotAllowed)
	if cl.ReplyText != "NOT_ALLOWED - channel number 65535 is above the negotiated channel_max (2)" {
		t.Fatalf("reply %q", cl.ReplyText)
	}
}

func TestMaxTableDepthConfigured(t *testing.T) {
	if _, err := broker.New(broker.Config{MaxTableDepth: amqp.MaxTableDepth + 1}); err == nil {
		t.Fatal("New accepted MaxTableDepth above amqp.MaxTableDepth")
	}
	s := brokertest.Start(t, &broker.Config{MaxTableDepth: 3})
	header := func(headers amqp.Table) []byte {
		props := &amqp.Properties{UserID: "guest", Headers: headers}
		return append(amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "q"}),
			amqp.AppendHeaderFrame(nil, 1, amqp.ClassBasic, 0, props)...)
	}
	tests := []struct {
		name  string
		input []byte
		ok    amqp.Method // the method answering input, or nil for a 501 connection.close
	}{
		{"arguments within the limit", amqp.AppendMethodFrame(nil, 1, &amqp.QueueDeclare{Queue: "q", Arguments: nestedTable(3)}), &amqp.QueueDeclareOk{}},
		{"arguments over the limit", amqp.AppendMethodFrame(nil, 1, &amqp.QueueDeclare{Queue: "q", Arguments: nestedTable(4)}), nil},
		{"array over the limit", amqp.AppendMethodFrame(nil, 1, &amqp.ExchangeDeclare{Exchange: "x", Type: "direct",
			Arguments: amqp.Table{"a": []any{nestedTable(2)}}}), nil},
		// The headers property is decoded (and checked) with user-id set.
		{"headers within the limit", append(header(nestedTable(3)), amqp.AppendMethodFrame(nil, 1, &amqp.BasicQos{})...), &amqp.BasicQosOk{}},
		{"headers over the limit", header(nestedTable(4)), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rawOpen(t, s.Addr, defaultTune)
			r.send(1, &amqp.ChannelOpen{})
			rawExpect[*amqp.ChannelOpenOk](r, 1)
			r.write(tt.input)
			if tt.ok == nil {
				cl := r.expectConnClose(amqp.FrameError)
				if !strings.Contains(cl.ReplyText, "deeper than 3") {
					t.Errorf("reply text %q", cl.ReplyText)
				}
				return
			}
			if _, m := r.method(); reflect.TypeOf(m) != reflect.TypeOf(tt.ok) {
				t.Fatalf("got %s, want %s", m.Name(), tt.ok.Name())
			}
		})
	}
}
