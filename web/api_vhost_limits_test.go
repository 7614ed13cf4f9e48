package web

import (
	"encoding/json"
	"testing"
)

// TestVHostLimitsAPI: PUT/DELETE /api/vhost-limits/{vhost}/{name} set and
// clear a vhost's own limits, GET shows them, the definitions export
// carries them as RabbitMQ does (parameters of component vhost-limits), and
// a RabbitMQ export with such parameters imports.
func TestVHostLimitsAPI(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/api/vhosts/lv", nil)
	e.must(204, "PUT", "/api/vhost-limits/lv/max-connections", map[string]any{"value": 10})
	e.must(204, "PUT", "/api/vhost-limits/lv/max-queues", map[string]any{"value": 5})
	e.must(400, "PUT", "/api/vhost-limits/lv/max-bogus", map[string]any{"value": 5})
	e.must(400, "PUT", "/api/vhost-limits/lv/max-queues", map[string]any{"value": "x"})
	e.must(404, "PUT", "/api/vhost-limits/nope/max-queues", map[string]any{"value": 5})
	e.must(401, "PUT", "/api/vhost-limits/lv/max-queues", map[string]any{"value": 5}, "nobody", "x")
	got := e.must(200, "GET", "/api/vhost-limits/lv", nil).list(t)
	if len(got) != 1 {
		t.Fatalf("GET /api/vhost-limits/lv: %v", got)
	}
	v := got[0].(map[string]any)["value"].(map[string]any)
	if v["max-connections"] != 10.0 || v["max-queues"] != 5.0 {
		t.Fatalf("limits %v", v)
	}

	defs := e.must(200, "GET", "/api/definitions", nil).obj(t)
	params, _ := defs["parameters"].([]any)
	if len(params) != 1 {
		t.Fatalf("exported parameters %v", params)
	}
	p := params[0].(map[string]any)
	if p["component"] != "vhost-limits" || p["name"] != "limits" || p["vhost"] != "lv" {
		t.Fatalf("exported parameter %v", p)
	}

	e.must(204, "DELETE", "/api/vhost-limits/lv/max-connections", nil)
	e.must(204, "DELETE", "/api/vhost-limits/lv/max-queues", nil)
	if got := e.must(200, "GET", "/api/vhost-limits/lv", nil).list(t); len(got) != 0 {
		t.Fatalf("after clearing: %v", got)
	}

	// A RabbitMQ 3.10 export with a vhost limit (as rabbitmqctl
	// set_vhost_limits leaves it) imports into another node.
	f := newEnv(t)
	var rabbit map[string]any
	if err := json.Unmarshal([]byte(`{"rabbit_version":"3.10.8","vhosts":[{"name":"/"},{"name":"lv2"}],
		"parameters":[{"value":{"max-connections":10},"vhost":"/","component":"vhost-limits","name":"limits"},
		{"value":{"max-queues":3},"vhost":"lv2","component":"vhost-limits","name":"limits"}],
		"users":[],"permissions":[],"topic_permissions":[],"global_parameters":[],"policies":[],"queues":[],"exchanges":[],"bindings":[]}`), &rabbit); err != nil {
		t.Fatal(err)
	}
	f.must(204, "POST", "/api/definitions", rabbit)
	got = f.must(200, "GET", "/api/vhost-limits", nil).list(t)
	if len(got) != 2 {
		t.Fatalf("imported limits %v", got)
	}
	var unknown map[string]any
	_ = json.Unmarshal([]byte(`{"parameters":[{"value":{},"vhost":"/","component":"federation-upstream","name":"u"}]}`), &unknown)
	f.must(400, "POST", "/api/definitions", unknown)
}
