package broker

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/warrenmq/warren/amqp"
)

// Connection lifecycle log lines, at info as RabbitMQ logs them: one when
// a connection is open (peer, user, vhost, the client's connection_name),
// one when it ends with the reason. A connection that ends before it is
// open is logged where the handshake fails.

// connLog writes one connection's log lines: the broker's logger with the
// connection's fields (conn and peer; vhost and user once it is open; the
// client's connection_name once it has logged opening) before each line's
// own. Unlike a zap child logger, which holds an encoder and its 1 KiB
// buffer per connection from the first line it writes (at the default
// level, every connection's "connection opened"), it holds only the
// values, and encodes nothing for a line below the level. Its fields are
// set by the reader goroutine before the connection has channels, and
// only read after.
type connLog struct {
	// base is the broker's logger with two more caller frames skipped
	// (write and its caller here).
	base                *zap.Logger
	id                  uint64
	peer                net.Addr
	vhost, user, client string
}

func (l *connLog) write(lvl zapcore.Level, msg string, fs []zap.Field) {
	ce := l.base.Check(lvl, msg)
	if ce == nil {
		return
	}
	all := make([]zap.Field, 0, 5+len(fs))
	if l.peer != nil { // not the management API's internal connection
		all = append(all, zap.Uint64("conn", l.id), zap.Stringer("peer", l.peer))
	}
	if l.vhost != "" {
		all = append(all, zap.String("vhost", l.vhost), zap.String("user", l.user))
	}
	if l.client != "" {
		all = append(all, zap.String("client-name", l.client))
	}
	ce.Write(append(all, fs...)...)
}

func (l *connLog) Debug(msg string, fs ...zap.Field) { l.write(zapcore.DebugLevel, msg, fs) }
func (l *connLog) Info(msg string, fs ...zap.Field)  { l.write(zapcore.InfoLevel, msg, fs) }
func (l *connLog) Warn(msg string, fs ...zap.Field)  { l.write(zapcore.WarnLevel, msg, fs) }
func (l *connLog) Error(msg string, fs ...zap.Field) { l.write(zapcore.ErrorLevel, msg, fs) }

// closeNote records the client's connection.close, for the connection's
// last log line. Reader goroutine. (conn.sentClose and
// conn.missedHeartbeats record the other ways a connection ends.)
type closeNote struct {
	// peerClosed is set when the client sent connection.close, with its
	// reply code and text.
	peerClosed bool
	peerCode   uint16
	peerText   string
}

// logOpened logs the opened connection. Reader goroutine, once.
func (c *conn) logOpened() {
	c.log.client, _ = c.clientProps["connection_name"].(string)
	c.log.Info("connection opened", zap.String("client", clientProduct(c.clientProps)))
}

// clientProduct is "product version (platform)" from client properties.
func clientProduct(props amqp.Table) string {
	var parts []string
	for _, k := range []string{"product", "version"} {
		if s, _ := props[k].(string); s != "" {
			parts = append(parts, s)
		}
	}
	if s, _ := props["platform"].(string); s != "" {
		parts = append(parts, "("+s+")")
	}
	return strings.Join(parts, " ")
}

// notePeerClose records the client's connection.close. Reader goroutine.
func (c *conn) notePeerClose(m *amqp.ConnectionClose) {
	c.closeNote.peerClosed = true
	c.closeNote.peerCode = m.ReplyCode
	c.closeNote.peerText = strings.Clone(m.ReplyText)
}

// logClosed logs the end of an open connection; err is what ended the
// reader (nil after an orderly close). Reader goroutine, after teardown.
func (c *conn) logClosed(err error) {
	if !c.opened.Load() {
		return
	}
	d := zap.Duration("duration", time.Since(c.connectedAt).Round(time.Millisecond))
	switch ae := c.sentClose.Load(); {
	case c.closeNote.peerClosed:
		c.log.Info("connection closed", zap.String("reason", fmt.Sprintf("client closed the connection: %d %s", c.closeNote.peerCode, c.closeNote.peerText)), d)
	case ae != nil:
		c.log.Info("connection closed", zap.String("reason", fmt.Sprintf("closed by the broker: %d %s", ae.Code, ae.Text)), d)
	case c.missedHeartbeats.Load():
		c.log.Warn("connection closed", zap.String("reason", "missed heartbeats from the client"), d)
	case err == nil, errors.Is(err, errConnClosed):
		c.log.Info("connection closed", zap.String("reason", "closed"), d)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, net.ErrClosed):
		c.log.Warn("connection closed", zap.String("reason", "client unexpectedly closed the TCP connection"), d)
	default:
		c.log.Warn("connection closed", zap.String("reason", err.Error()), d)
	}
}

// describeHeader makes the first bytes of a connection that is not AMQP
// 0-9-1 readable in a log line, with what they most likely are.
func describeHeader(hdr []byte) (quoted, hint string) {
	quoted = fmt.Sprintf("%q", hdr)
	s := string(hdr)
	for _, m := range []string{"GET ", "POST ", "PUT ", "HEAD ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT "} {
		if strings.HasPrefix(s, m) || strings.HasPrefix(m, s) && len(s) >= 3 {
			return quoted, "an HTTP request: the management API and console listen on the HTTP port (default 15672), not the AMQP port"
		}
	}
	switch {
	case len(hdr) >= 3 && hdr[0] == 0x16 && hdr[1] == 0x03:
		return quoted, "a TLS handshake: AMQP over TLS listens on the AMQPS port (--amqps-addr, default 5671)"
	case strings.HasPrefix(s, "AMQP") && len(hdr) == 8:
		return quoted, fmt.Sprintf("the header of AMQP %d-%d-%d (protocol id %d): Warren speaks AMQP 0-9-1", hdr[5], hdr[6], hdr[7], hdr[4])
	case strings.HasPrefix(s, "SSH-"):
		return quoted, "an SSH client"
	}
	return quoted, "not an AMQP client"
}
