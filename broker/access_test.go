package broker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker/brokertest"
)

// accessSetup starts a broker where guest declared allowed.* and denied.*
// exchanges and queues, and user u (password p) may configure, write and
// read what the given patterns say. It returns u's connection.
func accessSetup(t *testing.T, configure, write, read string) (*brokertest.Server, *amqp091.Connection) {
	t.Helper()
	s := brokertest.Start(t, nil)
	admin := open(t, dial(t, s))
	for _, x := range []string{"allowed.x", "denied.x"} {
		if err := admin.ExchangeDeclare(x, "direct", false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"allowed.q", "denied.q"} {
		if _, err := admin.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutUser("u", "p", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPermissions("u", "/", configure, write, read); err != nil {
		t.Fatal(err)
	}
	c, err := amqp091.Dial(fmt.Sprintf("amqp://u:p@%s/", s.Addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return s, c
}

// publishSync publishes and then makes a round trip, so that a channel
// exception caused by the publish is returned.
//
// A refused publish closes the channel; the client may then fail the
// passive declare with its own "channel not open" error before it has read
// the server's channel.close, so the close reason is taken from
// NotifyClose.
func publishSync(ch *amqp091.Channel, exchange, key string) error {
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	if err := ch.PublishWithContext(context.Background(), exchange, key, false, false, amqp091.Publishing{Body: []byte("m")}); err != nil {
		return err
	}
	if _, err := ch.QueueDeclarePassive("allowed.q", false, false, false, false, nil); err != nil {
		select {
		case e := <-closed:
			if e != nil {
				return e
			}
		case <-time.After(5 * time.Second):
		}
		return err
	}
	return nil
}

func TestAccessControlTable(t *testing.T) {
	const allowed = `^allowed\.`
	_, c := accessSetup(t, allowed, allowed, allowed)
	tests := []struct {
		name string
		op   func(ch *amqp091.Channel) error
		// want is "" for success, else the reply text.
		want string
	}{
		{"queue.declare allowed", func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("allowed.new", false, true, false, false, nil)
			return err
		}, ""},
		{"queue.declare denied", func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("denied.new", false, true, false, false, nil)
			return err
		}, "configure access to queue 'denied.new' in vhost '/' refused for user 'u'"},
		{"queue.declare passive needs nothing", func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclarePassive("denied.q", false, false, false, false, nil)
			return err
		}, ""},
		{"queue.declare server-named", func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("", false, true, true, false, nil)
			return err
		}, "configure access to queue 'amq.gen-"},
		{"queue.declare with DLX", func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("allowed.dl", false, true, false, false, amqp091.Table{"x-dead-letter-exchange": "denied.x"})
			return err
		}, "write access to exchange 'denied.x' in vhost '/' refused for user 'u'"},
		{"queue.delete denied", func(ch *amqp091.Channel) error {
			_, err := ch.QueueDelete("denied.q", false, false, false)
			return err
		}, "configure access to queue 'denied.q' in vhost '/' refused for user 'u'"},
		{"queue.purge denied", func(ch *amqp091.Channel) error {
			_, err := ch.QueuePurge("denied.q", false)
			return err
		}, "read access to queue 'denied.q' in vhost '/' refused for user 'u'"},
		{"queue.purge allowed", func(ch *amqp091.Channel) error {
			_, err := ch.QueuePurge("allowed.q", false)
			return err
		}, ""},
		{"basic.get denied", func(ch *amqp091.Channel) error {
			_, _, err := ch.Get("denied.q", true)
			return err
		}, "read access to queue 'denied.q' in vhost '/' refused for user 'u'"},
		{"basic.consume denied", func(ch *amqp091.Channel) error {
			_, err := ch.Consume("denied.q", "", true, false, false, false, nil)
			return err
		}, "read access to queue 'denied.q' in vhost '/' refused for user 'u'"},
		{"basic.consume allowed", func(ch *amqp091.Channel) error {
			_, err := ch.Consume("allowed.q", "", true, false, false, false, nil)
			return err
		}, ""},
		{"exchange.declare denied", func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclare("denied.new", "fanout", false, true, false, false, nil)
		}, "configure access to exchange 'denied.new' in vhost '/' refused for user 'u'"},
		{"exchange.declare passive needs nothing", func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclarePassive("denied.x", "direct", false, false, false, false, nil)
		}, ""},
		{"exchange.declare with AE", func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclare("allowed.ae", "fanout", false, true, false, false, amqp091.Table{"alternate-exchange": "denied.x"})
		}, "write access to exchange 'denied.x' in vhost '/' refused for user 'u'"},
		{"exchange.delete denied", func(ch *amqp091.Channel) error {
			return ch.ExchangeDelete("denied.x", false, false)
		}, "configure access to exchange 'denied.x' in vhost '/' refused for user 'u'"},
		{"queue.bind needs write on the queue", func(ch *amqp091.Channel) error {
			return ch.QueueBind("denied.q", "k", "allowed.x", false, nil)
		}, "write access to queue 'denied.q' in vhost '/' refused for user 'u'"},
		{"queue.bind needs read on the exchange", func(ch *amqp091.Channel) error {
			return ch.QueueBind("allowed.q", "k", "denied.x", false, nil)
		}, "read access to exchange 'denied.x' in vhost '/' refused for user 'u'"},
		{"queue.bind allowed", func(ch *amqp091.Channel) error {
			return ch.QueueBind("allowed.q", "k", "allowed.x", false, nil)
		}, ""},
		{"queue.unbind needs read on the exchange", func(ch *amqp091.Channel) error {
			return ch.QueueUnbind("allowed.q", "k", "denied.x", nil)
		}, "read access to exchange 'denied.x' in vhost '/' refused for user 'u'"},
		{"exchange.bind needs write on the destination", func(ch *amqp091.Channel) error {
			return ch.ExchangeBind("denied.x", "k", "allowed.x", false, nil)
		}, "write access to exchange 'denied.x' in vhost '/' refused for user 'u'"},
		{"exchange.bind needs read on the source", func(ch *amqp091.Channel) error {
			return ch.ExchangeBind("allowed.x", "k", "denied.x", false, nil)
		}, "read access to exchange 'denied.x' in vhost '/' refused for user 'u'"},
		{"exchange.unbind needs write on the destination", func(ch *amqp091.Channel) error {
			return ch.ExchangeUnbind("denied.x", "k", "allowed.x", false, nil)
		}, "write access to exchange 'denied.x' in vhost '/' refused for user 'u'"},
		{"basic.publish allowed", func(ch *amqp091.Channel) error {
			return publishSync(ch, "allowed.x", "k")
		}, ""},
		{"basic.publish denied", func(ch *amqp091.Channel) error {
			return publishSync(ch, "denied.x", "k")
		}, "write access to exchange 'denied.x' in vhost '/' refused for user 'u'"},
		{"basic.publish to the default exchange is amq.default", func(ch *amqp091.Channel) error {
			return publishSync(ch, "", "allowed.q")
		}, "write access to exchange 'amq.default' in vhost '/' refused for user 'u'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ch := open(t, c)
			defer ch.Close()
			err := tc.op(ch)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("want success, got %v", err)
				}
				return
			}
			e := expectCode(t, err, 403)
			if !strings.HasPrefix(e.Reason, "ACCESS_REFUSED - "+tc.want) {
				t.Fatalf("reason %q, want %q", e.Reason, tc.want)
			}
		})
	}
	if c.IsClosed() {
		t.Fatal("an access refusal closed the connection")
	}
}

