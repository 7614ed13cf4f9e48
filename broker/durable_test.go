package broker_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
	"github.com/warrenmq/warren/store"
)

// startOn runs a broker on the store in dir and returns it with a stop
// function that closes the broker and then the store, as a restart would.
func startOn(t *testing.T, dir string) (*brokertest.Server, func()) {
	t.Helper()
	st, err := store.Open(store.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s := brokertest.Start(t, &broker.Config{Store: st})
	stopped := false
	return s, func() {
		if stopped {
			return
		}
		stopped = true
		_ = s.Close()
		if err := st.Close(); err != nil {
			t.Errorf("closing store: %v", err)
		}
	}
}

func TestDurableTopologyAndMessagesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	c := dial(t, s)
	ch := open(t, c)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 100))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ch.ExchangeDeclare("d.topic", "topic", true, false, false, false, amqp091.Table{"alternate-exchange": "ae"}))
	must(ch.ExchangeDeclare("t.fanout", "fanout", false, false, false, false, nil))
	_, err := ch.QueueDeclare("d.q", true, false, false, false, amqp091.Table{"x-custom": int32(5)})
	must(err)
	_, err = ch.QueueDeclare("t.q", false, false, false, false, nil)
	must(err)
	must(ch.QueueBind("d.q", "orders.#", "d.topic", false, nil))
	must(ch.QueueBind("t.q", "", "t.fanout", false, nil))
	must(ch.QueueBind("d.q", "gone", "d.topic", false, nil))
	must(ch.QueueUnbind("d.q", "gone", "d.topic", nil))

	for i := 0; i < 10; i++ {
		mode := amqp091.Persistent
		if i == 9 {
			mode = amqp091.Transient // not kept across a restart
		}
		must(ch.PublishWithContext(context.Background(), "d.topic", "orders.eu", false, false, amqp091.Publishing{
			DeliveryMode: mode,
			Headers:      amqp091.Table{"n": int32(i)},
			Body:         []byte(fmt.Sprintf("m%d", i)),
		}))
	}
	for i := 0; i < 10; i++ {
		select {
		case cf := <-confirms:
			if !cf.Ack {
				t.Fatalf("publish %d nacked", cf.DeliveryTag)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no confirm")
		}
	}
	// Ack m0, leave m1 delivered but unacknowledged.
	for i := 0; i < 2; i++ {
		m, ok, err := ch.Get("d.q", false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		if i == 0 {
			must(m.Ack(false))
		}
	}
	_ = c.Close()
	stop()

	s, stop = startOn(t, dir)
	defer stop()
	c = dial(t, s)
	ch = open(t, c)
	if err := ch.ExchangeDeclarePassive("d.topic", "topic", true, false, false, false, nil); err != nil {
		t.Fatalf("durable exchange lost: %v", err)
	}
	ch = open(t, c)
	if err := ch.ExchangeDeclarePassive("t.fanout", "fanout", false, false, false, false, nil); amqpCode(err) != 404 {
		t.Fatalf("transient exchange survived: %v", err)
	}
	ch = open(t, c)
	if _, err := ch.QueueDeclarePassive("t.q", false, false, false, false, nil); amqpCode(err) != 404 {
		t.Fatalf("transient queue survived: %v", err)
	}
	ch = open(t, c)
	// Redeclaring with the same arguments succeeds only if they were kept.
	q, err := ch.QueueDeclare("d.q", true, false, false, false, amqp091.Table{"x-custom": int32(5)})
	if err != nil {
		t.Fatalf("durable queue lost or changed: %v", err)
	}
	if q.Messages != 8 {
		t.Fatalf("recovered %d messages, want 8 (m1..m8)", q.Messages)
	}
	for i := 1; i <= 8; i++ {
		m, ok, err := ch.Get("d.q", true)
		if err != nil || !ok {
			t.Fatalf("get %d: %v %v", i, ok, err)
		}
		if want := fmt.Sprintf("m%d", i); string(m.Body) != want {
			t.Fatalf("got %s, want %s", m.Body, want)
		}
		if m.Redelivered != (i == 1) {
			t.Fatalf("%s redelivered=%v", m.Body, m.Redelivered)
		}
		if m.Headers["n"] != int32(i) || m.DeliveryMode != amqp091.Persistent {
			t.Fatalf("properties lost: %+v", m)
		}
	}
	// The binding came back (and the removed one did not).
	must(ch.PublishWithContext(context.Background(), "d.topic", "orders.us", false, false, amqp091.Publishing{Body: []byte("after")}))
	must(ch.PublishWithContext(context.Background(), "d.topic", "gone", false, false, amqp091.Publishing{Body: []byte("nowhere")}))
	waitFor(t, "routed message", func() bool {
		q, err := ch.QueueDeclarePassive("d.q", true, false, false, false, nil)
		return err == nil && q.Messages == 1
	})
	m, _, _ := ch.Get("d.q", true)
	if string(m.Body) != "after" {
		t.Fatalf("got %q", m.Body)
	}
}

func TestDeletedDurableThingsStayDeleted(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	c := dial(t, s)
	ch := open(t, c)
	if _, err := ch.QueueDeclare("dq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("dx", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("dq", "k", "dx", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "dx", "k", false, false, amqp091.Publishing{DeliveryMode: 2, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete("dq", false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDelete("dx", false, false); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	stop()

	s, stop = startOn(t, dir)
	defer stop()
	c = dial(t, s)
	ch = open(t, c)
	if _, err := ch.QueueDeclarePassive("dq", true, false, false, false, nil); amqpCode(err) != 404 {
		t.Fatalf("deleted queue came back: %v", err)
	}
	ch = open(t, c)
	q, err := ch.QueueDeclare("dq", true, false, false, false, nil)
	if err != nil || q.Messages != 0 {
		t.Fatalf("redeclared queue has %d messages (%v)", q.Messages, err)
	}
}

func TestTxCommitPersists(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	c := dial(t, s)
	ch := open(t, c)
	if _, err := ch.QueueDeclare("txq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := ch.PublishWithContext(context.Background(), "", "txq", false, false, amqp091.Publishing{DeliveryMode: 2, Body: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	stop()
	s, stop = startOn(t, dir)
	defer stop()
	ch = open(t, dial(t, s))
	q, err := ch.QueueDeclarePassive("txq", true, false, false, false, nil)
	if err != nil || q.Messages != 5 {
		t.Fatalf("after restart: %d messages (%v)", q.Messages, err)
	}
}

func TestTopicPermissionsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// publishSync's round trip declares allowed.q passively.
	_, err := open(t, dial(t, s)).QueueDeclare("allowed.q", true, false, false, false, nil)
	must(err)
	must(s.AddVHost("gone"))
	for _, u := range []string{"u", "w"} {
		must(s.PutUser(u, "p", nil))
		must(s.SetPermissions(u, "/", ".*", ".*", ".*"))
		must(s.SetTopicPermissions(u, "/", "amq.topic", `^{username}\.`, `^{username}\.`))
	}
	must(s.SetTopicPermissions("u", "/", "amq.topic", `^{username}\.`, `.*`)) // overwrites
	must(s.SetTopicPermissions("u", "/", "logs", "^$", "^$"))
	must(s.ClearTopicPermissions("u", "/", "logs"))
	must(s.SetTopicPermissions("u", "gone", "amq.topic", "^$", "^$"))
	must(s.DeleteVHost("gone"))
	must(s.DeleteUser("w"))
	stop()

	s, stop = startOn(t, dir)
	defer stop()
	want := []broker.TopicPermissionInfo{{User: "u", VHost: "/", Exchange: "amq.topic", Write: `^{username}\.`, Read: ".*"}}
	if got := s.TopicPermissions(); !reflect.DeepEqual(got, want) {
		t.Fatalf("TopicPermissions after restart = %+v, want %+v", got, want)
	}
	c, err := amqp091.Dial(fmt.Sprintf("amqp://u:p@%s/", s.Addr))
	must(err)
	t.Cleanup(func() { _ = c.Close() })
	ch := open(t, c)
	must(publishSync(ch, "amq.topic", "u.a"))
	e := expectCode(t, publishSync(ch, "amq.topic", "v.a"), 403)
	if want := "write access to topic 'v.a' in exchange 'amq.topic' in vhost '/' refused for user 'u'"; !strings.Contains(e.Reason, want) {
		t.Fatalf("reason %q, want %q", e.Reason, want)
	}

	// A cleared topic permission stays cleared.
	must(s.ClearTopicPermissions("u", "/", "amq.topic"))
	stop()
	s, stop = startOn(t, dir)
	defer stop()
	if got := s.TopicPermissions(); len(got) != 0 {
		t.Fatalf("TopicPermissions after clear and restart = %+v", got)
	}
}

func TestGlobalParametersSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	for _, name := range []string{"cluster_name", "other"} {
		if created, err := s.SetGlobalParameter(name, []byte(`"`+name+`-1"`)); err != nil || !created {
			t.Fatalf("set %s: %v %v", name, created, err)
		}
	}
	if created, err := s.SetGlobalParameter("cluster_name", []byte(`"warren-a"`)); err != nil || created {
		t.Fatalf("overwrite: %v %v", created, err)
	}
	if found, err := s.DeleteGlobalParameter("other"); err != nil || !found {
		t.Fatalf("delete: %v %v", found, err)
	}
	stop()
	s, stop = startOn(t, dir)
	defer stop()
	got := s.GlobalParameters()
	if len(got) != 1 || got[0].Name != "cluster_name" || string(got[0].Value) != `"warren-a"` {
		t.Fatalf("after restart: %+v", got)
	}
}

// TestQueueDeletionSkipsStoreWithoutMessages: a durable queue that never
// journaled a message has nothing in the store for its deletion to clear
// (no flush, no scan); one that journaled a persistent message has, even
// once it is consumed, and so has every queue recovered from the store.
func TestQueueDeletionSkipsStoreWithoutMessages(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	ch := open(t, dial(t, s))
	for _, q := range []string{"never", "transient-only", "persistent"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	pub := func(q string, mode uint8) {
		if err := ch.PublishWithContext(context.Background(), "", q, false, false,
			amqp091.Publishing{DeliveryMode: mode, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	pub("transient-only", amqp091.Transient)
	pub("persistent", amqp091.Persistent)
	for _, q := range []string{"transient-only", "persistent"} {
		waitFor(t, q+" has its message", func() bool {
			m, ok, err := ch.Get(q, true)
			if err != nil {
				t.Fatal(err)
			}
			_ = m
			return ok
		})
	}
	want := map[string]bool{"never": false, "transient-only": false, "persistent": true}
	for q, w := range want {
		if got, ok := s.QueueMayHoldData("/", q); !ok || got != w {
			t.Errorf("queue %s: may hold data %t (found %t), want %t", q, got, ok, w)
		}
	}
	stop()
	s, stop = startOn(t, dir)
	defer stop()
	for q := range want {
		if got, ok := s.QueueMayHoldData("/", q); !ok || !got {
			t.Errorf("queue %s recovered: may hold data %t (found %t), want true", q, got, ok)
		}
	}
	ch = open(t, dial(t, s))
	for q := range want {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			t.Fatal(err)
		}
	}
}
