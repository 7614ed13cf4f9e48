package web

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"sort"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestRabbitMQDefinitions imports definitions exported by a real RabbitMQ
// (testdata/README.md says how they were made): the users log in with their
// original passwords over AMQP and HTTP, so RabbitMQ's password_hash and
// hashing_algorithm (SHA-256 and SHA-512) are honoured; every object
// arrives as RabbitMQ exported it; and Warren's export imports back into a
// fresh broker with equal definitions.
func TestRabbitMQDefinitions(t *testing.T) {
	fixture, err := os.ReadFile("testdata/rabbitmq-definitions.json")
	if err != nil {
		t.Fatal(err)
	}
	var rmq map[string]any
	if err := json.Unmarshal(fixture, &rmq); err != nil {
		t.Fatal(err)
	}
	a := newEnv(t)
	a.must(204, "POST", "/api/definitions", fixture)

	// Logins with the passwords the users were created with on RabbitMQ.
	for _, u := range []struct{ name, pass, vhost, path string }{
		{"alice", "alice-pass", "shop", "/api/whoami"},      // management, SHA-256
		{"bob", "bob-pass", "dev/test", "/api/users"},       // administrator, SHA-256
		{"carol", "carol-pass", "/", "/api/nodes"},          // monitoring, SHA-512
		{"guest", "guest", "shop", "/api/definitions/shop"}, // guest's hash replaced by RabbitMQ's
	} {
		a.must(200, "GET", u.path, nil, u.name, u.pass)
		a.must(401, "GET", "/api/whoami", nil, u.name, u.pass+"x")
		amqpURL := fmt.Sprintf("amqp://%s:%s@%s/%s", url.PathEscape(u.name), url.PathEscape(u.pass), a.bs.Addr, url.PathEscape(u.vhost))
		conn, err := amqp091.Dial(amqpURL)
		if err != nil {
			t.Errorf("%s: AMQP login to %q: %v", u.name, u.vhost, err)
			continue
		}
		conn.Close()
		bad := fmt.Sprintf("amqp://%s:wrong@%s/%s", url.PathEscape(u.name), a.bs.Addr, url.PathEscape(u.vhost))
		if conn, err := amqp091.Dial(bad); err == nil {
			conn.Close()
			t.Errorf("%s: AMQP login with a wrong password succeeded", u.name)
		}
	}

	// Every object is there as RabbitMQ exported it.
	exported := a.must(200, "GET", "/api/definitions", nil)
	ours := exported.obj(t)
	keep := func(m map[string]any, keys ...string) map[string]any {
		out := map[string]any{}
		for _, k := range keys {
			if v, ok := m[k]; ok {
				out[k] = v
			}
		}
		return out
	}
	same := func(section string, keys ...string) {
		t.Helper()
		norm := func(v any) []string {
			var out []string
			for _, e := range v.([]any) {
				b, _ := json.Marshal(keep(e.(map[string]any), keys...))
				out = append(out, string(b))
			}
			sort.Strings(out)
			return out
		}
		if want, got := norm(rmq[section]), norm(ours[section]); !reflect.DeepEqual(want, got) {
			t.Errorf("%s differ:\nRabbitMQ %v\nWarren   %v", section, want, got)
		}
	}
	same("users", "name", "password_hash", "hashing_algorithm", "tags")
	same("vhosts", "name")
	same("permissions", "user", "vhost", "configure", "write", "read")
	same("topic_permissions", "user", "vhost", "exchange", "write", "read")
	same("policies", "vhost", "name", "pattern", "apply-to", "definition", "priority")
	same("queues", "vhost", "name", "durable", "auto_delete", "arguments", "type")
	same("exchanges", "vhost", "name", "type", "durable", "auto_delete", "arguments") // RabbitMQ 3.10 writes no "internal"
	same("bindings", "vhost", "source", "destination", "destination_type", "routing_key", "arguments")
	same("global_parameters", "name", "value")

	// The policies apply.
	q := a.must(200, "GET", "/api/queues/shop/paid", nil).obj(t)
	if q["policy"] != "limits" {
		t.Errorf("paid: policy = %v", q["policy"])
	}
	if want := map[string]any{"max-length": 1000.0, "overflow": "reject-publish", "message-ttl": 3600000.0}; !reflect.DeepEqual(q["effective_policy_definition"], want) {
		t.Errorf("paid: effective_policy_definition = %v", q["effective_policy_definition"])
	}
	if x := a.must(200, "GET", "/api/exchanges/shop/orders", nil).obj(t); x["policy"] != "ae" {
		t.Errorf("orders: policy = %v", x["policy"])
	}

	// Warren's export imports into a fresh broker with equal definitions.
	b := newEnv(t)
	b.must(204, "POST", "/api/definitions", exported.body)
	again := b.must(200, "GET", "/api/definitions", nil)
	if want, got := defsWithoutVersions(t, exported), defsWithoutVersions(t, again); !reflect.DeepEqual(want, got) {
		t.Errorf("re-import differs:\nwant %s\ngot  %s", exported.body, again.body)
	}
	b.must(200, "GET", "/api/whoami", nil, "alice", "alice-pass")
}
