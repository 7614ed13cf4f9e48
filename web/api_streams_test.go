package web

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

func TestStreamsAPI(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/api/queues/%2F/log", map[string]any{"type": "stream", "arguments": map[string]any{"x-max-age": "7D"}})
	ch := e.channel()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 10))
	for i := 0; i < 10; i++ {
		if err := ch.Publish("", "log", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		<-confirms
	}
	if err := ch.Qos(5, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume("log", "reader", false, false, false, false, amqp091.Table{"x-stream-offset": "first", "x-stream-consumer-name": "app"})
	if err != nil {
		t.Fatal(err)
	}
	var last amqp091.Delivery
	for i := 0; i < 4; i++ {
		last = <-d
	}
	if err := last.Ack(true); err != nil {
		t.Fatal(err)
	}
	var q map[string]any
	waitFor(t, "the named offset", func() bool {
		q = e.must(200, "GET", "/api/queues/%2F/log", nil).obj(t)
		st := q["stream"].(map[string]any)
		cs := st["consumers"].([]any)
		return len(cs) == 1 && cs[0].(map[string]any)["offset"] == 3.0
	})
	st := q["stream"].(map[string]any)
	c := st["consumers"].([]any)[0].(map[string]any)
	if q["type"] != "stream" || q["messages"] != 10.0 || c["name"] != "app" || c["lag"] != 6.0 || c["consumers"] != 1.0 ||
		st["first_offset"] != 0.0 || st["committed_offset"] != 10.0 || st["max_age_ms"] != 7*24*3600*1000.0 {
		t.Errorf("queue = %v", q)
	}
	cons := e.must(200, "GET", "/api/consumers/%2F", nil).list(t)
	if len(cons) != 1 || cons[0].(map[string]any)["stream_consumer_name"] != "app" || cons[0].(map[string]any)["stream_offset"] != 9.0 {
		t.Errorf("consumers = %v", cons)
	}

	e.must(201, "PUT", "/api/super-streams/%2F/inv", map[string]any{"partitions": 2, "arguments": map[string]any{"x-max-length-bytes": 1000000}})
	ss := e.must(200, "GET", "/api/super-streams/%2F/inv", nil).obj(t)
	if ps := ss["partitions"].([]any); len(ps) != 2 || ps[0] != "inv-0" || ps[1] != "inv-1" {
		t.Errorf("super stream = %v", ss)
	}
	e.must(400, "PUT", "/api/super-streams/%2F/bad", map[string]any{})
	e.must(400, "PUT", "/api/super-streams/%2F/bad", map[string]any{"partitions": 2, "routing": "nope"})
	e.must(204, "DELETE", "/api/super-streams/%2F/inv", nil)
	e.must(404, "GET", "/api/super-streams/%2F/inv", nil)
	e.must(404, "GET", "/api/queues/%2F/inv-0", nil)
}

// TestQueueTypeInPut: a queue PUT with "type": "quorum" declares a quorum
// queue, as "stream" declares a stream; an unknown type is refused.
func TestQueueTypeInPut(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/api/queues/%2F/q-quorum", map[string]any{"type": "quorum", "durable": true})
	q := e.must(200, "GET", "/api/queues/%2F/q-quorum", nil).obj(t)
	if q["type"] != "quorum" {
		t.Fatalf("queue type %v, want quorum", q["type"])
	}
	e.must(400, "PUT", "/api/queues/%2F/q-odd", map[string]any{"type": "odd"})
}
