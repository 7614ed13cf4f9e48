package web

import (
	"testing"

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

// TestAPISingleActiveConsumerTag: a queue's single_active_consumer_tag is
// its active consumer's tag, the next one's once it is cancelled, and
// null for a queue without single active consumer; /api/extensions lists
// no extensions.
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
		return e.must(200, "GET", "/api/queues/%2F/"+q, nil).obj(t)["single_active_consumer_tag"]
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
