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
// Product and version are RabbitMQ's (RabbitMQVersion): clients, their
// test suites and applications branch on them to use RabbitMQ's
// behaviour, which Warren's is; information names Warren and its version.
func serverProperties() amqp.Table {
	host, _ := os.Hostname()
	return amqp.Table{
		"product":      "RabbitMQ",
		"version":      RabbitMQVersion,
		"platform":     "Go",
		"cluster_name": "warren@" + host,
		"copyright":    "Warren authors",
		"information":  "Warren " + Version + ", an AMQP 0-9-1 message broker compatible with RabbitMQ " + RabbitMQVersion,
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

// startFrame returns the connection.start frame offering mechanisms, built
// once per broker for each of the (two) mechanism lists: its server
// properties do not change while the broker runs. Any goroutine; the
// bytes are shared and must not be changed.
func (b *Broker) startFrame(mechanisms string) []byte {
	if f, ok := b.startFrames.Load(mechanisms); ok {
		return f.([]byte)
	}
	f := amqp.AppendMethodFrame(nil, 0, &amqp.ConnectionStart{
		VersionMajor:     0,
		VersionMinor:     9,
		ServerProperties: serverProperties(),
		Mechanisms:       mechanisms,
		Locales:          "en_US",
	})
	actual, _ := b.startFrames.LoadOrStore(mechanisms, f)
	return actual.([]byte)
}

// header09 is the AMQP 0-9 protocol header, which RabbitMQ accepts and
// serves as 0-9-1.
const header09 = "AMQP\x01\x01\x00\x09"

// Handshake states, named as RabbitMQ names them in its errors.
const (
	stateStarting = "starting" // waiting for connection.start-ok
	stateTuning   = "tuning"   // waiting for connection.tune-ok
	stateOpening  = "opening"  // waiting for connection.open
)

// handshake runs the protocol header exchange and the connection.start,
// tune and open methods. It returns nil once the connection is open.
//
// Failures are answered as RabbitMQ answers them: before connection.tune-ok
// the socket is closed without a word (except a refused login, reported
// to clients with the authentication_failure_close capability), a tune-ok
// outside the limits gets connection.close 530, and from then on every
// protocol error gets its connection.close.
func (c *conn) handshake() error {
	// RabbitMQ's handshake_timeout bounds the whole handshake.
	deadline := time.Now().Add(c.b.cfg.HandshakeTimeout)
	c.rd.until.Store(deadline.UnixNano())
	if err := c.tlsHandshake(); err != nil {
		return err
	}
	// The reader writes the replies itself (conn.direct): a client that
	// does not read must not hold it past the handshake either.
	_ = c.nc.SetWriteDeadline(deadline)
	var hdr [8]byte
	if _, err := io.ReadFull(&c.rd, hdr[:]); err != nil {
		return err
	}
	// 0-9-1 §4.2.2: a server that does not accept the protocol header
	// answers with the header it supports and closes the socket.
	if !bytes.Equal(hdr[:], amqp.ProtocolHeader) && string(hdr[:]) != header09 {
		received, hint := describeHeader(hdr[:])
		c.log.Warn("client did not start with the AMQP 0-9-1 protocol header: closing the connection",
			zap.String("received", received), zap.String("looks-like", hint))
		c.out.lock()
		c.out.buf = append(c.out.buf, amqp.ProtocolHeader...)
		c.out.unlock(len(amqp.ProtocolHeader))
		return errConnClosed
	}
	start := c.b.startFrame(c.mechanisms())
	c.out.lock()
	c.out.buf = append(c.out.buf, start...)
	c.out.unlock(len(start))
	c.flush() // as send does before the writer runs

	m, err := c.expect(stateStarting, amqp.ClassConnection, 11)
	if err != nil {
		return silent(err)
	}
	startOk := m.(*amqp.ConnectionStartOk)
	c.clientProps = startOk.ClientProperties
	if caps, ok := c.clientProps["capabilities"].(amqp.Table); ok {
		c.capCancelNotify, _ = caps["consumer_cancel_notify"].(bool)
		c.capAuthFailure, _ = caps["authentication_failure_close"].(bool)
		c.capBlocked, _ = caps["connection.blocked"].(bool)
	}
	u, err := c.login(startOk)
	if err != nil {
		return err
	}
	c.user = u

	hb := uint16(c.b.cfg.Heartbeat / time.Second)
	c.send(0, &amqp.ConnectionTune{ChannelMax: c.b.cfg.ChannelMax, FrameMax: c.b.cfg.FrameMax, Heartbeat: hb})
	m, err = c.expect(stateTuning, amqp.ClassConnection, 31)
	if err != nil {
		return silent(err)
	}
	tuneOk := m.(*amqp.ConnectionTuneOk)
	if err := negotiate("frame_max", amqp.FrameMinSize, c.b.cfg.FrameMax, tuneOk.FrameMax); err != nil {
		return err
	}
	if err := negotiate("channel_max", 1, uint32(c.b.cfg.ChannelMax), uint32(tuneOk.ChannelMax)); err != nil {
		return err
	}
	c.frameMax = tuneOk.FrameMax
	c.channelMax = tuneOk.ChannelMax
	c.fr.SetMaxFrameSize(c.frameMax + frameSizeFudge)
	// RabbitMQ takes the client's heartbeat, whatever it offered.
	c.heartbeat = time.Duration(tuneOk.Heartbeat) * time.Second

	m, err = c.expect(stateOpening, amqp.ClassConnection, 40)
	if err != nil {
		return err
	}
	open := m.(*amqp.ConnectionOpen)
	v := c.b.vhost(open.VirtualHost)
	if (v == nil || !c.b.canAccessVHost(u, v.name)) && c.b.syncDefinitions() {
		// A vhost or permission made through another node a moment ago.
		v = c.b.vhost(open.VirtualHost)
	}
	if v == nil {
		return amqp.Errorf(amqp.NotAllowed, amqp.ClassConnection, 40, "vhost %s not found", open.VirtualHost)
	}
	if !c.b.canAccessVHost(u, v.name) {
		return amqp.Errorf(amqp.NotAllowed, amqp.ClassConnection, 40,
			"access to vhost '%s' refused for user '%s'", v.name, u.name)
	}
	if err := c.b.admitConn(c, v.name, u.name); err != nil {
		return err
	}
	c.vhost = v
	c.log.vhost, c.log.user = v.name, u.name
	c.send(0, &amqp.ConnectionOpenOk{})
	c.rd.until.Store(0)
	if c.heartbeat > 0 {
		c.rd.timeout.Store(int64(2 * c.heartbeat))
	} else {
		_ = c.nc.SetReadDeadline(time.Time{})
	}
	// The writer starts before opened is set: forceClose of an open
	// connection sends connection.close from another goroutine.
	c.startWriter(c.heartbeat)
	c.opened.Store(true)
	c.logOpened()
	return nil
}

// negotiate checks a frame_max or channel_max of connection.tune-ok as
// RabbitMQ does: 0 (no limit) is refused when the server has a limit.
func negotiate(field string, minimum, server, client uint32) error {
	detail := ""
	if field == "channel_max" && client == 0 {
		detail = " (no limit)"
	}
	if client != 0 && client < minimum {
		return amqp.Errorf(amqp.NotAllowed, amqp.ClassConnection, 30,
			"negotiated %s = %d%s is lower than the minimum allowed value (%d)", field, client, detail, minimum)
	}
	if server != 0 && (client == 0 || client > server) {
		return amqp.Errorf(amqp.NotAllowed, amqp.ClassConnection, 30,
			"negotiated %s = %d%s is higher than the maximum allowed value (%d)", field, client, detail, server)
	}
	return nil
}

// expect reads frames until a method arrives on channel 0 (heartbeats are
// skipped) and checks that it is the one the handshake needs next.
func (c *conn) expect(state string, classID, methodID uint16) (amqp.Method, error) {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		if f.Type == amqp.FrameHeartbeat && f.Channel == 0 {
			continue
		}
		if f.Type != amqp.FrameMethod || f.Channel != 0 {
			return nil, unexpectedFrame(f)
		}
		m, err := c.dec.Decode(f.Payload)
		if err != nil {
			return nil, err
		}
		if m.ClassID() != classID || m.MethodID() != methodID {
			return nil, amqp.Errorf(amqp.ChannelError, m.ClassID(), m.MethodID(),
				"unexpected method in connection state %s", state)
		}
		return m, nil
	}
}
