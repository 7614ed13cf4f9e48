package broker

import (
	"bytes"
	"io"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
)

// serverProperties is the server-properties table of connection.start.
func serverProperties() amqp.Table {
	host, _ := os.Hostname()
	return amqp.Table{
		"product":      "Warren",
		"version":      Version,
		"platform":     "Go",
		"cluster_name": "warren@" + host,
		"copyright":    "Warren authors",
		"information":  "Warren, an AMQP 0-9-1 message broker",
		"capabilities": amqp.Table{
			"publisher_confirms":           true,
			"exchange_exchange_bindings":   true,
			"basic.nack":                   true,
			"consumer_cancel_notify":       true,
			"connection.blocked":           true,
			"consumer_priorities":          true,
			"authentication_failure_close": true,
			"per_consumer_qos":             true,
			"direct_reply_to":              true,
		},
	}
}

// handshake runs the protocol header exchange and the connection.start,
// tune and open methods. It returns nil once the connection is open.
func (c *conn) handshake() error {
	var hdr [8]byte
	if _, err := io.ReadFull(&c.rd, hdr[:]); err != nil {
		return err
	}
	// 0-9-1 §4.2.2: a server that does not accept the protocol header
	// answers with the header it supports and closes the socket.
	if !bytes.Equal(hdr[:], amqp.ProtocolHeader) {
		c.out.lock()
		c.out.buf = append(c.out.buf, amqp.ProtocolHeader...)
		c.out.unlock(len(amqp.ProtocolHeader))
		c.out.wake()
		return errConnClosed
	}
	c.send(0, &amqp.ConnectionStart{
		VersionMajor:     0,
		VersionMinor:     9,
		ServerProperties: serverProperties(),
		Mechanisms:       saslMechanisms,
		Locales:          "en_US",
	})

	m, err := c.expect(amqp.ClassConnection, 11)
	if err != nil {
		return err
	}
	startOk := m.(*amqp.ConnectionStartOk)
	c.clientProps = startOk.ClientProperties
	if caps, ok := c.clientProps["capabilities"].(amqp.Table); ok {
		c.capCancelNotify, _ = caps["consumer_cancel_notify"].(bool)
		c.capAuthFailure, _ = caps["authentication_failure_close"].(bool)
	}
	if startOk.Mechanism != "PLAIN" && startOk.Mechanism != "AMQPLAIN" {
		return amqp.Errorf(amqp.CommandInvalid, amqp.ClassConnection, 11,
			"unknown authentication mechanism '%s'", startOk.Mechanism)
	}
	username, password, ok := parseSASL(startOk.Mechanism, []byte(startOk.Response))
	var u *user
	if ok {
		u = c.b.authenticate(username, password)
	}
	if u == nil {
		c.log.Info("authentication failed", zap.String("user", username), zap.String("mechanism", startOk.Mechanism))
		if c.capAuthFailure {
			return amqp.Errorf(amqp.AccessRefused, amqp.ClassConnection, 11,
				"Login was refused using authentication mechanism %s. For details see the broker logfile.", startOk.Mechanism)
		}
		return errConnClosed
	}
	c.user = u

	hb := uint16(c.b.cfg.Heartbeat / time.Second)
	c.send(0, &amqp.ConnectionTune{ChannelMax: c.b.cfg.ChannelMax, FrameMax: c.b.cfg.FrameMax, Heartbeat: hb})
	m, err = c.expect(amqp.ClassConnection, 31)
	if err != nil {
		return err
	}
	tuneOk := m.(*amqp.ConnectionTuneOk)
	// 0-9-1 §1.4.2.6: zero means the peer imposes no limit, so the
	// server's value stands.
	if tuneOk.ChannelMax != 0 && tuneOk.ChannelMax < c.channelMax {
		c.channelMax = tuneOk.ChannelMax
	}
	if tuneOk.FrameMax != 0 {
		if tuneOk.FrameMax < amqp.FrameMinSize {
			return amqp.Errorf(amqp.NotAllowed, amqp.ClassConnection, 31,
				"frame_max=%d < %d min size", tuneOk.FrameMax, amqp.FrameMinSize)
		}
		if tuneOk.FrameMax > c.b.cfg.FrameMax {
			return amqp.Errorf(amqp.NotAllowed, amqp.ClassConnection, 31,
				"frame_max=%d > %d max size", tuneOk.FrameMax, c.b.cfg.FrameMax)
		}
		c.frameMax = tuneOk.FrameMax
	}
	c.fr.SetMaxFrameSize(c.frameMax)
	c.heartbeat = time.Duration(tuneOk.Heartbeat) * time.Second

	m, err = c.expect(amqp.ClassConnection, 40)
	if err != nil {
		return err
	}
	open := m.(*amqp.ConnectionOpen)
	v := c.b.vhost(open.VirtualHost)
	if v == nil {
		return amqp.Errorf(amqp.NotAllowed, amqp.ClassConnection, 40, "vhost %s not found", open.VirtualHost)
	}
	c.vhost = v
	c.log = c.log.With(zap.String("vhost", v.name), zap.String("user", u.name))
	c.send(0, &amqp.ConnectionOpenOk{})
	if c.heartbeat > 0 {
		c.rd.timeout.Store(int64(2 * c.heartbeat))
	} else {
		c.rd.timeout.Store(0)
		_ = c.nc.SetReadDeadline(time.Time{})
	}
	c.hbSet <- c.heartbeat
	c.log.Debug("connection open")
	return nil
}

// expect reads frames until a method arrives on channel 0 (heartbeats are
// skipped) and checks that it is the one the handshake needs next.
func (c *conn) expect(classID, methodID uint16) (amqp.Method, error) {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		switch f.Type {
		case amqp.FrameHeartbeat:
			continue
		case amqp.FrameMethod:
		default:
			return nil, amqp.Errorf(amqp.UnexpectedFrame, 0, 0, "expected method frame, got frame type %d", f.Type)
		}
		m, err := c.dec.Decode(f.Payload)
		if err != nil {
			return nil, err
		}
		if _, ok := m.(*amqp.ConnectionClose); ok {
			c.send(0, &amqp.ConnectionCloseOk{})
			return nil, errConnClosed
		}
		if f.Channel != 0 || m.ClassID() != classID || m.MethodID() != methodID {
			return nil, amqp.Errorf(amqp.CommandInvalid, m.ClassID(), m.MethodID(),
				"expected connection method %d, got '%s'", methodID, m.Name())
		}
		return m, nil
	}
}
