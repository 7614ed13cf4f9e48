package broker_test

import (
	"fmt"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

func TestLimitConnections(t *testing.T) {
	tests := []struct {
		name string
		cfg  broker.Config
		want string
	}{
		{"node", broker.Config{MaxConnections: 2}, "connection refused: node connection limit (2) is reached"},
		{"vhost", broker.Config{MaxConnectionsPerVHost: 2}, "access to vhost '/' refused for user 'guest': connection limit (2) is reached"},
		{"user", broker.Config{MaxConnectionsPerUser: 2}, "Connection refused for user 'guest': user connection limit (2) is reached"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := brokertest.Start(t, &tc.cfg)
			c1 := dial(t, s)
			dial(t, s)
			r := rawOpenErr(t, s.Addr)
			cl := r.expectConnClose(530)
			if !strings.Contains(cl.ReplyText, tc.want) {
				t.Fatalf("reply %q, want %q", cl.ReplyText, tc.want)
			}
			// A closed connection frees its place.
			_ = c1.Close()
			waitFor(t, "a free connection slot", func() bool {
				c, err := amqp091.Dial(s.URL)
				if err != nil {
					return false
				}
				_ = c.Close()
				return true
			})
		})
	}
}

// rawOpenErr runs the handshake up to connection.open, whose answer the
// caller reads.
func rawOpenErr(t *testing.T, addr string) *rawConn {
	r := rawStart(t, addr, "guest", "guest")
	r.method() // connection.tune
	r.send(0, &amqp.ConnectionTuneOk{ChannelMax: defaultTune.channelMax, FrameMax: defaultTune.frameMax})
	r.send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
	return r
}

func TestLimitQueuesPerVHost(t *testing.T) {
	s := brokertest.Start(t, &broker.Config{MaxQueuesPerVHost: 3})
	c := dial(t, s)
	ch := open(t, c)
	for i := range 3 {
		if _, err := ch.QueueDeclare(fmt.Sprintf("q%d", i), false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Redeclaring an existing queue is fine.
	if _, err := ch.QueueDeclare("q0", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	_, err := ch.QueueDeclare("q3", false, false, false, false, nil)
	e := expectCode(t, err, 406)
	if want := "cannot declare queue 'q3': queue limit in vhost '/' (3) is reached"; !strings.Contains(e.Reason, want) {
		t.Fatalf("reason %q, want %q", e.Reason, want)
	}
}
