package main

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
)

// TestCtlUserLimits runs set_user_limits, list_user_limits and
// clear_user_limits as rabbitmqctl's.
func TestCtlUserLimits(t *testing.T) {
	e := newCtlEnv(t)
	e.must("add_user", "lim", "pw")
	e.must("set_user_limits", "lim", `{"max-connections": 10, "max-channels": 20}`)
	e.must("set_user_limits", "lim", `{"max-channels": -1}`)
	if out := e.must("list_user_limits", "lim"); out != `{"max-channels":-1,"max-connections":10}`+"\n" {
		t.Errorf("list_user_limits --user lim: %q", out)
	}
	if out := e.must("list_user_limits", "guest"); out != "{}\n" {
		t.Errorf("list_user_limits --user guest: %q", out)
	}
	out := e.must("list_user_limits")
	if !strings.HasPrefix(out, "user") || !strings.Contains(out, `lim   {"max-channels":-1,"max-connections":10}`) || strings.Contains(out, "guest") {
		t.Errorf("list_user_limits:\n%s", out)
	}
	var ls []map[string]any
	if err := json.Unmarshal([]byte(e.must("list_user_limits", "--formatter", "json")), &ls); err != nil || len(ls) != 1 || ls[0]["user"] != "lim" {
		t.Errorf("list_user_limits --formatter json: %v %v", err, ls)
	}
	if got, _ := e.bs.UserLimits("lim"); !maps.Equal(got, map[string]int64{"max-connections": 10, "max-channels": -1}) {
		t.Errorf("limits on the broker: %v", got)
	}

	if _, err := e.run("", "set_user_limits", "lim", `{"max-queues": 1}`); err == nil || !strings.Contains(err.Error(), "Unrecognised terms") {
		t.Errorf("unknown limit: %v", err)
	}
	if _, err := e.run("", "set_user_limits", "lim", `{"max-channels": }`); err == nil || !strings.Contains(err.Error(), "line 1, column") {
		t.Errorf("bad JSON: %v", err)
	}
	if _, err := e.run("", "set_user_limits", "nobody", `{"max-channels": 1}`); err == nil || !strings.Contains(err.Error(), "no_such_user") {
		t.Errorf("missing user: %v", err)
	}

	e.must("clear_user_limits", "lim", "max-channels")
	if out := e.must("list_user_limits", "lim"); out != `{"max-connections":10}`+"\n" {
		t.Errorf("after clearing max-channels: %q", out)
	}
	e.must("set_user_limits", "lim", `{"max-channels": 3}`)
	e.must("clear_user_limits", "lim", "all")
	if got, _ := e.bs.UserLimits("lim"); got != nil {
		t.Errorf("limits after clear_user_limits all: %v", got)
	}
	if _, err := e.run("", "clear_user_limits", "nobody", "all"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("clearing a missing user's limits: %v", err)
	}
}

// TestCtlVHostLimits runs set_vhost_limits, list_vhost_limits and
// clear_vhost_limits as rabbitmqctl's.
func TestCtlVHostLimits(t *testing.T) {
	e := newCtlEnv(t)
	e.must("add_vhost", "lv")
	e.must("set_vhost_limits", "-p", "lv", `{"max-connections": 10, "max-queues": 20}`)
	e.must("set_vhost_limits", "-p", "lv", `{"max-queues": -1}`)
	if out := e.must("list_vhost_limits", "-p", "lv"); out != `{"max-connections":10,"max-queues":-1}`+"\n" {
		t.Errorf("list_vhost_limits -p lv: %q", out)
	}
	if got, _ := e.bs.VHostLimitsOf("lv"); !maps.Equal(got, map[string]int64{"max-connections": 10, "max-queues": -1}) {
		t.Errorf("limits on the broker: %v", got)
	}
	if out := e.must("list_vhost_limits", "--global"); !strings.Contains(out, `lv     {"max-connections":10,"max-queues":-1}`) {
		t.Errorf("list_vhost_limits --global:\n%s", out)
	}
	if _, err := e.run("", "set_vhost_limits", "-p", "lv", `{"max-channels": 1}`); err == nil || !strings.Contains(err.Error(), "unrecognised terms") {
		t.Errorf("unknown limit: %v", err)
	}
	e.must("clear_vhost_limits", "-p", "lv")
	if got, _ := e.bs.VHostLimitsOf("lv"); got != nil {
		t.Errorf("limits after clear_vhost_limits: %v", got)
	}
}
