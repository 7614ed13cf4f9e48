package web

import "testing"

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
