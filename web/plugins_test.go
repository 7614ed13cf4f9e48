package web

import (
	"net/http"
	"strings"
	"testing"
)

// TestDelayedExchangeJSON: the management API creates delayed and hash
// exchanges, lists their types, and shows messages_delayed as the
// delayed-message plugin does.
func TestDelayedExchangeJSON(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/api/exchanges/%2F/dx", map[string]any{"type": "x-delayed-message", "durable": true,
		"arguments": map[string]any{"x-delayed-type": "direct"}})
	e.must(201, "PUT", "/api/exchanges/%2F/chx", map[string]any{"type": "x-consistent-hash"})
	e.must(200, "POST", "/api/exchanges/%2F/dx/publish", map[string]any{"routing_key": "k", "payload": "later",
		"payload_encoding": "string", "properties": map[string]any{"headers": map[string]any{"x-delay": 3_600_000}}})
	waitFor(t, "messages_delayed 1", func() bool {
		x := e.must(200, "GET", "/api/exchanges/%2F/dx", nil).obj(t)
		return x["type"] == "x-delayed-message" && x["messages_delayed"] == float64(1)
	})
	if x := e.must(200, "GET", "/api/exchanges/%2F/chx", nil).obj(t); x["type"] != "x-consistent-hash" {
		t.Fatalf("type %v", x["type"])
	}
	e.must(201, "PUT", "/api/exchanges/%2F/ddx", map[string]any{"type": "x-message-deduplication",
		"arguments": map[string]any{"x-cache-size": 10}})
	for range 2 {
		e.must(200, "POST", "/api/exchanges/%2F/ddx/publish", map[string]any{"routing_key": "k", "payload": "m",
			"payload_encoding": "string", "properties": map[string]any{"headers": map[string]any{"x-deduplication-header": "once"}}})
	}
	if x := e.must(200, "GET", "/api/exchanges/%2F/ddx", nil).obj(t); x["deduplication_cache_size"] != float64(1) {
		t.Fatalf("deduplication_cache_size %v", x["deduplication_cache_size"])
	}
	types := map[string]bool{}
	for _, it := range e.must(200, "GET", "/api/overview", nil).obj(t)["exchange_types"].([]any) {
		types[it.(map[string]any)["name"].(string)] = true
	}
	for _, want := range []string{"x-delayed-message", "x-consistent-hash", "x-modulus-hash"} {
		if !types[want] {
			t.Errorf("exchange_types lacks %s: %v", want, types)
		}
	}
}

// TestDelayedLatenessMetric: /metrics has a histogram of how late the
// scheduler routed delayed messages, counting each one routed.
func TestDelayedLatenessMetric(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/api/exchanges/%2F/dx", map[string]any{"type": "x-delayed-message", "durable": true,
		"arguments": map[string]any{"x-delayed-type": "direct"}})
	e.must(201, "PUT", "/api/queues/%2F/dq", map[string]any{"durable": true})
	e.must(201, "POST", "/api/bindings/%2F/e/dx/q/dq", map[string]any{"routing_key": "k"})
	scrape := func() string {
		rec := newRecorder()
		req, _ := http.NewRequest("GET", "/metrics", nil)
		e.srv.MetricsHandler().ServeHTTP(rec, req)
		return rec.buf.String()
	}
	if body := scrape(); !strings.Contains(body, "warren_delayed_messages_lateness_seconds_count 0\n") {
		t.Fatalf("before any delayed message: %s", grepLines(body, "warren_delayed"))
	}
	for range 2 {
		e.must(200, "POST", "/api/exchanges/%2F/dx/publish", map[string]any{"routing_key": "k", "payload": "soon",
			"payload_encoding": "string", "properties": map[string]any{"headers": map[string]any{"x-delay": 20}}})
	}
	waitFor(t, "both routed", func() bool {
		return e.must(200, "GET", "/api/queues/%2F/dq", nil).obj(t)["messages"] == float64(2)
	})
	body := scrape()
	for _, want := range []string{
		"warren_delayed_messages_lateness_seconds_count 2\n",
		`warren_delayed_messages_lateness_seconds_bucket{le="+Inf"} 2` + "\n",
		`warren_delayed_messages_lateness_seconds_bucket{le="5"} 2` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q: %s", want, grepLines(body, "warren_delayed"))
		}
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
