package web

import (
	"reflect"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestAPIAnswersAsRabbitMQ: requests RabbitMQ 3.10's management API
// answers in a way clients rely on, answered the same: an exchange given
// no type is a direct one; a user given neither password nor
// password_hash is created but cannot log in with a password, and a
// user's password is cleared the same way; a refused declaration's
// reason is the reply text without its AMQP reply name.
func TestAPIAnswersAsRabbitMQ(t *testing.T) {
	e := newEnv(t)

	e.must(201, "PUT", "/api/exchanges/%2F/notype", map[string]any{})
	if x := e.must(200, "GET", "/api/exchanges/%2F/notype", nil).obj(t); x["type"] != "direct" {
		t.Fatalf("exchange declared without a type: type %v, want direct", x["type"])
	}

	// Tags are required, as in RabbitMQ ("" for none), or the older
	// boolean administrator in their place.
	if r := e.must(400, "PUT", "/api/users/notags", map[string]any{"password": "pw"}).obj(t); r["reason"] != "tags_not_present" {
		t.Fatalf("user without tags: %v, want reason tags_not_present", r)
	}
	e.must(404, "GET", "/api/users/notags", nil)
	e.must(201, "PUT", "/api/users/notags", map[string]any{"password": "pw", "tags": ""})
	e.must(204, "PUT", "/api/users/notags", map[string]any{"password": "pw", "administrator": true})
	if u := e.must(200, "GET", "/api/users/notags", nil).obj(t); !reflect.DeepEqual(u["tags"], []any{"administrator"}) {
		t.Fatalf("user put with administrator: true has tags %v", u["tags"])
	}

	e.must(201, "PUT", "/api/users/nopass", map[string]any{"tags": "management"})
	e.must(201, "PUT", "/api/permissions/%2F/nopass", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	for _, pw := range []string{"", "guest", "nopass"} {
		if c, err := amqp091.Dial("amqp://nopass:" + pw + "@" + e.bs.Addr + "/"); err == nil {
			c.Close()
			t.Fatalf("a user created without a password logged in with password %q", pw)
		}
	}
	e.must(204, "PUT", "/api/users/nopass", map[string]any{"password": "secret", "tags": "management"})
	c, err := amqp091.Dial("amqp://nopass:secret@" + e.bs.Addr + "/")
	if err != nil {
		t.Fatalf("log in after the password was set: %v", err)
	}
	c.Close()
	e.must(204, "PUT", "/api/users/nopass", map[string]any{"tags": "management"})
	if c, err := amqp091.Dial("amqp://nopass:secret@" + e.bs.Addr + "/"); err == nil {
		c.Close()
		t.Fatal("the password still logs in after a PUT without one cleared it")
	}

	e.must(201, "PUT", "/api/queues/%2F/q1", map[string]any{"durable": true, "arguments": map[string]any{"x-max-length": 5}})
	r := e.must(400, "PUT", "/api/queues/%2F/q1", map[string]any{"durable": true, "arguments": map[string]any{"x-max-length": 6}})
	want := "inequivalent arg 'x-max-length' for queue 'q1' in vhost '/': received '6' but current is '5'"
	if got := r.obj(t)["reason"]; got != want {
		t.Fatalf("reason %q, want %q", got, want)
	}

	// A publish names every key it lacks, and publishes nothing.
	r = e.must(400, "POST", "/api/exchanges/%2F/amq.default/publish", map[string]any{"routing_key": "q1", "payload": "x"})
	if got, want := r.obj(t)["reason"], "[{key_missing,properties},{key_missing,payload_encoding}]"; got != want {
		t.Fatalf("publish without properties and payload_encoding: reason %q, want %q", got, want)
	}
	if q := e.must(200, "GET", "/api/queues/%2F/q1", nil).obj(t); q["messages"] != 0.0 {
		t.Fatalf("q1 holds %v messages after refused publishes", q["messages"])
	}
}

// TestAPISingleActiveConsumerTag: a queue's single_active_consumer_tag
// (and single_active_consumer_ctag) is its active consumer's tag, the next
// one's once it is cancelled, and null for a queue without single active
// consumer; /api/extensions lists no extensions.
func TestAPISingleActiveConsumerTag(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	if _, err := ch.QueueDeclare("sac", false, false, false, false, amqp091.Table{"x-single-active-consumer": true}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("plain", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ q, tag string }{{"sac", "first"}, {"sac", "second"}, {"plain", "p"}} {
		if _, err := ch.Consume(c.q, c.tag, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	tag := func(q string) any {
		o := e.must(200, "GET", "/api/queues/%2F/"+q, nil).obj(t)
		if o["single_active_consumer_ctag"] != o["single_active_consumer_tag"] {
			t.Fatalf("%s: single_active_consumer_ctag %v, tag %v", q, o["single_active_consumer_ctag"], o["single_active_consumer_tag"])
		}
		return o["single_active_consumer_tag"]
	}
	if got := tag("sac"); got != "first" {
		t.Fatalf("active consumer %v, want first", got)
	}
	if got, ok := e.must(200, "GET", "/api/queues/%2F/plain", nil).obj(t)["single_active_consumer_tag"]; !ok || got != nil {
		t.Fatalf("plain queue: single_active_consumer_tag %v (present %v), want null", got, ok)
	}
	if err := ch.Cancel("first", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "second to be active", func() bool { return tag("sac") == "second" })
	jsonEqual(t, e.must(200, "GET", "/api/extensions", nil), `[]`)
}

// TestAPIQueueFieldsAsRabbitMQ: the queue fields RabbitMQ reports that
// monitoring reads — unacknowledged bytes, the head message's timestamp,
// consumer capacity, an estimate of memory, idle_since (of the queue and of
// its channel) once their counters stop changing, and a quorum or stream
// queue's members on a single node.
func TestAPIQueueFieldsAsRabbitMQ(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	if _, err := ch.QueueDeclare("cq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct{ name, typ string }{{"qq", "quorum"}, {"sq", "stream"}} {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, amqp091.Table{"x-queue-type": q.typ}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(q string) map[string]any { return e.must(200, "GET", "/api/queues/%2F/"+q, nil).obj(t) }
	q := get("cq")
	if q["head_message_timestamp"] != nil || q["consumer_capacity"] != 0.0 || q["message_bytes_unacknowledged"] != 0.0 {
		t.Fatalf("empty queue: %v %v %v", q["head_message_timestamp"], q["consumer_capacity"], q["message_bytes_unacknowledged"])
	}
	empty := q["memory"].(float64)
	for i, ts := range []int64{1700000000, 1700000100} {
		if err := ch.Publish("", "cq", false, false, amqp091.Publishing{Body: make([]byte, 100*(i+1)), Timestamp: time.Unix(ts, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "two messages", func() bool { return get("cq")["messages"] == 2.0 })
	q = get("cq")
	if q["head_message_timestamp"] != 1700000000.0 || q["message_bytes"] != 300.0 || q["memory"].(float64) < empty+300 {
		t.Fatalf("two ready: head %v, bytes %v, memory %v (empty %v)", q["head_message_timestamp"], q["message_bytes"], q["memory"], empty)
	}
	d, ok, err := ch.Get("cq", false)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	q = get("cq")
	if q["head_message_timestamp"] != 1700000100.0 || q["message_bytes_unacknowledged"] != 100.0 || q["message_bytes"] != 300.0 ||
		q["message_bytes_ready"] != 200.0 {
		t.Fatalf("one got: %v", q)
	}
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume("cq", "c", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the consumer to take the rest", func() bool {
		q := get("cq")
		return q["messages_ready"] == 0.0 && q["consumer_capacity"] == 1.0 && q["consumer_utilisation"] == 1.0
	})
	// Idle once two samples of its counters are the same (the channel
	// too).
	chanIdle := func() (any, bool) {
		l := e.must(200, "GET", "/api/channels", nil).list(t)
		if len(l) != 1 {
			t.Fatalf("%d channels", len(l))
		}
		v, ok := l[0].(map[string]any)["idle_since"]
		return v, ok
	}
	now := time.Now()
	e.srv.sample(now.Add(-10 * time.Second))
	if _, idle := get("cq")["idle_since"]; idle {
		t.Fatal("idle_since after one sample")
	}
	if _, idle := chanIdle(); idle {
		t.Fatal("channel idle_since after one sample")
	}
	e.srv.sample(now.Add(-5 * time.Second))
	if since, idle := get("cq")["idle_since"]; !idle || !strings.HasSuffix(since.(string), "+00:00") {
		t.Fatalf("idle_since %v (present %v) after two equal samples", since, idle)
	}
	if since, idle := chanIdle(); !idle || !strings.HasSuffix(since.(string), "+00:00") {
		t.Fatalf("channel idle_since %v (present %v) after two equal samples", since, idle)
	}
	if err := ch.Publish("", "cq", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delivery", func() bool { return get("cq")["messages_unacknowledged"] == 2.0 })
	e.srv.sample(now)
	if since, idle := get("cq")["idle_since"]; idle {
		t.Fatalf("idle_since %v after a publish", since)
	}
	if since, idle := chanIdle(); idle {
		t.Fatalf("channel idle_since %v after a publish", since)
	}
	node := get("cq")["node"]
	for _, name := range []string{"qq", "sq"} {
		q := get(name)
		members, _ := q["members"].([]any)
		online, _ := q["online"].([]any)
		if len(members) != 1 || members[0] != node || len(online) != 1 || online[0] != node {
			t.Fatalf("%s: members %v online %v, want [%v]", name, q["members"], q["online"], node)
		}
		if _, ok := q["idle_since"]; ok {
			t.Fatalf("%s: idle_since on a %s queue", name, q["type"])
		}
	}
	if q := get("qq"); q["leader"] != node || q["consumer_capacity"] != 0.0 {
		t.Fatalf("qq: leader %v, consumer_capacity %v", q["leader"], q["consumer_capacity"])
	}
}
