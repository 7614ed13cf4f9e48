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
