package broker

import (
	"github.com/warrenmq/warren/amqp"
)

// handleFrame processes one frame read after the handshake. A returned
// error closes the connection.
func (c *conn) handleFrame(f amqp.Frame) error {
	switch f.Type {
	case amqp.FrameHeartbeat:
		if f.Channel != 0 {
			return amqp.Errorf(amqp.FrameError, 0, 0, "heartbeat frame on channel %d", f.Channel)
		}
		return nil
	case amqp.FrameMethod:
		m, err := c.dec.Decode(f.Payload)
		if err != nil {
			return err
		}
		if f.Channel == 0 {
			return c.handleConnMethod(m)
		}
		ch := c.channels[f.Channel]
		if ch == nil {
			if _, ok := m.(*amqp.ChannelOpen); ok {
				return c.openChannel(f.Channel)
			}
			return amqp.Errorf(amqp.ChannelError, m.ClassID(), m.MethodID(), "expected 'channel.open' on channel %d", f.Channel)
		}
		return ch.handleMethod(m)
	case amqp.FrameHeader, amqp.FrameBody:
		ch := c.channels[f.Channel]
		if ch == nil {
			if f.Channel == 0 {
				return amqp.Errorf(amqp.CommandInvalid, 0, 0, "content frame on channel 0")
			}
			return amqp.Errorf(amqp.ChannelError, 0, 0, "expected 'channel.open' on channel %d", f.Channel)
		}
		return ch.handleContent(f)
	}
	return amqp.Errorf(amqp.FrameError, 0, 0, "unknown frame type %d", f.Type)
}

// handleConnMethod processes a method on channel 0.
func (c *conn) handleConnMethod(m amqp.Method) error {
	switch m := m.(type) {
	case *amqp.ConnectionClose:
		c.closing.Store(true)
		c.send(0, &amqp.ConnectionCloseOk{})
		return errConnClosed
	case *amqp.ConnectionCloseOk:
		return errConnClosed
	case *amqp.ConnectionUpdateSecret:
		c.send(0, &amqp.ConnectionUpdateSecretOk{})
		return nil
	case *amqp.ConnectionBlocked, *amqp.ConnectionUnblocked:
		return nil
	default:
		return amqp.Errorf(amqp.CommandInvalid, m.ClassID(), m.MethodID(), "method '%s' is not valid on channel 0", m.Name())
	}
}

// openChannel handles channel.open for a channel number not in use.
func (c *conn) openChannel(id uint16) error {
	if c.channelMax != 0 && id > c.channelMax {
		return amqp.Errorf(amqp.NotAllowed, amqp.ClassChannel, 10, "channel %d above channel_max %d", id, c.channelMax)
	}
	c.channels[id] = newChannel(c, id)
	c.send(id, &amqp.ChannelOpenOk{})
	return nil
}
