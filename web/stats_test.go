package web

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/amqp"
)

func jfield(t *testing.T, m map[string]any, path ...string) any {
	t.Helper()
	var v any = m
	for _, p := range path {
		o, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%v: no %s", path, p)
		}
		v = o[p]
	}
	return v
}

// TestMessageStatsAsRabbitMQ: channels, exchanges, connections, vhosts
// and the overview count what the reference load did, as RabbitMQ
// counts it, and the counters of closed channels and connections stay in
// the totals.
func TestMessageStatsAsRabbitMQ(t *testing.T) {
	e := newEnv(t)
	conn, err := amqp091.Dial(e.bs.URL)
	if err != nil {
		t.Fatal(err)
	}
	loadBroker(t, e)
	// loadBroker's connection: channel 1 publishes with confirms, 2
	// consumes with manual acks, 3 gets.
	var pub, cons, getter map[string]any
	for _, c := range e.must(200, "GET", "/api/channels", nil).list(t) {
		c := c.(map[string]any)
		switch ms := c["message_stats"].(map[string]any); {
		case ms["publish"] == 21.0:
			pub = c
		case ms["deliver"] == 20.0:
			cons = c
		case ms["get"] == 1.0:
			getter = c
		}
	}
	if pub == nil || cons == nil || getter == nil {
		t.Fatalf("channels = %s", e.must(200, "GET", "/api/channels", nil).body)
	}
	for _, c := range []struct {
		ch   map[string]any
		key  string
		want float64
	}{
		{pub, "confirm", 21}, {pub, "drop_unroutable", 1}, {pub, "return_unroutable", 0},
		{cons, "ack", 20}, {cons, "deliver_no_ack", 0}, {cons, "deliver_get", 20},
		{getter, "get_no_ack", 1}, {getter, "ack", 1}, {getter, "deliver_get", 2},
	} {
		if got := jfield(t, c.ch, "message_stats", c.key); got != c.want {
			t.Errorf("channel %v message_stats.%s = %v, want %v", c.ch["number"], c.key, got, c.want)
		}
	}
	if pub["confirm"] != true || pub["messages_unconfirmed"] != 0.0 {
		t.Errorf("publisher channel = %v", pub)
	}
	name := pub["name"].(string)
	if got := e.must(200, "GET", "/api/channels/"+esc(name), nil).obj(t); got["name"] != name {
		t.Errorf("GET /api/channels/%s = %v", name, got)
	}
	e.must(404, "GET", "/api/channels/nonsense", nil)

	x := e.must(200, "GET", "/api/exchanges/%2F/lx", nil).obj(t)
	if jfield(t, x, "message_stats", "publish_in") != 20.0 || jfield(t, x, "message_stats", "publish_out") != 20.0 {
		t.Errorf("exchange lx message_stats = %v", x["message_stats"])
	}
	x = e.must(200, "GET", "/api/exchanges/%2F/amq.direct", nil).obj(t)
	if jfield(t, x, "message_stats", "publish_in") != 1.0 || jfield(t, x, "message_stats", "publish_out") != 0.0 {
		t.Errorf("exchange amq.direct message_stats = %v", x["message_stats"])
	}
	q := e.must(200, "GET", "/api/queues/%2F/lqq", nil).obj(t)
	if jfield(t, q, "message_stats", "get") != 1.0 || jfield(t, q, "message_stats", "get_no_ack") != 1.0 || jfield(t, q, "message_stats", "publish") != 20.0 {
		t.Errorf("queue lqq message_stats = %v", q["message_stats"])
	}

	var loadConn map[string]any
	for _, c := range e.must(200, "GET", "/api/connections", nil).list(t) {
		c := c.(map[string]any)
		if c["user_provided_name"] == "loadgen" {
			loadConn = c
		}
	}
	if loadConn == nil || loadConn["recv_oct"].(float64) < 21*5 || loadConn["send_oct"].(float64) < 20*5 || loadConn["recv_cnt"].(float64) < 1 {
		t.Fatalf("loadgen connection = %v", loadConn)
	}
	v := e.must(200, "GET", "/api/vhosts/%2F", nil).obj(t)
	if v["recv_oct"].(float64) < loadConn["recv_oct"].(float64) || jfield(t, v, "message_stats", "confirm") != 21.0 || v["messages"] != 18.0 {
		t.Errorf("vhost / = recv_oct %v, confirm %v, messages %v", v["recv_oct"], jfield(t, v, "message_stats", "confirm"), v["messages"])
	}
	o := e.must(200, "GET", "/api/overview", nil).obj(t)
	if jfield(t, o, "message_stats", "confirm") != 21.0 || jfield(t, o, "message_stats", "drop_unroutable") != 1.0 {
		t.Errorf("overview message_stats = %v", o["message_stats"])
	}
	if c := jfield(t, o, "churn_rates", "queue_created"); c != 2.0 {
		t.Errorf("churn_rates.queue_created = %v", c)
	}
	// Closing keeps the totals.
	conn.Close()
	closeAll(t, e)
	x = e.must(200, "GET", "/api/exchanges/%2F/lx", nil).obj(t)
	if jfield(t, x, "message_stats", "publish_in") != 20.0 {
		t.Errorf("exchange lx after close = %v", x["message_stats"])
	}
	o = e.must(200, "GET", "/api/overview", nil).obj(t)
	if jfield(t, o, "message_stats", "confirm") != 21.0 || jfield(t, o, "churn_rates", "connection_closed") != 2.0 {
		t.Errorf("overview after close = %v / %v", o["message_stats"], o["churn_rates"])
	}
	if v := e.must(200, "GET", "/api/vhosts/%2F", nil).obj(t); v["recv_oct"].(float64) < loadConn["recv_oct"].(float64) {
		t.Errorf("vhost recv_oct after close = %v", v["recv_oct"])
	}
}

