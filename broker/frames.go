package broker

import (
	"strconv"
	"strings"

	"github.com/warrenmq/warren/amqp"
)

// handleFrame processes one frame read after the handshake. A returned
// error closes the connection.
func (c *conn) handleFrame(f amqp.Frame) error {
	if len(c.batch.msgs) > 0 && !c.joinsBatch(f) {
		c.flushRoutes()
	}
	switch f.Type {
	case amqp.FrameHeartbeat:
		if len(f.Payload) != 0 {
			// RabbitMQ does not recognise a heartbeat with a payload.
			return amqp.Errorf(amqp.FrameError, 0, 0, "type %d, %s: unknown_frame", f.Type, payloadSnippet(f.Payload))
		}
		if f.Channel != 0 {
			return unexpectedFrame(f)
		}
		return nil
	case amqp.FrameMethod:
		if f.Channel == 0 {
			m, err := c.dec.Decode(f.Payload)
			if err != nil {
				return err
			}
			return c.handleConnMethod(m)
		}
	case amqp.FrameHeader, amqp.FrameBody:
		if f.Channel == 0 {
			return unexpectedFrame(f)
		}
	default:
		return amqp.Errorf(amqp.FrameError, 0, 0, "type %d, %s: unknown_frame", f.Type, payloadSnippet(f.Payload))
	}
	ch := c.channels[f.Channel]
	if ch == nil {
		return c.firstFrame(f)
	}
	if f.Type == amqp.FrameMethod {
		m, err := c.dec.Decode(f.Payload)
		if err != nil {
			return err
		}
		return ch.handleMethod(m)
	}
	return ch.handleContent(f)
}

// firstFrame handles a frame on a channel number not in use. RabbitMQ
// creates the channel on its first frame, whatever it is, and only then
// does the new channel insist on channel.open.
//
// RabbitMQ limits the number of open channels to the negotiated
// channel_max, not their numbers. Warren follows the spec, which makes
// 1..channel_max the usable numbers (so the count is limited too): a frame
// on a higher number closes the connection with 530 NOT_ALLOWED, the code
// RabbitMQ gives for exceeding channel_max, rather than 504 CHANNEL_ERROR,
// which reports a channel used in the wrong state.
func (c *conn) firstFrame(f amqp.Frame) error {
	if c.channelMax != 0 && f.Channel > c.channelMax {
		return amqp.Errorf(amqp.NotAllowed, 0, 0,
			"channel number %d is above the negotiated channel_max (%d)", f.Channel, c.channelMax)
	}
	if f.Type != amqp.FrameMethod {
		return amqp.Errorf(amqp.UnexpectedFrame, 0, 0, "expected method frame, got non method frame instead")
	}
	m, err := c.dec.Decode(f.Payload)
	if err != nil {
		return err
	}
	if _, ok := m.(*amqp.ChannelOpen); !ok {
		return amqp.Errorf(amqp.ChannelError, m.ClassID(), m.MethodID(), "expected 'channel.open'")
	}
	if err := c.admitChannel(); err != nil {
		return err
	}
	c.channels[f.Channel] = newChannel(c, f.Channel)
	c.send(f.Channel, &amqp.ChannelOpenOk{})
	return nil
}

// handleConnMethod processes a method on channel 0.
func (c *conn) handleConnMethod(m amqp.Method) error {
	switch m := m.(type) {
	case *amqp.ConnectionClose:
		c.notePeerClose(m)
		c.closing.Store(true)
		// What the connection held goes before close-ok: a client that
		// closes and reconnects at once can declare its exclusive queues
		// again, and nobody sees them locked by a closed connection.
		c.release()
		c.send(0, &amqp.ConnectionCloseOk{})
		return errConnClosed
	case *amqp.ConnectionUpdateSecret:
		// Users authenticate with passwords: there is no secret to expire,
		// and RabbitMQ's internal backend accepts any update.
		c.send(0, &amqp.ConnectionUpdateSecretOk{})
		return nil
	}
	// RabbitMQ answers anything else on channel 0 of an open connection,
	// connection.close-ok and other connection methods included, so.
	return amqp.Errorf(amqp.ChannelError, m.ClassID(), m.MethodID(), "unexpected method in connection state running")
}

// unexpectedFrame is RabbitMQ's 505 for a frame of a type the channel
// cannot take, e.g. content on channel 0 or a heartbeat on another.
func unexpectedFrame(f amqp.Frame) *amqp.Error {
	return amqp.Errorf(amqp.UnexpectedFrame, 0, 0, "type %d, %s", f.Type, payloadSnippet(f.Payload))
}

// payloadSnippet describes (the start of) a frame payload as RabbitMQ's
// errors do: "all octets = <<1,2>>" or "first 16 octets = <<...>>".
func payloadSnippet(p []byte) string {
	what := "all"
	if len(p) > 16 {
		what, p = "first 16", p[:16]
	}
	var b strings.Builder
	b.WriteString(what)
	b.WriteString(" octets = <<")
	for i, x := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(x)))
	}
	b.WriteString(">>")
	return b.String()
}
