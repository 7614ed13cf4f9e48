package web

import (
	"reflect"
	"testing"
)

func TestPolicies(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/api/queues/%2F/jobs.a", map[string]any{"arguments": map[string]any{"x-max-length": 50}})
	e.must(201, "PUT", "/api/queues/%2F/other", map[string]any{})
	e.must(201, "PUT", "/api/exchanges/%2F/jobs-x", map[string]any{"type": "fanout"})

	e.must(201, "PUT", "/api/policies/%2F/jobs", map[string]any{
		"pattern": "^jobs", "apply-to": "all", "priority": 3,
		"definition": map[string]any{"max-length": 100, "message-ttl": 60000, "alternate-exchange": "ae"},
	})
	e.must(204, "PUT", "/api/policies/%2F/jobs", map[string]any{
		"pattern": "^jobs", "apply-to": "all", "priority": 3,
		"definition": map[string]any{"max-length": 100, "message-ttl": 60000, "alternate-exchange": "ae"},
	})
	e.must(201, "PUT", "/api/operator-policies/%2F/cap", map[string]any{
		"pattern": ".*", "apply-to": "queues", "definition": map[string]any{"message-ttl": 1000, "max-length-bytes": 4096},
	})
	got := e.must(200, "GET", "/api/policies/%2F/jobs", nil).obj(t)
	want := map[string]any{"vhost": "/", "name": "jobs", "pattern": "^jobs", "apply-to": "all", "priority": 3.0,
		"definition": map[string]any{"max-length": 100.0, "message-ttl": 60000.0, "alternate-exchange": "ae"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("policy = %v", got)
	}
	if l := e.must(200, "GET", "/api/policies", nil).list(t); len(l) != 1 {
		t.Errorf("policies = %v", l)
	}
	if l := e.must(200, "GET", "/api/policies/%2F", nil).list(t); len(l) != 1 {
		t.Errorf("policies of / = %v", l)
	}
	if l := e.must(200, "GET", "/api/operator-policies", nil).list(t); len(l) != 1 || l[0].(map[string]any)["name"] != "cap" {
		t.Errorf("operator policies = %v", l)
	}

	q := e.must(200, "GET", "/api/queues/%2F/jobs.a", nil).obj(t)
	if q["policy"] != "jobs" || q["operator_policy"] != "cap" {
		t.Errorf("jobs.a: policy %v, operator_policy %v", q["policy"], q["operator_policy"])
	}
	// The operator's lower TTL wins; its max-length-bytes adds to the policy's.
	wantEff := map[string]any{"max-length": 100.0, "message-ttl": 1000.0, "alternate-exchange": "ae", "max-length-bytes": 4096.0}
	if !reflect.DeepEqual(q["effective_policy_definition"], wantEff) {
		t.Errorf("jobs.a: effective_policy_definition = %v", q["effective_policy_definition"])
	}
	if q := e.must(200, "GET", "/api/queues/%2F/other", nil).obj(t); q["policy"] != nil || q["operator_policy"] != "cap" {
		t.Errorf("other: policy %v, operator_policy %v", q["policy"], q["operator_policy"])
	}
	if x := e.must(200, "GET", "/api/exchanges/%2F/jobs-x", nil).obj(t); x["policy"] != "jobs" {
		t.Errorf("jobs-x: policy = %v", x["policy"])
	}
	// Policies and operator policies are exported with definitions: only
	// the policies, as RabbitMQ does.
	if ps := e.must(200, "GET", "/api/definitions", nil).obj(t)["policies"].([]any); len(ps) != 1 {
		t.Errorf("exported policies = %v", ps)
	}

	// Refusals.
	e.must(400, "PUT", "/api/policies/%2F/bad", map[string]any{"pattern": "(", "definition": map[string]any{"max-length": 1}})
	// RabbitMQ 3.x's mirroring keys are accepted (TestPolicyRabbitMQ3Keys),
	// with their values checked; keys no RabbitMQ knows are refused.
	e.must(400, "PUT", "/api/policies/%2F/bad", map[string]any{"pattern": ".*", "definition": map[string]any{"ha-mode": "everywhere"}})
	e.must(400, "PUT", "/api/policies/%2F/bad", map[string]any{"pattern": ".*", "definition": map[string]any{"federation-upstream-set": "all"}})
	e.must(400, "PUT", "/api/policies/%2F/bad", map[string]any{"pattern": ".*", "definition": map[string]any{"max-length": -1}})
	e.must(400, "PUT", "/api/operator-policies/%2F/bad", map[string]any{"pattern": ".*", "definition": map[string]any{"alternate-exchange": "x"}})
	e.must(404, "PUT", "/api/policies/nope/p", map[string]any{"pattern": ".*", "definition": map[string]any{"max-length": 1}})
	e.must(404, "GET", "/api/policies/%2F/nope", nil)
	e.must(404, "DELETE", "/api/policies/%2F/nope", nil)

	// Who may: policymaker on its vhosts, administrator; management not.
	e.must(201, "PUT", "/api/users/pm", map[string]any{"password": "pw", "tags": "policymaker"})
	e.must(201, "PUT", "/api/users/mg", map[string]any{"password": "pw", "tags": "management"})
	e.must(201, "PUT", "/api/permissions/%2F/pm", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	e.must(200, "GET", "/api/policies/%2F", nil, "pm", "pw")
	e.must(201, "PUT", "/api/policies/%2F/pm-made", map[string]any{"pattern": "^pm", "definition": map[string]any{"expires": 60000}}, "pm", "pw")
	e.must(401, "GET", "/api/operator-policies/%2F", nil, "pm", "pw")
	e.must(401, "GET", "/api/policies", nil, "mg", "pw")

	// Deleting reverts.
	e.must(204, "DELETE", "/api/policies/%2F/jobs", nil)
	e.must(204, "DELETE", "/api/operator-policies/%2F/cap", nil)
	q = e.must(200, "GET", "/api/queues/%2F/jobs.a", nil).obj(t)
	if q["policy"] != nil || q["operator_policy"] != nil || len(q["effective_policy_definition"].(map[string]any)) != 0 {
		t.Errorf("after delete: %v %v %v", q["policy"], q["operator_policy"], q["effective_policy_definition"])
	}
}

func TestParametersAndLimits(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"/api/parameters", "/api/parameters/federation-upstream", "/api/parameters/federation-upstream/%2F"} {
		if l := e.must(200, "GET", p, nil).list(t); len(l) != 0 {
			t.Errorf("%s = %v", p, l)
		}
	}
	e.must(404, "GET", "/api/parameters/federation-upstream/nope", nil)
	e.must(404, "GET", "/api/parameters/federation-upstream/%2F/up", nil)
	e.must(404, "DELETE", "/api/parameters/federation-upstream/%2F/up", nil)
	r := e.must(400, "PUT", "/api/parameters/federation-upstream/%2F/up", map[string]any{"value": map[string]any{"uri": "amqp://x"}})
	if reason := r.obj(t)["reason"]; reason != "Validation failed\n\ncomponent federation-upstream not found\n" {
		t.Errorf("reason = %q", reason)
	}

	if l := e.must(200, "GET", "/api/global-parameters", nil).list(t); len(l) != 0 {
		t.Errorf("global parameters = %v", l)
	}
	e.must(201, "PUT", "/api/global-parameters/colour", map[string]any{"value": map[string]any{"hue": "blue"}})
	e.must(204, "PUT", "/api/global-parameters/colour", map[string]any{"value": "red"})
	if g := e.must(200, "GET", "/api/global-parameters/colour", nil).obj(t); g["value"] != "red" {
		t.Errorf("colour = %v", g)
	}
	if gs := e.must(200, "GET", "/api/definitions", nil).obj(t)["global_parameters"].([]any); len(gs) != 1 {
		t.Errorf("exported global parameters = %v", gs)
	}
	e.must(204, "DELETE", "/api/global-parameters/colour", nil)
	e.must(404, "GET", "/api/global-parameters/colour", nil)
	e.must(400, "POST", "/api/definitions", map[string]any{"parameters": []any{map[string]any{"component": "shovel", "vhost": "/", "name": "s", "value": map[string]any{}}}})

	if l := e.must(200, "GET", "/api/vhost-limits", nil).list(t); len(l) != 0 {
		t.Errorf("vhost limits = %v", l)
	}
	e.must(200, "GET", "/api/vhost-limits/%2F", nil)
	e.must(404, "GET", "/api/vhost-limits/nope", nil)
}
