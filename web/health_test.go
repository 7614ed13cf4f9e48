package web

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// newEnvConfig is newEnv with a broker configuration.
func newEnvConfig(t *testing.T, cfg *broker.Config) *env {
	t.Helper()
	bs := brokertest.Start(t, cfg)
	srv, err := New(Config{Logger: zaptest.NewLogger(t), SampleInterval: time.Hour}, bs.Broker)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &env{t: t, bs: bs, srv: srv, ts: ts}
}

// canonical re-encodes a JSON body with sorted keys.
func canonical(t *testing.T, body []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%q: %v", body, err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// TestHealthChecksAsRabbitMQ: each check answers RabbitMQ 3.10's status
// and body (as a real node answers them on one node without alarms).
func TestHealthChecksAsRabbitMQ(t *testing.T) {
	e := newEnv(t)
	port := e.bs.Addr[strings.LastIndex(e.bs.Addr, ":")+1:]
	for _, c := range []struct {
		path   string
		status int
		body   string
	}{
		{"/api/health/checks/alarms", 200, `{"status":"ok"}`},
		{"/api/health/checks/local-alarms", 200, `{"status":"ok"}`},
		{"/api/health/checks/virtual-hosts", 200, `{"status":"ok"}`},
		{"/api/health/checks/node-is-quorum-critical", 200, `{"reason":"single node cluster","status":"ok"}`},
		{"/api/health/checks/node-is-mirror-sync-critical", 200, `{"reason":"single node cluster","status":"ok"}`},
		{"/api/health/checks/certificate-expiration/1/months", 200, `{"status":"ok"}`},
		{"/api/health/checks/certificate-expiration/x/months", 400, `{"error":"bad_request","reason":"Invalid expiration value."}`},
		{"/api/health/checks/certificate-expiration/1/fortnights", 400, `{"error":"bad_request","reason":"Time unit not recognised. Supported units: days, weeks, months, years."}`},
		{"/api/health/checks/port-listener/" + port, 200, `{"port":` + port + `,"status":"ok"}`},
		{"/api/health/checks/port-listener/abc", 400, `{"error":"bad_request","reason":"Invalid port"}`},
		{"/api/health/checks/protocol-listener/amqp", 200, `{"protocol":"amqp","status":"ok"}`},
		{"/api/health/checks/protocol-listener/amqp091", 200, `{"protocol":"amqp","status":"ok"}`},
		{"/api/healthchecks/node", 200, `{"status":"ok"}`},
	} {
		r := e.do("GET", c.path, nil)
		if r.status != c.status || canonical(t, r.body) != c.body {
			t.Errorf("GET %s = %d %s, want %d %s", c.path, r.status, r.body, c.status, c.body)
		}
	}
	r := e.must(503, "GET", "/api/health/checks/protocol-listener/mqtt", nil).obj(t)
	if r["status"] != "failed" || r["reason"] != "No active listener" || r["missing"] != "mqtt" || len(r["protocols"].([]any)) == 0 {
		t.Errorf("protocol-listener/mqtt = %v", r)
	}
	e.must(404, "GET", "/api/healthchecks/node/nobody@nowhere", nil)
	e.must(200, "GET", "/api/healthchecks/node/"+esc(nodeName()), nil)
	// A wrong method on a check: 405 with the Allow header.
	r2 := e.must(405, "POST", "/api/health/checks/alarms", nil)
	if got := r2.header.Get("Allow"); got != "HEAD, GET, OPTIONS" {
		t.Errorf("Allow = %q", got)
	}
}

// TestHealthChecksAlarm: a memory alarm fails the alarm checks and the
// legacy node check with RabbitMQ's bodies, and clearing it passes them.
func TestHealthChecksAlarm(t *testing.T) {
	e := newEnvConfig(t, &broker.Config{ResourceCheckInterval: 5 * time.Millisecond})
	e.bs.Broker.SetMemoryHighWatermark(0, 1)
	waitFor(t, "the memory alarm", func() bool { return e.do("GET", "/api/health/checks/alarms", nil).status == 503 })
	for path, reason := range map[string]string{
		"/api/health/checks/alarms":       "There are alarms in effect in the cluster",
		"/api/health/checks/local-alarms": "There are alarms in effect on the node",
	} {
		r := e.must(503, "GET", path, nil).obj(t)
		alarms, _ := r["alarms"].([]any)
		if r["status"] != "failed" || r["reason"] != reason || len(alarms) != 1 ||
			alarms[0].(map[string]any)["resource"] != "memory" || alarms[0].(map[string]any)["node"] != nodeName() {
			t.Errorf("%s = %v", path, r)
		}
	}
	r := e.must(503, "GET", "/api/healthchecks/node", nil).obj(t)
	if r["status"] != "failed" || r["reason"] != "resource alarm(s) in effect:[memory]" {
		t.Errorf("healthchecks/node = %v", r)
	}
	e.bs.Broker.SetMemoryHighWatermark(0, 1<<62)
	waitFor(t, "the alarm to clear", func() bool { return e.do("GET", "/api/health/checks/alarms", nil).status == 200 })
	e.must(200, "GET", "/api/healthchecks/node", nil)
}

// TestTopicPermissions: the routes docs/configuration.md promises,
// answering as RabbitMQ 3.10, and the permission taking effect.
func TestTopicPermissions(t *testing.T) {
	e := newEnv(t)
	e.must(404, "GET", "/api/topic-permissions/%2F/guest", nil)
	e.must(201, "PUT", "/api/topic-permissions/%2F/guest", map[string]any{"exchange": "amq.topic", "write": "^a", "read": ".*"})
	e.must(204, "PUT", "/api/topic-permissions/%2F/guest", map[string]any{"exchange": "amq.topic", "write": "^b", "read": ".*"})
	r := e.must(400, "PUT", "/api/topic-permissions/%2F/guest", map[string]any{"write": "^b", "read": ".*"}).obj(t)
	if r["reason"] != "[{key_missing,exchange}]" {
		t.Errorf("no exchange: %v", r)
	}
	r = e.must(400, "PUT", "/api/topic-permissions/%2F/nouser", map[string]any{"exchange": "amq.topic", "write": "^b", "read": ".*"}).obj(t)
	if r["reason"] != "vhost_or_user_not_found" {
		t.Errorf("unknown user: %v", r)
	}
	e.must(400, "PUT", "/api/topic-permissions/%2F/guest", map[string]any{"exchange": "amq.topic", "write": "(", "read": ".*"})
	want := `[{"exchange":"amq.topic","read":".*","user":"guest","vhost":"/","write":"^b"}]`
	for _, path := range []string{"/api/topic-permissions/%2F/guest", "/api/topic-permissions", "/api/users/guest/topic-permissions", "/api/vhosts/%2F/topic-permissions"} {
		if got := canonical(t, e.must(200, "GET", path, nil).body); got != want {
			t.Errorf("GET %s = %s, want %s", path, got, want)
		}
	}
	e.must(404, "GET", "/api/topic-permissions/nov/guest", nil)
	e.must(404, "GET", "/api/users/nouser/topic-permissions", nil)
	// Only administrators.
	e.must(201, "PUT", "/api/users/mon", map[string]any{"password": "p", "tags": "monitoring"})
	e.must(401, "GET", "/api/topic-permissions", nil, "mon", "p")
	// In effect: a publish to amq.topic with a key outside ^b is refused.
	if tps := e.bs.Broker.TopicPermissions(); len(tps) != 1 || tps[0].Write != "^b" {
		t.Errorf("broker topic permissions = %v", tps)
	}
	e.must(204, "DELETE", "/api/topic-permissions/%2F/guest", nil)
	e.must(404, "DELETE", "/api/topic-permissions/%2F/guest", nil)
	e.must(404, "GET", "/api/topic-permissions/%2F/guest", nil)
	if got := canonical(t, e.must(200, "GET", "/api/topic-permissions", nil).body); got != "[]" {
		t.Errorf("after delete: %s", got)
	}
}
