package web

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// defsWithoutVersions drops the parts of an export that may differ
// between brokers.
func defsWithoutVersions(t *testing.T, r resp) map[string]any {
	t.Helper()
	d := r.obj(t)
	for _, k := range []string{"rabbit_version", "rabbitmq_version", "product_version", "product_name"} {
		delete(d, k)
	}
	return d
}

func TestDefinitionsRoundTrip(t *testing.T) {
	a := newEnv(t)
	a.must(201, "PUT", "/api/vhosts/shop", nil)
	a.must(201, "PUT", "/api/users/ops", map[string]any{"password": "pw", "tags": "monitoring"})
	a.must(201, "PUT", "/api/permissions/shop/ops", map[string]any{"configure": "^ops-", "write": ".*", "read": ".*"})
	a.must(201, "PUT", "/api/exchanges/shop/orders", map[string]any{"type": "topic", "durable": true, "arguments": map[string]any{"alternate-exchange": "unrouted"}})
	a.must(201, "PUT", "/api/exchanges/shop/unrouted", map[string]any{"type": "fanout", "durable": true})
	a.must(201, "PUT", "/api/queues/shop/paid", map[string]any{"durable": true, "arguments": map[string]any{"x-max-length": 1000}})
	a.must(201, "PUT", "/api/queues/%2F/plain", map[string]any{"durable": false, "auto_delete": true})
	a.must(201, "POST", "/api/bindings/shop/e/orders/q/paid", map[string]any{"routing_key": "order.paid", "arguments": map[string]any{"x": "y"}})
	a.must(201, "POST", "/api/bindings/shop/e/orders/e/unrouted", map[string]any{"routing_key": "#"})

	exported := a.must(200, "GET", "/api/definitions", nil)
	d := exported.obj(t)
	for _, k := range []string{"rabbit_version", "users", "vhosts", "permissions", "topic_permissions", "parameters", "global_parameters", "policies", "queues", "exchanges", "bindings"} {
		if _, ok := d[k]; !ok {
			t.Errorf("export lacks %s", k)
		}
	}
	if n := len(d["queues"].([]any)); n != 2 {
		t.Errorf("exported queues = %v", d["queues"])
	}
	if n := len(d["exchanges"].([]any)); n != 2 {
		t.Errorf("exported exchanges (no amq.*) = %v", d["exchanges"])
	}
	if n := len(d["bindings"].([]any)); n != 2 {
		t.Errorf("exported bindings (no default) = %v", d["bindings"])
	}

	b := newEnv(t)
	b.must(204, "POST", "/api/definitions", exported.body)
	// Importing twice is harmless.
	b.must(204, "POST", "/api/definitions", exported.body)
	again := b.must(200, "GET", "/api/definitions", nil)
	if want, got := defsWithoutVersions(t, exported), defsWithoutVersions(t, again); !reflect.DeepEqual(want, got) {
		t.Errorf("round trip differs:\nwant %s\ngot  %s", exported.body, again.body)
	}
	// The imported user logs in with the original password.
	b.must(200, "GET", "/api/nodes", nil, "ops", "pw")

	// Per-vhost export and import into another vhost, as a form upload.
	vd := a.must(200, "GET", "/api/definitions/shop", nil)
	if _, ok := vd.obj(t)["users"]; ok {
		t.Error("per-vhost export has users")
	}
	b.must(201, "PUT", "/api/vhosts/shop2", nil)
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormFile("file", "defs.json")
	_, _ = io.Copy(fw, bytes.NewReader(vd.body))
	_ = mw.Close()
	req, _ := http.NewRequest("POST", b.ts.URL+"/api/definitions/shop2", &form)
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", mw.FormDataContentType())
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 204 {
		t.Fatalf("form import: %d", res.StatusCode)
	}
	b.must(200, "GET", "/api/queues/shop2/paid", nil)
	if l := b.must(200, "GET", "/api/bindings/shop2/e/orders/q/paid", nil).list(t); len(l) != 1 {
		t.Errorf("imported bindings = %v", l)
	}

	b.must(400, "POST", "/api/definitions", []byte(`{"queues": [`))
	b.must(404, "GET", "/api/definitions/nope", nil)
	r := b.must(200, "GET", "/api/definitions?download=defs.json", nil)
	if !strings.Contains(r.header.Get("Content-Disposition"), "defs.json") {
		t.Errorf("Content-Disposition = %q", r.header.Get("Content-Disposition"))
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/api/queues/%2F/m", map[string]any{})
	for range 3 {
		e.must(200, "POST", "/api/exchanges/%2F/amq.default/publish", map[string]any{"routing_key": "m", "payload": "x", "payload_encoding": "string", "properties": map[string]any{}})
	}
	e.must(200, "POST", "/api/queues/%2F/m/get", map[string]any{"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"})
	h := e.srv.MetricsHandler()
	req, _ := http.NewRequest("GET", "/metrics", nil)
	rec := newRecorder()
	h.ServeHTTP(rec, req)
	body := rec.buf.String()
	for _, want := range []string{
		`rabbitmq_queue_messages{queue="m",vhost="/"} 2`,
		`rabbitmq_queue_messages_ready{queue="m",vhost="/"} 2`,
		`rabbitmq_queue_messages_unacked{queue="m",vhost="/"} 0`,
		`rabbitmq_queue_consumers{queue="m",vhost="/"} 0`,
		"rabbitmq_queues 1",
		"rabbitmq_connections 0",
		"rabbitmq_channels 0",
		"rabbitmq_global_messages_received_total 3",
		"rabbitmq_global_messages_delivered_total 1",
		"rabbitmq_global_messages_acknowledged_total 1",
		"go_goroutines",
	} {
		if !strings.Contains(body, want+"\n") && !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// recorder is a minimal http.ResponseWriter.
type recorder struct {
	h      http.Header
	buf    bytes.Buffer
	status int
}

func newRecorder() *recorder { return &recorder{h: http.Header{}} }

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(b []byte) (int, error) { return r.buf.Write(b) }
func (r *recorder) WriteHeader(s int)           { r.status = s }

// TestDefinitionsPluginArguments: queues with deduplication and message
// groups and delayed and deduplicating exchanges keep their arguments
// through an export and an import, and work on the importing broker.
func TestDefinitionsPluginArguments(t *testing.T) {
	a := newEnv(t)
	a.must(201, "PUT", "/api/queues/%2F/groups", map[string]any{"durable": true, "arguments": map[string]any{"x-message-group-header": "JMSXGroupID"}})
	a.must(201, "PUT", "/api/queues/%2F/once", map[string]any{"durable": true, "arguments": map[string]any{
		"x-message-deduplication": true, "x-cache-size": 1000, "x-cache-ttl": 60000, "x-cache-persistence": "disk"}})
	a.must(201, "PUT", "/api/exchanges/%2F/later", map[string]any{"type": "x-delayed-message", "durable": true, "arguments": map[string]any{"x-delayed-type": "direct"}})
	a.must(201, "PUT", "/api/exchanges/%2F/dedup", map[string]any{"type": "x-message-deduplication", "durable": true, "arguments": map[string]any{"x-cache-size": 10}})
	exported := a.must(200, "GET", "/api/definitions", nil)

	b := newEnv(t)
	b.must(204, "POST", "/api/definitions", exported.body)
	g := b.must(200, "GET", "/api/queues/%2F/groups", nil).obj(t)
	if g["message_groups"] != float64(0) || g["arguments"].(map[string]any)["x-message-group-header"] != "JMSXGroupID" {
		t.Errorf("imported groups queue: %v", g)
	}
	o := b.must(200, "GET", "/api/queues/%2F/once", nil).obj(t)
	if o["deduplication_cache_size"] != float64(0) || o["arguments"].(map[string]any)["x-cache-persistence"] != "disk" {
		t.Errorf("imported dedup queue: %v", o)
	}
	x := b.must(200, "GET", "/api/exchanges/%2F/later", nil).obj(t)
	if x["messages_delayed"] != float64(0) || x["type"] != "x-delayed-message" {
		t.Errorf("imported delayed exchange: %v", x)
	}
	x = b.must(200, "GET", "/api/exchanges/%2F/dedup", nil).obj(t)
	if x["deduplication_cache_size"] != float64(0) {
		t.Errorf("imported dedup exchange: %v", x)
	}
}
