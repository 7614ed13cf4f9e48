package broker_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// limitedUser adds user "lim" (password "pw", all permissions on "/")
// with the given limits.
func limitedUser(t *testing.T, b *broker.Broker, limits map[string]int64) string {
	t.Helper()
	if err := b.PutUser("lim", "pw", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.SetPermissions("lim", "/", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	if err := b.SetUserLimits("lim", limits); err != nil {
		t.Fatal(err)
	}
	return "lim"
}

func dialAs(t *testing.T, s *brokertest.Server, user string) (*amqp091.Connection, error) {
	t.Helper()
	c, err := amqp091.Dial(fmt.Sprintf("amqp://%s:pw@%s/", user, s.Addr))
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, err
}

// refusedOpen runs a handshake as user and expects connection.open to be
// refused with 530 and text.
func refusedOpen(t *testing.T, s *brokertest.Server, user, text string) {
	t.Helper()
	r := rawStart(t, s.Addr, user, "pw")
	r.method() // connection.tune
	r.send(0, &amqp.ConnectionTuneOk{ChannelMax: defaultTune.channelMax, FrameMax: defaultTune.frameMax})
	r.send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
	cl := r.expectConnClose(530)
	if cl.ReplyText != "NOT_ALLOWED - "+text || cl.FailingClassID != 10 || cl.FailingMethodID != 40 {
		t.Fatalf("connection.close %d %q (%d.%d), want %q on connection.open", cl.ReplyCode, cl.ReplyText, cl.FailingClassID, cl.FailingMethodID, text)
	}
}

// TestUserMaxConnections: a user's max-connections refuses the
// connection.open beyond it with RabbitMQ's 530 (other users are not
// counted); a closed connection frees its place; 0 refuses every
// connection and a negative limit is none.
func TestUserMaxConnections(t *testing.T) {
	s := brokertest.Start(t, nil)
	user := limitedUser(t, s.Broker, map[string]int64{"max-connections": 2})
	dial(t, s) // guest's: not counted
	c1, err := dialAs(t, s, user)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dialAs(t, s, user); err != nil {
		t.Fatal(err)
	}
	refusedOpen(t, s, user, "connection refused for user 'lim': user connection limit (2) is reached")
	dial(t, s) // guest is not limited

	_ = c1.Close()
	waitFor(t, "a free connection for lim", func() bool {
		c, err := dialAs(t, s, user)
		return err == nil && c.Close() == nil
	})

	if err := s.SetUserLimits(user, map[string]int64{"max-connections": 0}); err != nil {
		t.Fatal(err)
	}
	refusedOpen(t, s, user, "connection refused for user 'lim': user connection limit (0) is reached")
	if err := s.SetUserLimits(user, map[string]int64{"max-connections": -1}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := dialAs(t, s, user); err != nil {
			t.Fatalf("with max-connections -1: %v", err)
		}
	}
}

// TestUserMaxChannels: max-channels counts the user's channels over all
// its connections; the channel.open beyond it closes that connection with
// RabbitMQ's 530; a closed channel frees its place; clearing the limit
// lifts it.
func TestUserMaxChannels(t *testing.T) {
	s := brokertest.Start(t, nil)
	user := limitedUser(t, s.Broker, map[string]int64{"max-channels": 2})
	a, err := dialAs(t, s, user)
	if err != nil {
		t.Fatal(err)
	}
	b, err := dialAs(t, s, user)
	if err != nil {
		t.Fatal(err)
	}
	open(t, a)
	open(t, b)
	open(t, dial(t, s)) // guest's channels do not count
	_, err = b.Channel()
	e := expectCode(t, err, 530)
	if want := "NOT_ALLOWED - number of channels opened for user 'lim' has reached the maximum allowed user limit of (2)"; e.Reason != want {
		t.Fatalf("reason %q, want %q", e.Reason, want)
	}
	// b's channel went with b; a's stays: one more fits, then none.
	open(t, a)
	_, err = a.Channel()
	expectCode(t, err, 530)
	c, err := dialAs(t, s, user)
	if err != nil {
		t.Fatal(err)
	}
	open(t, c)
	open(t, c)
	if err := s.SetUserLimits(user, map[string]int64{"max-channels": 0}); err != nil {
		t.Fatal(err)
	}
	d, err := dialAs(t, s, user)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Channel()
	expectCode(t, err, 530)

	if err := s.ClearUserLimit(user, "max-channels"); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		open(t, c)
	}
}

// TestUserLimitsDefinitions: limits merge, clear one by one or all, go
// with the user, survive a restart (and are enforced after it), and are
// kept when the user is updated; unknown limits and users are refused.
func TestUserLimitsDefinitions(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	defer func() { stop() }()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	limits := func(want map[string]int64) {
		t.Helper()
		got, err := s.UserLimits("lim")
		must(err)
		if !maps.Equal(got, want) {
			t.Fatalf("limits %v, want %v", got, want)
		}
	}
	limitedUser(t, s.Broker, map[string]int64{"max-connections": 5, "max-channels": 3})
	must(s.SetUserLimits("lim", map[string]int64{"max-channels": 0}))
	limits(map[string]int64{"max-connections": 5, "max-channels": 0})
	must(s.PutUser("lim", "pw", []string{"management"}))
	limits(map[string]int64{"max-connections": 5, "max-channels": 0})
	if err := s.SetUserLimits("lim", map[string]int64{"max-queues": 1}); err == nil || !strings.Contains(err.Error(), "max-queues") {
		t.Fatalf("unknown limit: %v", err)
	}
	if err := s.SetUserLimits("nobody", map[string]int64{"max-channels": 1}); err == nil {
		t.Fatal("limits set on a missing user")
	}
	if _, err := s.UserLimits("nobody"); err == nil {
		t.Fatal("limits of a missing user")
	}
	if users := s.Users(); len(users) != 2 || users[1].Name != "lim" || users[1].Limits["max-connections"] != 5 {
		t.Fatalf("Users() = %+v", users)
	}

	stop()
	s, stop = startOn(t, dir)
	limits(map[string]int64{"max-connections": 5, "max-channels": 0})
	c, err := dialAs(t, s, "lim")
	must(err)
	_, err = c.Channel()
	expectCode(t, err, 530)

	must(s.ClearUserLimit("lim", "max-channels"))
	limits(map[string]int64{"max-connections": 5})
	must(s.ClearUserLimit("lim", "all"))
	limits(nil)
	must(s.SetUserLimits("lim", map[string]int64{"max-connections": 1}))
	must(s.DeleteUser("lim"))
	limitedUser(t, s.Broker, map[string]int64{"max-channels": 1})
	limits(map[string]int64{"max-channels": 1})

	stop()
	s, stop = startOn(t, dir)
	limits(map[string]int64{"max-channels": 1})
}

// TestUserLimitsSnapshot: the definitions snapshot carries each user's
// limits ("limits", {} when none, as RabbitMQ's export) and a broker
// restored from it enforces them.
func TestUserLimitsSnapshot(t *testing.T) {
	a := brokertest.Start(t, nil)
	limitedUser(t, a.Broker, map[string]int64{"max-channels": 0, "max-connections": 7})
	snap, err := a.SnapshotDefinitions()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(snap), `"limits":{"max-channels":0,"max-connections":7}`) || !strings.Contains(string(snap), `"limits":{}`) {
		t.Fatalf("snapshot: %s", snap)
	}
	fresh := defsBroker(t, broker.Config{})
	if err := fresh.RestoreDefinitions(snap); err != nil {
		t.Fatal(err)
	}
	got, err := fresh.UserLimits("lim")
	if err != nil || !maps.Equal(got, map[string]int64{"max-channels": 0, "max-connections": 7}) {
		t.Fatalf("restored limits %v %v", got, err)
	}
	again, err := fresh.SnapshotDefinitions()
	if err != nil || string(again) != string(snap) {
		t.Fatalf("snapshot of the restored broker differs: %v\n%s\n%s", err, again, snap)
	}
}
