package web

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// jsonEqual compares a response body with want, as JSON values.
func jsonEqual(t *testing.T, r resp, want string) {
	t.Helper()
	var got, w any
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatalf("%v: %s", err, r.body)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, w) {
		t.Fatalf("got %s, want %s", r.body, want)
	}
}

// TestUserLimitsAPI checks /api/user-limits against what RabbitMQ 3.10.8
// answers (statuses, shapes and reasons recorded from a real node).
func TestUserLimitsAPI(t *testing.T) {
	e := newEnv(t)
	jsonEqual(t, e.must(200, "GET", "/api/user-limits", nil), `[]`)
	jsonEqual(t, e.must(200, "GET", "/api/user-limits/guest", nil), `[]`)
	e.must(404, "GET", "/api/user-limits/nobody", nil)

	e.must(204, "PUT", "/api/user-limits/guest/max-connections", map[string]any{"value": 10})
	e.must(204, "PUT", "/api/user-limits/guest/max-channels", map[string]any{"value": -1})
	e.must(204, "PUT", "/api/user-limits/guest/max-channels", map[string]any{"value": 0})
	jsonEqual(t, e.must(200, "GET", "/api/user-limits", nil), `[{"user":"guest","value":{"max-channels":0,"max-connections":10}}]`)
	jsonEqual(t, e.must(200, "GET", "/api/user-limits/guest", nil), `[{"user":"guest","value":{"max-channels":0,"max-connections":10}}]`)
	if l := e.must(200, "GET", "/api/users/guest", nil).obj(t)["limits"]; !reflect.DeepEqual(l, map[string]any{"max-channels": 0.0, "max-connections": 10.0}) {
		t.Errorf("user's limits = %v", l)
	}

	for _, tc := range []struct {
		path string
		body any
		want string
	}{
		{"/api/user-limits/guest/max-channels", map[string]any{"value": "x"}, `{"error":"bad_request","reason":"max-channels should be a number, actually was <<\"x\">>"}`},
		{"/api/user-limits/guest/max-channels", map[string]any{"value": 1.5}, `{"error":"bad_request","reason":"max-channels should be a number, actually was 1.5"}`},
		{"/api/user-limits/guest/max-channels", map[string]any{}, `{"error":"bad_request","reason":"[{key_missing,value}]"}`},
		{"/api/user-limits/guest/max-channels", []byte("junk"), `{"error":"bad_request","reason":"not_json"}`},
		{"/api/user-limits/guest/foo", map[string]any{"value": 3}, `{"error":"bad_request","reason":"Unrecognised terms [{<<\"foo\">>,3}] in user-limits"}`},
		{"/api/user-limits/nobody/max-channels", map[string]any{"value": 3}, `{"error":"bad_request","reason":["no_such_user","nobody"]}`},
	} {
		jsonEqual(t, e.must(400, "PUT", tc.path, tc.body), tc.want)
	}

	// Reading takes any management user; changing, an administrator.
	if err := e.bs.PutUser("mon", "pw", []string{"monitoring"}); err != nil {
		t.Fatal(err)
	}
	e.must(200, "GET", "/api/user-limits", nil, "mon", "pw")
	e.must(401, "PUT", "/api/user-limits/mon/max-channels", map[string]any{"value": 1}, "mon", "pw")
	e.must(405, "GET", "/api/user-limits/guest/max-channels", nil)

	// The limits set through the API hold on the wire.
	if _, err := amqp091.Dial(e.bs.URL); err != nil {
		t.Fatal(err)
	}
	c, err := amqp091.Dial(e.bs.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Channel(); err == nil {
		t.Fatal("a channel opened with max-channels 0")
	}

	e.must(204, "DELETE", "/api/user-limits/guest/max-channels", nil)
	e.must(204, "DELETE", "/api/user-limits/guest/max-channels", nil)
	e.must(204, "DELETE", "/api/user-limits/guest/foo", nil)
	jsonEqual(t, e.must(200, "GET", "/api/user-limits/guest", nil), `[{"user":"guest","value":{"max-connections":10}}]`)
	e.must(204, "DELETE", "/api/user-limits/guest/max-connections", nil)
	jsonEqual(t, e.must(200, "GET", "/api/user-limits", nil), `[]`)
	if l := e.must(200, "GET", "/api/users/guest", nil).obj(t)["limits"]; !reflect.DeepEqual(l, map[string]any{}) {
		t.Errorf("user's limits after clearing = %v", l)
	}
}

// TestUserLimitsDefinitions: a user's limits go out in the definitions
// export ("limits" of each user, as RabbitMQ 3.10 exports them) and come
// back in with an import.
func TestUserLimitsDefinitions(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/api/users/lim", map[string]any{"password": "pw", "tags": ""})
	e.must(204, "PUT", "/api/user-limits/lim/max-connections", map[string]any{"value": 2})
	e.must(204, "PUT", "/api/user-limits/lim/max-channels", map[string]any{"value": 3})
	defs := e.must(200, "GET", "/api/definitions", nil).obj(t)
	found := false
	for _, u := range defs["users"].([]any) {
		u := u.(map[string]any)
		switch u["name"] {
		case "lim":
			found = true
			if !reflect.DeepEqual(u["limits"], map[string]any{"max-connections": 2.0, "max-channels": 3.0}) {
				t.Errorf("exported limits of lim: %v", u["limits"])
			}
		case "guest":
			if !reflect.DeepEqual(u["limits"], map[string]any{}) {
				t.Errorf("exported limits of guest: %v", u["limits"])
			}
		}
	}
	if !found {
		t.Fatalf("lim not exported: %v", defs["users"])
	}

	e2 := newEnv(t)
	e2.must(204, "POST", "/api/definitions", defs)
	jsonEqual(t, e2.must(200, "GET", "/api/user-limits", nil), `[{"user":"lim","value":{"max-channels":3,"max-connections":2}}]`)
	// A RabbitMQ 3.10 file, limits as it writes them.
	e3 := newEnv(t)
	e3.must(204, "POST", "/api/definitions", []byte(`{"users":[{"name":"lim","password_hash":"YbNt5vXV7tjrbSokhZCeF8eqViMiqeyE9N3cW5bh3VBRLlvO",
		"hashing_algorithm":"rabbit_password_hashing_sha256","tags":[],"limits":{"max-channels":3,"max-connections":2}}]}`))
	jsonEqual(t, e3.must(200, "GET", "/api/user-limits/lim", nil), `[{"user":"lim","value":{"max-channels":3,"max-connections":2}}]`)
	e3.must(400, "POST", "/api/definitions", []byte(`{"users":[{"name":"x","password":"p","limits":{"max-channels":"many"}}]}`))
}

// TestReadyToServeClients: ready-to-serve-clients, is-in-service and
// below-node-connection-limit answer as RabbitMQ (4.1, which added them)
// does: 200 {"status":"ok"}, or 503 with the reason once the node has
// reached its connection limit.
func TestReadyToServeClients(t *testing.T) {
	bs := brokertest.Start(t, &broker.Config{MaxConnections: 1})
	srv, err := New(Config{Logger: zaptest.NewLogger(t), SampleInterval: time.Hour}, bs.Broker)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, bs, srv)
	for _, p := range []string{"ready-to-serve-clients", "is-in-service", "below-node-connection-limit"} {
		jsonEqual(t, e.must(200, "GET", "/api/health/checks/"+p, nil), `{"status":"ok"}`)
	}
	c, err := amqp091.Dial(bs.URL)
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, e.must(503, "GET", "/api/health/checks/ready-to-serve-clients", nil),
		`{"status":"failed","reason":"node connection limit is reached","connections":1}`)
	jsonEqual(t, e.must(503, "GET", "/api/health/checks/below-node-connection-limit", nil),
		`{"status":"failed","reason":"node connection limit is reached"}`)
	jsonEqual(t, e.must(200, "GET", "/api/health/checks/is-in-service", nil), `{"status":"ok"}`)
	_ = c.Close()
	waitFor(t, "ready again", func() bool { return e.do("GET", "/api/health/checks/ready-to-serve-clients", nil).status == 200 })

	if err := bs.Close(); err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, e.must(503, "GET", "/api/health/checks/ready-to-serve-clients", nil),
		`{"status":"failed","reason":"the rabbit node is not currently available to serve"}`)
	jsonEqual(t, e.must(503, "GET", "/api/health/checks/is-in-service", nil),
		`{"status":"failed","reason":"the rabbit node is not currently available to serve"}`)
}