// closeAll closes every connection and waits until they are gone.
func closeAll(t *testing.T, e *env) {
	t.Helper()
	for _, c := range e.must(200, "GET", "/api/connections", nil).list(t) {
		// 404: closed meanwhile.
		if r := e.do("DELETE", "/api/connections/"+esc(c.(map[string]any)["name"].(string)), nil); r.status != 204 && r.status != 404 {
			t.Fatalf("closing a connection: %d %s", r.status, r.body)
		}
	}
	waitFor(t, "no connections", func() bool { return len(e.must(200, "GET", "/api/connections", nil).list(t)) == 0 })
}

// TestRateHistory: the _details objects carry samples as RabbitMQ's do
// when a request gives *_age and *_incr: newest first, incr apart, the
// counter's value at each time; the overview keeps a day at one minute;
// a queue's history starts when a request asks for it.
func TestRateHistory(t *testing.T) {
	e := newEnv(t)
	// Samples every 5 s (the test takes them itself).
	srv, err := New(Config{Logger: zaptest.NewLogger(t), SampleInterval: 5 * time.Second}, e.bs.Broker)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	e.ts.Config.Handler = srv.Handler()
	e.must(201, "PUT", "/api/queues/%2F/h", map[string]any{})
	publish := func(n int) {
		for range n {
			if _, err := e.bs.Broker.Publish("/", "", "", "h", amqp.Properties{}, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := time.Now()
	// Ten minutes of history at 5 s, one publish per sample; a request
	// for the queue's history 30 s ago.
	var first int
	for ts := now.Add(-10 * time.Minute); !ts.After(now); ts = ts.Add(5 * time.Second) {
		publish(1)
		e.srv.sample(ts)
		if ts.Equal(now.Add(-30 * time.Second)) {
			q := e.must(200, "GET", "/api/queues/%2F/h?msg_rates_age=60&msg_rates_incr=5", nil).obj(t)
			first = distinct(jfield(t, q, "message_stats", "publish_details", "samples").([]any))
		}
	}
	o := e.must(200, "GET", "/api/overview?msg_rates_age=60&msg_rates_incr=5&lengths_age=60&lengths_incr=5", nil).obj(t)
	d := jfield(t, o, "message_stats", "publish_details").(map[string]any)
	samples := d["samples"].([]any)
	if len(samples) < 12 || len(samples) > 13 {
		t.Fatalf("%d samples: %v", len(samples), d)
	}
	// Newest first, 5 s apart; one publish per 5 s up to the last sample
	// (the request may come a few seconds after it).
	var prevT, prevV float64
	for i, s := range samples {
		s := s.(map[string]any)
		ts, v := s["timestamp"].(float64), s["sample"].(float64)
		if int64(ts)%5000 != 0 {
			t.Errorf("timestamp %v not on a 5 s boundary", ts)
		}
		if i > 0 && (prevT-ts != 5000 || v != prevV-1 && int64(prevT) <= now.UnixMilli()) {
			t.Errorf("sample %d = %v at %v after %v at %v", i, v, ts, prevV, prevT)
		}
		prevT, prevV = ts, v
	}
	if ar := d["avg_rate"].(float64); d["rate"] != 0.2 || ar <= 0 || ar > 0.2 {
		t.Errorf("rate %v, avg_rate %v, want 0.2", d["rate"], d["avg_rate"])
	}
	if s := jfield(t, o, "queue_totals", "messages_details", "samples").([]any); len(s) < 12 {
		t.Errorf("queue_totals samples = %v", s)
	}
	// Without parameters, rates only.
	o = e.must(200, "GET", "/api/overview", nil).obj(t)
	if _, ok := jfield(t, o, "message_stats", "publish_details").(map[string]any)["samples"]; ok {
		t.Error("samples without msg_rates_age")
	}
	// The last day, at one minute.
	o = e.must(200, "GET", "/api/overview?msg_rates_age=600&msg_rates_incr=60", nil).obj(t)
	samples = jfield(t, o, "message_stats", "publish_details", "samples").([]any)
	if len(samples) < 10 {
		t.Fatalf("%d samples at 60 s: %v", len(samples), samples)
	}
	for _, s := range samples {
		if int64(s.(map[string]any)["timestamp"].(float64))%60000 != 0 {
			t.Errorf("timestamp %v not on a minute", s)
		}
	}
	// A queue's history starts with the first request for it.
	q := e.must(200, "GET", "/api/queues/%2F/h?msg_rates_age=60&msg_rates_incr=5", nil).obj(t)
	if got := distinct(jfield(t, q, "message_stats", "publish_details", "samples").([]any)); first > 2 || got < 7 {
		t.Errorf("queue samples: %d distinct values, then %d", first, got)
	}
	// Malformed ranges are refused.
	for _, p := range []string{"msg_rates_age=60", "msg_rates_age=x&msg_rates_incr=5", "lengths_age=100000&lengths_incr=1", "data_rates_age=60&data_rates_incr=0"} {
		e.must(400, "GET", "/api/queues/%2F/h?"+p, nil)
	}
	// Connections' data rates.
	c, err := amqp091.Dial(e.bs.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "the connection", func() bool { return len(e.must(200, "GET", "/api/connections", nil).list(t)) == 1 })
	cn := e.must(200, "GET", "/api/connections?data_rates_age=60&data_rates_incr=5", nil).list(t)[0].(map[string]any)
	if _, ok := cn["recv_oct_details"].(map[string]any)["samples"]; !ok {
		t.Errorf("connection recv_oct_details = %v", cn["recv_oct_details"])
	}
}

// distinct counts the distinct values of samples.
func distinct(samples []any) int {
	seen := map[any]bool{}
	for _, s := range samples {
		seen[s.(map[string]any)["sample"]] = true
	}
	return len(seen)
}
