package broker_test

import (
	"io"
	"net"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// observed starts a broker whose info logs are captured.
func observed(t *testing.T) (*brokertest.Server, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.InfoLevel)
	return brokertest.Start(t, &broker.Config{Logger: zap.New(core)}), logs
}

// logged waits for an entry with message msg whose fields include want,
// and returns its fields.
func logged(t *testing.T, logs *observer.ObservedLogs, level zapcore.Level, msg string, want map[string]string) map[string]any {
	t.Helper()
	var found map[string]any
	waitFor(t, "log line "+msg, func() bool {
		for _, e := range logs.FilterMessage(msg).All() {
			f := e.ContextMap()
			ok := e.Level == level
			for k, v := range want {
				if s, _ := f[k].(string); !strings.Contains(s, v) {
					ok = false
				}
			}
			if ok {
				found = f
				return true
			}
		}
		return false
	})
	return found
}

func dialNamed(t *testing.T, s *brokertest.Server, name string) *amqp091.Connection {
	t.Helper()
	props := amqp091.NewConnectionProperties()
	props.SetClientConnectionName(name)
	c, err := amqp091.DialConfig(s.URL, amqp091.Config{Properties: props})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConnectionOpenAndCloseLogged(t *testing.T) {
	s, logs := observed(t)

	c := dialNamed(t, s, "orders-api")
	f := logged(t, logs, zapcore.InfoLevel, "connection opened", map[string]string{"user": "guest", "vhost": "/", "client-name": "orders-api", "client": "AMQP 0.9.1 Client"})
	if peer, _ := f["peer"].(string); !strings.HasPrefix(peer, "127.0.0.1:") {
		t.Errorf("peer %q", f["peer"])
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	logged(t, logs, zapcore.InfoLevel, "connection closed", map[string]string{"client-name": "orders-api", "user": "guest", "reason": "client closed the connection: 200"})

	// A channel open-ok comes from the reader after the handshake: the
	// connection counts as open by then.
	open(t, dialNamed(t, s, "billing"))
	var name string
	waitFor(t, "the billing connection", func() bool {
		for _, ci := range s.Connections() {
			if ci.Open && ci.ClientProperties["connection_name"] == "billing" {
				name = ci.Name
			}
		}
		return name != ""
	})
	if err := s.CloseConnection(name, "maintenance"); err != nil {
		t.Fatal(err)
	}
	logged(t, logs, zapcore.InfoLevel, "connection closed", map[string]string{"client-name": "billing", "reason": "closed by the broker: 320 CONNECTION_FORCED - maintenance"})

	// A client that drops the socket without connection.close.
	nc, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	props := amqp091.NewConnectionProperties()
	props.SetClientConnectionName("crashy")
	crashy, err := amqp091.Open(nc, amqp091.Config{Properties: props, Vhost: "/",
		SASL: []amqp091.Authentication{&amqp091.PlainAuth{Username: "guest", Password: "guest"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer crashy.Close()
	logged(t, logs, zapcore.InfoLevel, "connection opened", map[string]string{"client-name": "crashy"})
	_ = nc.Close()
	logged(t, logs, zapcore.WarnLevel, "connection closed", map[string]string{"client-name": "crashy", "reason": "client unexpectedly closed the TCP connection"})
}

func TestNonAMQPBytesLoggedReadably(t *testing.T) {
	s, logs := observed(t)
	nc, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write([]byte("GET /api/overview HTTP/1.1\r\nHost: localhost:5672\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	reply, _ := io.ReadAll(nc)
	if string(reply) != "AMQP\x00\x00\x09\x01" {
		t.Errorf("reply %q", reply)
	}
	logged(t, logs, zapcore.WarnLevel, "client did not start with the AMQP 0-9-1 protocol header: closing the connection",
		map[string]string{"received": `"GET /api"`, "looks-like": "an HTTP request", "peer": "127.0.0.1:"})

	nc2, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	if _, err := nc2.Write([]byte("AMQP\x00\x01\x00\x00")); err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(nc2)
	logged(t, logs, zapcore.WarnLevel, "client did not start with the AMQP 0-9-1 protocol header: closing the connection",
		map[string]string{"received": `"AMQP\x00\x01\x00\x00"`, "looks-like": "AMQP 1-0-0"})
}
