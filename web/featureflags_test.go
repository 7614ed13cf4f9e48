package web

import (
	"testing"

	"github.com/warrenmq/warren/broker"
)

// TestFeatureFlagsAndVersion checks what tools read before relying on
// RabbitMQ's behaviour: the overview's rabbitmq_version (Warren's own in
// product_version), and the feature flags, all enabled (an application
// refuses a broker without stream_queue), administrators only.
func TestFeatureFlagsAndVersion(t *testing.T) {
	e := newEnv(t)
	o := e.must(200, "GET", "/api/overview", nil).obj(t)
	if o["rabbitmq_version"] != broker.RabbitMQVersion || o["product_version"] != broker.Version || o["product_name"] != "Warren" {
		t.Errorf("overview: rabbitmq_version %v, product %v %v", o["rabbitmq_version"], o["product_name"], o["product_version"])
	}
	flags := e.must(200, "GET", "/api/feature-flags", nil).list(t)
	seen := map[string]bool{}
	for _, f := range flags {
		m := f.(map[string]any)
		if m["state"] != "enabled" || m["stability"] != "stable" {
			t.Errorf("flag %v", m)
		}
		seen[m["name"].(string)] = true
	}
	for _, want := range []string{"quorum_queue", "stream_queue", "stream_filtering", "stream_single_active_consumer", "user_limits"} {
		if !seen[want] {
			t.Errorf("feature flag %s missing from %v", want, flags)
		}
	}
	e.must(204, "PUT", "/api/feature-flags/stream_queue/enable", nil)
	e.must(400, "PUT", "/api/feature-flags/no_such_flag/enable", nil)
	e.must(201, "PUT", "/api/users/mon", map[string]any{"password": "m", "tags": "monitoring"})
	e.must(401, "GET", "/api/feature-flags", nil, "mon", "m")
}
