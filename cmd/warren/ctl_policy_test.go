package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCtlPolicies(t *testing.T) {
	e := newCtlEnv(t)
	e.must("add_vhost", "shop")
	e.must("declare_queue", "--vhost", "shop", "jobs.mail")
	e.must("set_policy", "--vhost", "shop", "--priority", "2", "--apply-to", "queues", "limits", `^jobs\.`, `{"max-length": 10, "overflow": "reject-publish"}`)
	e.must("set_operator_policy", "--vhost", "shop", "cap", ".*", `{"message-ttl": 5000}`)

	out := e.must("list_policies")
	if !strings.Contains(out, "limits") || !strings.Contains(out, `{"max-length":10,"overflow":"reject-publish"}`) {
		t.Errorf("list_policies:\n%s", out)
	}
	var ps []map[string]any
	if err := json.Unmarshal([]byte(e.must("list_operator_policies", "--vhost", "shop", "--json")), &ps); err != nil || len(ps) != 1 || ps[0]["apply-to"] != "queues" {
		t.Errorf("list_operator_policies: %v %v", err, ps)
	}
	var qs []map[string]any
	if err := json.Unmarshal([]byte(e.must("list_queues", "--vhost", "shop", "--json")), &qs); err != nil || len(qs) != 1 ||
		qs[0]["policy"] != "limits" || qs[0]["operator_policy"] != "cap" {
		t.Errorf("queue after set_policy: %v %v", err, qs)
	}

	if _, err := e.run("", "set_policy", "--vhost", "shop", "bad", ".*", `{"max-length": -1}`); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("invalid policy: %v", err)
	}
	if _, err := e.run("", "set_policy", "bad", ".*", `not json`); err == nil || !strings.Contains(err.Error(), "JSON") {
		t.Errorf("definition not JSON: %v", err)
	}

	e.must("clear_policy", "--vhost", "shop", "limits")
	e.must("clear_operator_policy", "--vhost", "shop", "cap")
	if out := e.must("list_policies"); strings.Contains(out, "limits") {
		t.Errorf("after clear_policy:\n%s", out)
	}
	if _, err := e.run("", "clear_policy", "--vhost", "shop", "limits"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("clearing a missing policy: %v", err)
	}
}
