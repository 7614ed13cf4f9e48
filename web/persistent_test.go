package web

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestQueuePersistentFields: /api/queues and the detailed metrics report
// a durable classic queue's persistent messages and bytes (3 of the 5
// published, while one is unacknowledged, then 2 once it is acked), none
// for a transient queue, and every message of a quorum queue.
func TestQueuePersistentFields(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	for _, q := range []struct {
		name    string
		durable bool
		args    amqp091.Table
	}{{"dq", true, nil}, {"tq", false, nil}, {"qq", true, amqp091.Table{"x-queue-type": "quorum"}}} {
		if _, err := ch.QueueDeclare(q.name, q.durable, false, false, false, q.args); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"dq", "tq", "qq"} {
		for i, p := range []struct {
			mode uint8
			body string
		}{{2, "persist-01"}, {1, "trans-1"}, {2, "persist-02"}, {1, "trans-2"}, {2, "persist-03"}} {
			dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false,
				amqp091.Publishing{DeliveryMode: p.mode, Body: []byte(p.body)})
			if err != nil {
				t.Fatal(err)
			}
			if i == 4 {
				if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
					t.Fatalf("confirm: %v %v", ok, err)
				}
			}
		}
	}
	fields := func(q string) (float64, float64) {
		o := e.must(200, "GET", "/api/queues/%2F/"+q, nil).obj(t)
		return num(t, o["messages_persistent"]), num(t, o["message_bytes_persistent"])
	}
	m, ok, err := ch.Get("dq", false)
	if err != nil || !ok || string(m.Body) != "persist-01" {
		t.Fatalf("get: %q %v %v", m.Body, ok, err)
	}
	for _, c := range []struct {
		q        string
		n, bytes float64
	}{{"dq", 3, 30}, {"tq", 0, 0}, {"qq", 5, 44}} {
		if n, b := fields(c.q); n != c.n || b != c.bytes {
			t.Fatalf("%s: messages_persistent %v, message_bytes_persistent %v, want %v, %v", c.q, n, b, c.n, c.bytes)
		}
	}
	ts := httptest.NewServer(e.srv.MetricsHandler())
	defer ts.Close()
	res, err := http.Get(ts.URL + "/metrics/detailed?family=queue_metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	found := 0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.Contains(line, `queue="dq"`) && strings.HasPrefix(line, "rabbitmq_detailed_queue_messages_persistent") {
			found++
			want := " 3"
			if strings.HasPrefix(line, "rabbitmq_detailed_queue_messages_persistent_bytes") {
				want = " 30"
			}
			if !strings.HasSuffix(line, want) {
				t.Fatalf("metric %s, want it to end in%s", line, want)
			}
		}
	}
	if found != 2 {
		t.Fatalf("%d persistent series of dq in:\n%s", found, body)
	}
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ack", func() bool { n, b := fields("dq"); return n == 2 && b == 20 })
}
