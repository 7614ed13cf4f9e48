package broker_test

import (
	"testing"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker/brokertest"
)

// The server closes a channel (404) while the client closes it too: the
// closes cross. As in RabbitMQ the channel stays until the client's
// close-ok for the server's close, which must not be taken for a frame on
// an unknown channel.
func TestConnChannelCloseCrossing(t *testing.T) {
	s := brokertest.Start(t, nil)
	r := rawOpen(t, s.Addr, defaultTune)
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	// Written before the server's channel.close is read.
	b := amqp.AppendMethodFrame(nil, 1, &amqp.QueueDeclare{Queue: "missing", Passive: true})
	b = amqp.AppendMethodFrame(b, 1, &amqp.ChannelClose{ReplyCode: 200, ReplyText: "bye"})
	r.write(b)
	cl := rawExpect[*amqp.ChannelClose](r, 1)
	if cl.ReplyCode != amqp.NotFound {
		t.Fatalf("channel.close %d %q, want 404", cl.ReplyCode, cl.ReplyText)
	}
	rawExpect[*amqp.ChannelCloseOk](r, 1)
	// Anything but close and close-ok is ignored until the close-ok.
	r.send(1, &amqp.QueueDeclare{Queue: "ignored"})
	r.send(1, &amqp.ChannelCloseOk{})
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	r.send(1, &amqp.QueueDeclare{Queue: "crossing", AutoDelete: true})
	if ok := rawExpect[*amqp.QueueDeclareOk](r, 1); ok.Queue != "crossing" {
		t.Fatalf("declared %q", ok.Queue)
	}
	r.send(1, &amqp.QueueDeclare{Queue: "ignored", Passive: true})
	if cl := rawExpect[*amqp.ChannelClose](r, 1); cl.ReplyCode != amqp.NotFound {
		t.Fatalf("queue declared while its channel was closing: %d %q", cl.ReplyCode, cl.ReplyText)
	}
}

// channel.flow{active=false} is refused as RabbitMQ refuses it;
// active=true is answered.
func TestConnChannelFlow(t *testing.T) {
	s := brokertest.Start(t, nil)
	r := rawOpen(t, s.Addr, defaultTune)
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	r.send(1, &amqp.ChannelFlow{Active: true})
	if ok := rawExpect[*amqp.ChannelFlowOk](r, 1); !ok.Active {
		t.Fatal("channel.flow-ok active=false")
	}
	r.send(1, &amqp.ChannelFlow{Active: false})
	cl := r.expectConnClose(amqp.NotImplemented)
	if want := "NOT_IMPLEMENTED - active=false"; cl.ReplyText != want || cl.FailingClassID != amqp.ClassChannel || cl.FailingMethodID != 20 {
		t.Fatalf("connection.close %q %d/%d, want %q 20/20", cl.ReplyText, cl.FailingClassID, cl.FailingMethodID, want)
	}
}

// Channel numbers run from 1 to the negotiated channel_max: a frame on a
// higher number, channel.open or anything else, closes the connection.
func TestConnChannelNumberAboveMax(t *testing.T) {
	s := brokertest.Start(t, nil)
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"open", amqp.AppendMethodFrame(nil, 3, &amqp.ChannelOpen{})},
		{"open 65535", amqp.AppendMethodFrame(nil, 65535, &amqp.ChannelOpen{})},
		{"other method", amqp.AppendMethodFrame(nil, 3, &amqp.QueueDeclare{Queue: "q"})},
		{"content header", amqp.AppendHeaderFrame(nil, 3, amqp.ClassBasic, 1, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rawOpen(t, s.Addr, rawTune{channelMax: 2, frameMax: 131072})
			r.send(2, &amqp.ChannelOpen{})
			rawExpect[*amqp.ChannelOpenOk](r, 2)
			r.write(tc.frame)
			cl := r.expectConnClose(amqp.NotAllowed)
			if want := "NOT_ALLOWED - channel number"; len(cl.ReplyText) < len(want) || cl.ReplyText[:len(want)] != want {
				t.Fatalf("reply text %q, want it to start with %q", cl.ReplyText, want)
			}
		})
	}
}
