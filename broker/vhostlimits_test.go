package broker_test

import (
	"errors"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// TestVHostLimits: a vhost's own max-connections and max-queues (as
// rabbitmqctl set_vhost_limits) refuse the connection (530) and the queue
// (406) past them, as RabbitMQ does, and nothing once cleared; they are
// kept across a restart and in a definitions snapshot another node
// restores.
func TestVHostLimits(t *testing.T) {
	dir := t.TempDir()
	s, stop := startStored(t, dir)
	if err := s.AddVHost("lim"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPermissions("guest", "lim", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVHostLimits("lim", map[string]int64{"max-bogus": 1}); !errors.Is(err, broker.ErrInvalidVHostLimit) {
		t.Fatalf("unknown limit: %v", err)
	}
	if err := s.SetVHostLimits("nope", map[string]int64{broker.VHostLimitMaxQueues: 1}); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("limits of a missing vhost: %v", err)
	}
	if err := s.SetVHostLimits("lim", map[string]int64{broker.VHostLimitMaxConnections: 1, broker.VHostLimitMaxQueues: 1}); err != nil {
		t.Fatal(err)
	}
	url := func() string { return strings.TrimSuffix(s.URL, "/") + "/lim" }
	check := func(when string) {
		t.Helper()
		c1, err := amqp091.Dial(url())
		if err != nil {
			t.Fatalf("%s: first connection: %v", when, err)
		}
		defer c1.Close()
		r := rawStart(t, s.Addr, "guest", "guest")
		r.method() // connection.tune
		r.send(0, &amqp.ConnectionTuneOk{ChannelMax: defaultTune.channelMax, FrameMax: defaultTune.frameMax})
		r.send(0, &amqp.ConnectionOpen{VirtualHost: "lim"})
		cl := r.expectConnClose(530)
		if want := "NOT_ALLOWED - access to vhost 'lim' refused for user 'guest': connection limit (1) is reached"; cl.ReplyText != want {
			t.Fatalf("%s: second connection closed with %q, want %q", when, cl.ReplyText, want)
		}
		ch := open(t, c1)
		if _, err := ch.QueueDeclare("q1", true, false, false, false, nil); err != nil {
			t.Fatalf("%s: first queue: %v", when, err)
		}
		_, err = ch.QueueDeclare("q2", true, false, false, false, nil)
		expectReason(t, expectCode(t, err, 406), "PRECONDITION_FAILED - cannot declare queue 'q2': queue limit in vhost 'lim' (1) is reached")
		// Other vhosts are not limited.
		c2 := dial(t, s)
		if _, err := open(t, c2).QueueDeclare("", false, true, true, false, nil); err != nil {
			t.Fatalf("%s: a queue in /: %v", when, err)
		}
		if _, err := open(t, c2).QueueDeclare("", false, true, true, false, nil); err != nil {
			t.Fatalf("%s: another queue in /: %v", when, err)
		}
	}
	check("set")
	snap, err := s.SnapshotDefinitions()
	if err != nil {
		t.Fatal(err)
	}

	stop()
	s, stop = startStored(t, dir)
	if got, _ := s.VHostLimitsOf("lim"); got[broker.VHostLimitMaxConnections] != 1 || got[broker.VHostLimitMaxQueues] != 1 {
		t.Fatalf("after a restart: limits %v", got)
	}
	check("after a restart")

	other, _ := startStored(t, t.TempDir())
	if err := other.RestoreDefinitionsAt(1000, snap); err != nil {
		t.Fatal(err)
	}
	if got, _ := other.VHostLimitsOf("lim"); got[broker.VHostLimitMaxConnections] != 1 || got[broker.VHostLimitMaxQueues] != 1 {
		t.Fatalf("restored from a snapshot: limits %v", got)
	}

	if err := s.ClearVHostLimit("lim", broker.VHostLimitMaxConnections); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.VHostLimitsOf("lim"); len(got) != 1 {
		t.Fatalf("after clearing max-connections: %v", got)
	}
	if err := s.ClearVHostLimit("lim", "all"); err != nil {
		t.Fatal(err)
	}
	var conns []*amqp091.Connection
	for range 3 {
		c, err := amqp091.Dial(url())
		if err != nil {
			t.Fatalf("cleared: %v", err)
		}
		conns = append(conns, c)
	}
	if _, err := open(t, conns[0]).QueueDeclare("q2", true, false, false, false, nil); err != nil {
		t.Fatalf("cleared: second queue: %v", err)
	}
	for _, c := range conns {
		c.Close()
	}
}