func TestAccessPatterns(t *testing.T) {
	tests := []struct {
		pattern string
		name    string
		ok      bool
	}{
		{".*", "anything", true},
		{"lowed", "allowed.q", true}, // unanchored, as re:run
		{"^lowed", "allowed.q", false},
		{"", "allowed.q", false}, // "" is ^$
		{`^(amq\.gen.*|allowed\..*)$`, "allowed.q", true},
		{`^(amq\.gen.*|allowed\..*)$`, "denied.q", false},
	}
	for _, tc := range tests {
		t.Run(tc.pattern+"/"+tc.name, func(t *testing.T) {
			_, c := accessSetup(t, tc.pattern, ".*", ".*")
			ch := open(t, c)
			_, err := ch.QueueDeclare(tc.name, false, false, false, false, nil)
			if tc.ok && err != nil {
				t.Fatalf("want success, got %v", err)
			}
			if !tc.ok {
				expectCode(t, err, 403)
			}
		})
	}
	s := brokertest.Start(t, nil)
	if err := s.SetPermissions("guest", "/", "(", ".*", ".*"); err == nil {
		t.Fatal("invalid pattern accepted")
	}
}

func TestAccessServerNamedQueue(t *testing.T) {
	_, c := accessSetup(t, `^(amq\.gen.*|amq\.default)$`, `^(amq\.gen.*|amq\.default)$`, `^(amq\.gen.*|amq\.default)$`)
	ch := open(t, c)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "", q.Name, false, false, amqp091.Publishing{Body: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	recv(t, d)
}

// A permission change reaches channels that cached a publish verdict.
func TestAccessPublishCacheInvalidated(t *testing.T) {
	s, c := accessSetup(t, ".*", ".*", ".*")
	ch := open(t, c)
	if err := publishSync(ch, "allowed.x", "k"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPermissions("u", "/", ".*", "^denied", ".*"); err != nil {
		t.Fatal(err)
	}
	expectCode(t, publishSync(ch, "allowed.x", "k"), 403)
}

func TestAccessTopicPermissions(t *testing.T) {
	s, c := accessSetup(t, ".*", ".*", ".*")
	if err := s.SetTopicPermissions("u", "/", "amq.topic", `^{username}\.`, `^{username}\.`); err != nil {
		t.Fatal(err)
	}
	if got := s.TopicPermissions(); len(got) != 1 || got[0].Write != `^{username}\.` {
		t.Fatalf("TopicPermissions = %+v", got)
	}
	ch := open(t, c)
	if err := publishSync(ch, "amq.topic", "u.a"); err != nil {
		t.Fatal(err)
	}
	e := expectCode(t, publishSync(ch, "amq.topic", "v.a"), 403)
	if want := "write access to topic 'v.a' in exchange 'amq.topic' in vhost '/' refused for user 'u'"; !strings.Contains(e.Reason, want) {
		t.Fatalf("reason %q, want %q", e.Reason, want)
	}
	ch = open(t, c)
	if err := ch.QueueBind("allowed.q", "u.#", "amq.topic", false, nil); err != nil {
		t.Fatal(err)
	}
	expectCode(t, ch.QueueBind("allowed.q", "v.#", "amq.topic", false, nil), 403)
	// Other exchanges are not restricted; clearing lifts the restriction.
	ch = open(t, c)
	if err := publishSync(ch, "amq.direct", "v.a"); err != nil {
		t.Fatal(err)
	}
	if err := s.ClearTopicPermissions("u", "/", "amq.topic"); err != nil {
		t.Fatal(err)
	}
	if err := publishSync(ch, "amq.topic", "v.a"); err != nil {
		t.Fatal(err)
	}
}

func TestAccessLoopbackUsers(t *testing.T) {
	// The test connects over 127.0.0.1, which is loopback: guest gets in.
	s := brokertest.Start(t, nil)
	publishConsume(t, dial(t, s))
}
