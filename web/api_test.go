package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

func TestAuth(t *testing.T) {
	e := newEnv(t)
	r := e.must(401, "GET", "/api/overview", nil, "", "")
	if r.header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	if got := r.obj(t)["error"]; got != "not_authorised" {
		t.Errorf("error = %v", got)
	}
	e.must(401, "GET", "/api/overview", nil, "guest", "wrong")
	// A user without tags may not use the API; a management user may,
	// but not the administrator's endpoints.
	e.must(201, "PUT", "/api/users/plain", map[string]any{"password": "p", "tags": ""})
	e.must(401, "GET", "/api/overview", nil, "plain", "p")
	e.must(201, "PUT", "/api/users/mgr", map[string]any{"password": "m", "tags": "management"})
	e.must(200, "GET", "/api/overview", nil, "mgr", "m")
	e.must(401, "GET", "/api/users", nil, "mgr", "m")
	e.must(401, "GET", "/api/nodes", nil, "mgr", "m")
	// Without permissions on / the management user sees no queues there.
	e.must(401, "GET", "/api/queues/%2F", nil, "mgr", "m")
	who := e.must(200, "GET", "/api/whoami", nil, "mgr", "m").obj(t)
	if who["name"] != "mgr" {
		t.Errorf("whoami = %v", who)
	}
	e.must(404, "GET", "/api/nonsense", nil)
}

func TestOverviewAndNodes(t *testing.T) {
	e := newEnv(t)
	o := e.must(200, "GET", "/api/overview", nil).obj(t)
	for _, k := range []string{"management_version", "rabbitmq_version", "cluster_name", "node", "message_stats", "queue_totals", "object_totals", "listeners"} {
		if _, ok := o[k]; !ok {
			t.Errorf("overview lacks %s", k)
		}
	}
	ot := o["object_totals"].(map[string]any)
	if num(t, ot["exchanges"]) != 6 { // the default exchange and five amq.*
		t.Errorf("object_totals = %v", ot)
	}
	cn := e.must(200, "GET", "/api/cluster-name", nil).obj(t)
	if !strings.HasPrefix(cn["name"].(string), "warren@") {
		t.Errorf("cluster-name = %v", cn)
	}
	nodes := e.must(200, "GET", "/api/nodes", nil).list(t)
	if len(nodes) != 1 || nodes[0].(map[string]any)["running"] != true {
		t.Errorf("nodes = %v", nodes)
	}
	name := nodes[0].(map[string]any)["name"].(string)
	e.must(200, "GET", "/api/nodes/"+esc(name), nil)
	e.must(404, "GET", "/api/nodes/other@host", nil)
	who := e.must(200, "GET", "/api/whoami", nil).obj(t)
	if who["name"] != "guest" || who["tags"].([]any)[0] != "administrator" {
		t.Errorf("whoami = %v", who)
	}
}

func TestQueues(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/api/queues/%2F/q1", map[string]any{"durable": true, "arguments": map[string]any{"x-max-length": 10}})
	e.must(204, "PUT", "/api/queues/%2F/q1", map[string]any{"durable": true, "arguments": map[string]any{"x-max-length": 10}})
	r := e.must(400, "PUT", "/api/queues/%2F/q1", map[string]any{"durable": false})
	if !strings.Contains(r.obj(t)["reason"].(string), "inequivalent arg 'durable'") {
		t.Errorf("reason = %s", r.body)
	}
	e.must(201, "PUT", "/api/queues/%2F/q2", map[string]any{"durable": false, "auto_delete": false})
	e.must(404, "PUT", "/api/queues/nope/q", map[string]any{})

	routed := e.must(200, "POST", "/api/exchanges/%2F/amq.default/publish", map[string]any{
		"routing_key": "q1", "payload": "hello", "payload_encoding": "string",
		"properties": map[string]any{"delivery_mode": 2, "content_type": "text/plain", "headers": map[string]any{"h": "v"}},
	}).obj(t)
	if routed["routed"] != true {
		t.Fatalf("publish = %v", routed)
	}
	routed = e.must(200, "POST", "/api/exchanges/%2F/amq.default/publish", map[string]any{
		"routing_key": "nowhere", "payload": "x", "payload_encoding": "string", "properties": map[string]any{},
	}).obj(t)
	if routed["routed"] != false {
		t.Fatalf("publish to nowhere = %v", routed)
	}

	q := e.must(200, "GET", "/api/queues/%2F/q1", nil).obj(t)
	for k, want := range map[string]any{
		"name": "q1", "vhost": "/", "durable": true, "auto_delete": false, "exclusive": false,
		"messages": 1.0, "messages_ready": 1.0, "messages_unacknowledged": 0.0, "message_bytes": 5.0,
		"consumers": 0.0, "state": "running", "type": "classic",
	} {
		if q[k] != want {
			t.Errorf("queue %s = %#v, want %#v", k, q[k], want)
		}
	}
	if q["arguments"].(map[string]any)["x-max-length"] != 10.0 {
		t.Errorf("arguments = %v", q["arguments"])
	}
	ms := q["message_stats"].(map[string]any)
	if ms["publish"] != 1.0 || ms["publish_details"].(map[string]any)["rate"] == nil {
		t.Errorf("message_stats = %v", ms)
	}
	if _, ok := q["effective_policy_definition"]; !ok {
		t.Error("no effective_policy_definition")
	}

	got := e.must(200, "POST", "/api/queues/%2F/q1/get", map[string]any{"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": 50000}).list(t)
	if len(got) != 1 {
		t.Fatalf("get = %v", got)
	}
	m := got[0].(map[string]any)
	if m["payload"] != "hello" || m["payload_encoding"] != "string" || m["payload_bytes"] != 5.0 || m["routing_key"] != "q1" || m["message_count"] != 0.0 {
		t.Errorf("message = %v", m)
	}
	props := m["properties"].(map[string]any)
	if props["delivery_mode"] != 2.0 || props["content_type"] != "text/plain" || props["headers"].(map[string]any)["h"] != "v" {
		t.Errorf("properties = %v", props)
	}
	// Requeued: it is there again, redelivered.
	got = e.must(200, "POST", "/api/queues/%2F/q1/get", map[string]any{"count": 1, "ackmode": "ack_requeue_false", "encoding": "base64"}).list(t)
	if len(got) != 1 || got[0].(map[string]any)["redelivered"] != true || got[0].(map[string]any)["payload"] != "aGVsbG8=" {
		t.Fatalf("second get = %v", got)
	}
	q = e.must(200, "GET", "/api/queues/%2F/q1", nil).obj(t)
	if q["messages"] != 0.0 {
		t.Errorf("messages after get = %v", q["messages"])
	}
	e.must(400, "POST", "/api/queues/%2F/q1/get", map[string]any{"count": 1, "ackmode": "bogus"})

	// Purge and delete with conditions.
	for range 3 {
		e.must(200, "POST", "/api/exchanges/%2F/amq.default/publish", map[string]any{"routing_key": "q2", "payload": "m", "payload_encoding": "string", "properties": map[string]any{}})
	}
	e.must(400, "DELETE", "/api/queues/%2F/q2?if-empty=true", nil)
	e.must(204, "DELETE", "/api/queues/%2F/q2/contents", nil)
	if q := e.must(200, "GET", "/api/queues/%2F/q2", nil).obj(t); q["messages"] != 0.0 {
		t.Errorf("after purge messages = %v", q["messages"])
	}
	e.must(204, "DELETE", "/api/queues/%2F/q2?if-empty=true", nil)
	e.must(404, "GET", "/api/queues/%2F/q2", nil)
	e.must(404, "DELETE", "/api/queues/%2F/q2", nil)

	// Lists: plain, per vhost, paged, filtered, sorted, columns.
	for _, n := range []string{"a-1", "a-2", "b-1"} {
		e.must(201, "PUT", "/api/queues/%2F/"+n, map[string]any{})
	}
	if l := e.must(200, "GET", "/api/queues", nil).list(t); len(l) != 4 {
		t.Errorf("queues = %d", len(l))
	}
	e.must(200, "GET", "/api/queues/%2F", nil)
	e.must(404, "GET", "/api/queues/nope", nil)
	pg := e.must(200, "GET", "/api/queues/%2F?page=1&page_size=2&name=a-&sort=name&sort_reverse=true&columns=name,message_stats.publish", nil).obj(t)
	if pg["filtered_count"] != 2.0 || pg["total_count"] != 4.0 || pg["item_count"] != 2.0 || pg["page"] != 1.0 || pg["page_count"] != 1.0 || pg["page_size"] != 2.0 {
		t.Errorf("page = %v", pg)
	}
	items := pg["items"].([]any)
	first := items[0].(map[string]any)
	if first["name"] != "a-2" || len(first) != 2 || first["message_stats"].(map[string]any)["publish"] != 0.0 {
		t.Errorf("first item = %v", first)
	}
	pg = e.must(200, "GET", "/api/queues?page=2&page_size=1&name=^a&use_regex=true", nil).obj(t)
	if pg["item_count"] != 1.0 || pg["page_count"] != 2.0 || pg["items"].([]any)[0].(map[string]any)["name"] != "a-2" {
		t.Errorf("regex page = %v", pg)
	}
	e.must(400, "GET", "/api/queues?page=1&page_size=501", nil)
	e.must(400, "GET", "/api/queues?page=9", nil)
}

func TestExchangesAndBindings(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/api/exchanges/%2F/x1", map[string]any{"type": "topic", "durable": true})
	e.must(204, "PUT", "/api/exchanges/%2F/x1", map[string]any{"type": "topic", "durable": true})
	e.must(400, "PUT", "/api/exchanges/%2F/x1", map[string]any{"type": "fanout", "durable": true})
	e.must(400, "PUT", "/api/exchanges/%2F/x2", map[string]any{"type": "nonsense"})
	e.must(201, "PUT", "/api/exchanges/%2F/x2", map[string]any{"type": "fanout", "auto_delete": false, "internal": false})
	x := e.must(200, "GET", "/api/exchanges/%2F/x1", nil).obj(t)
	if x["name"] != "x1" || x["type"] != "topic" || x["durable"] != true || x["vhost"] != "/" {
		t.Errorf("exchange = %v", x)
	}
	if d := e.must(200, "GET", "/api/exchanges/%2F/amq.default", nil).obj(t); d["name"] != "" || d["type"] != "direct" {
		t.Errorf("default exchange = %v", d)
	}
	if l := e.must(200, "GET", "/api/exchanges/%2F", nil).list(t); len(l) != 8 {
		t.Errorf("exchanges = %d", len(l))
	}
	e.must(201, "PUT", "/api/queues/%2F/q", map[string]any{})

	// Queue binding: POST returns Location with the properties key.
	r := e.must(201, "POST", "/api/bindings/%2F/e/x1/q/q", map[string]any{"routing_key": "a.*", "arguments": map[string]any{}})
	if loc, _ := url.PathUnescape(r.header.Get("Location")); loc != "a.*" {
		t.Errorf("Location = %q", loc)
	}
	// Exchange-to-exchange binding.
	e.must(201, "POST", "/api/bindings/%2F/e/x2/e/x1", map[string]any{"routing_key": ""})
	e.must(404, "POST", "/api/bindings/%2F/e/x1/q/missing", map[string]any{"routing_key": ""})

	bs := e.must(200, "GET", "/api/bindings/%2F/e/x1/q/q", nil).list(t)
	if len(bs) != 1 {
		t.Fatalf("bindings = %v", bs)
	}
	b := bs[0].(map[string]any)
	if b["source"] != "x1" || b["destination"] != "q" || b["destination_type"] != "queue" || b["routing_key"] != "a.*" || b["properties_key"] != "a.*" {
		t.Errorf("binding = %v", b)
	}
	e.must(200, "GET", "/api/bindings/%2F/e/x1/q/q/a.*", nil)
	e.must(404, "GET", "/api/bindings/%2F/e/x1/q/q/other", nil)
	if l := e.must(200, "GET", "/api/bindings/%2F/e/x2/e/x1", nil).list(t); len(l) != 1 || l[0].(map[string]any)["properties_key"] != "~" {
		t.Errorf("e2e bindings = %v", l)
	}
	all := e.must(200, "GET", "/api/bindings", nil).list(t)
	if len(all) != 3 { // default binding of q, x1→q, x2→x1
		t.Errorf("all bindings = %v", all)
	}
	e.must(200, "GET", "/api/bindings/%2F", nil)
	if l := e.must(200, "GET", "/api/queues/%2F/q/bindings", nil).list(t); len(l) != 2 {
		t.Errorf("queue bindings = %v", l)
	}
	if l := e.must(200, "GET", "/api/exchanges/%2F/x1/bindings/source", nil).list(t); len(l) != 1 {
		t.Errorf("source bindings = %v", l)
	}
	if l := e.must(200, "GET", "/api/exchanges/%2F/x1/bindings/destination", nil).list(t); len(l) != 1 {
		t.Errorf("destination bindings = %v", l)
	}

	// Publishing through x2 → x1 → q routes.
	pub := func(x, key string) bool {
		return e.must(200, "POST", "/api/exchanges/%2F/"+x+"/publish", map[string]any{
			"routing_key": key, "payload": "p", "payload_encoding": "string", "properties": map[string]any{},
		}).obj(t)["routed"] == true
	}
	if !pub("x1", "a.b") || pub("x1", "b.b") || !pub("x2", "a.c") {
		t.Error("routing through the API went wrong")
	}
	e.must(404, "POST", "/api/exchanges/%2F/missing/publish", map[string]any{"routing_key": "", "payload": "", "payload_encoding": "string", "properties": map[string]any{}})

	e.must(400, "DELETE", "/api/exchanges/%2F/x1?if-unused=true", nil)
	e.must(204, "DELETE", "/api/bindings/%2F/e/x1/q/q/a.*", nil)
	e.must(404, "GET", "/api/bindings/%2F/e/x1/q/q/a.*", nil)
	e.must(204, "DELETE", "/api/exchanges/%2F/x2", nil)
	e.must(204, "DELETE", "/api/exchanges/%2F/x1?if-unused=true", nil)
	e.must(404, "GET", "/api/exchanges/%2F/x1", nil)
	e.must(404, "DELETE", "/api/exchanges/%2F/x1", nil)
	e.must(401, "DELETE", "/api/exchanges/%2F/amq.direct", nil)
}

func TestConnectionsChannelsConsumers(t *testing.T) {
	e := newEnv(t)
	cfg := amqp091.Config{Properties: amqp091.Table{"connection_name": "test-client"}}
	conn, err := amqp091.DialConfig(e.bs.URL, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("work", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(3, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume(q.Name, "ctag-1", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))

	conns := e.must(200, "GET", "/api/connections", nil).list(t)
	if len(conns) != 1 {
		t.Fatalf("connections = %v", conns)
	}
	c := conns[0].(map[string]any)
	if c["user"] != "guest" || c["vhost"] != "/" || c["state"] != "running" || c["user_provided_name"] != "test-client" || c["channels"] != 1.0 || c["protocol"] != "AMQP 0-9-1" {
		t.Errorf("connection = %v", c)
	}
	if c["client_properties"].(map[string]any)["connection_name"] != "test-client" {
		t.Errorf("client_properties = %v", c["client_properties"])
	}
	name := c["name"].(string)
	e.must(200, "GET", "/api/connections/"+esc(name), nil)
	e.must(404, "GET", "/api/connections/nope", nil)
	if l := e.must(200, "GET", "/api/connections/"+esc(name)+"/channels", nil).list(t); len(l) != 1 {
		t.Errorf("connection channels = %v", l)
	}
	e.must(200, "GET", "/api/vhosts/%2F/connections", nil)

	chans := e.must(200, "GET", "/api/channels", nil).list(t)
	if len(chans) != 1 {
		t.Fatalf("channels = %v", chans)
	}
	cj := chans[0].(map[string]any)
	if cj["number"] != 1.0 || cj["consumer_count"] != 1.0 || cj["user"] != "guest" || cj["connection_details"].(map[string]any)["name"] != name ||
		cj["prefetch_count"] != 3.0 || cj["confirm"] != false || cj["transactional"] != false {
		t.Errorf("channel = %v", cj)
	}
	e.must(200, "GET", "/api/vhosts/%2F/channels", nil)

	conss := e.must(200, "GET", "/api/consumers", nil).list(t)
	if len(conss) != 1 {
		t.Fatalf("consumers = %v", conss)
	}
	cs := conss[0].(map[string]any)
	if cs["consumer_tag"] != "ctag-1" || cs["ack_required"] != true || cs["prefetch_count"] != 3.0 || cs["queue"].(map[string]any)["name"] != "work" {
		t.Errorf("consumer = %v", cs)
	}
	e.must(200, "GET", "/api/consumers/%2F", nil)
	qj := e.must(200, "GET", "/api/queues/%2F/work", nil).obj(t)
	if qj["consumers"] != 1.0 || len(qj["consumer_details"].([]any)) != 1 {
		t.Errorf("queue with consumer = %v", qj)
	}

	// Deliveries count in the queue's stats.
	e.must(200, "POST", "/api/exchanges/%2F/amq.default/publish", map[string]any{"routing_key": "work", "payload": "job", "payload_encoding": "string", "properties": map[string]any{}})
	waitFor(t, "the delivery", func() bool {
		ms := e.must(200, "GET", "/api/queues/%2F/work", nil).obj(t)["message_stats"].(map[string]any)
		return ms["deliver_get"] == 1.0 && ms["deliver"] == 1.0
	})

	req, _ := http.NewRequest("DELETE", e.ts.URL+"/api/connections/"+esc(name), nil)
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("X-Reason", "bye now")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 204 {
		t.Fatalf("DELETE connection: %d", res.StatusCode)
	}
	select {
	case ae := <-closed:
		if ae == nil || ae.Code != 320 || !strings.Contains(ae.Reason, "bye now") {
			t.Errorf("close = %v", ae)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("connection not closed")
	}
	waitFor(t, "the connection to go", func() bool {
		return len(e.must(200, "GET", "/api/connections", nil).list(t)) == 0
	})
	if l := e.must(200, "GET", "/api/channels", nil).list(t); len(l) != 0 {
		t.Errorf("channels after close = %v", l)
	}
}

func TestVHostsUsersPermissions(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/api/vhosts/v1", nil)
	e.must(204, "PUT", "/api/vhosts/v1", map[string]any{})
	v := e.must(200, "GET", "/api/vhosts/v1", nil).obj(t)
	if v["name"] != "v1" {
		t.Errorf("vhost = %v", v)
	}
	if l := e.must(200, "GET", "/api/vhosts", nil).list(t); len(l) != 2 {
		t.Errorf("vhosts = %v", l)
	}

	e.must(201, "PUT", "/api/users/alice", map[string]any{"password": "secret", "tags": "management,monitoring"})
	e.must(204, "PUT", "/api/users/alice", map[string]any{"password": "secret", "tags": []string{"management"}})
	u := e.must(200, "GET", "/api/users/alice", nil).obj(t)
	if u["name"] != "alice" || u["hashing_algorithm"] != "rabbit_password_hashing_sha256" || u["password_hash"] == "" || len(u["tags"].([]any)) != 1 {
		t.Errorf("user = %v", u)
	}
	// A user from a hash logs in with the password behind it.
	e.must(201, "PUT", "/api/users/bob", map[string]any{"password_hash": u["password_hash"], "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": "management"})
	e.must(200, "GET", "/api/whoami", nil, "bob", "secret")
	// Neither password nor hash: created, without a password login, as
	// RabbitMQ does (TestAPIAnswersAsRabbitMQ).
	e.must(201, "PUT", "/api/users/carol", map[string]any{"tags": "management"})
	e.must(401, "GET", "/api/whoami", nil, "carol", "")
	e.must(404, "GET", "/api/users/nobody", nil)

	e.must(201, "PUT", "/api/permissions/v1/alice", map[string]any{"configure": ".*", "write": ".*", "read": "^r"})
	e.must(204, "PUT", "/api/permissions/v1/alice", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	e.must(400, "PUT", "/api/permissions/v1/nobody", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	p := e.must(200, "GET", "/api/permissions/v1/alice", nil).obj(t)
	if p["user"] != "alice" || p["vhost"] != "v1" || p["read"] != ".*" {
		t.Errorf("permission = %v", p)
	}
	if l := e.must(200, "GET", "/api/permissions", nil).list(t); len(l) != 2 {
		t.Errorf("permissions = %v", l)
	}
	if l := e.must(200, "GET", "/api/users/alice/permissions", nil).list(t); len(l) != 1 {
		t.Errorf("user permissions = %v", l)
	}
	if l := e.must(200, "GET", "/api/vhosts/v1/permissions", nil).list(t); len(l) != 1 {
		t.Errorf("vhost permissions = %v", l)
	}

	// alice, a management user, sees v1 only, and acts with her own
	// permissions there.
	if l := e.must(200, "GET", "/api/vhosts", nil, "alice", "secret").list(t); len(l) != 1 {
		t.Errorf("alice's vhosts = %v", l)
	}
	e.must(201, "PUT", "/api/queues/v1/aq", map[string]any{}, "alice", "secret")
	if l := e.must(200, "GET", "/api/queues", nil, "alice", "secret").list(t); len(l) != 1 {
		t.Errorf("alice's queues = %v", l)
	}
	e.must(401, "PUT", "/api/vhosts/v2", nil, "alice", "secret")

	e.must(204, "DELETE", "/api/permissions/v1/alice", nil)
	e.must(404, "GET", "/api/permissions/v1/alice", nil)
	e.must(204, "DELETE", "/api/users/bob", nil)
	e.must(404, "DELETE", "/api/users/bob", nil)
	e.must(204, "DELETE", "/api/vhosts/v1", nil)
	e.must(404, "GET", "/api/vhosts/v1", nil)
	e.must(404, "DELETE", "/api/vhosts/v1", nil)
}

func TestHealth(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"alarms", "local-alarms", "virtual-hosts", "ready-to-serve-clients"} {
		if st := e.must(200, "GET", "/api/health/checks/"+p, nil).obj(t)["status"]; st != "ok" {
			t.Errorf("%s: %v", p, st)
		}
	}
	port := e.bs.Addr[strings.LastIndex(e.bs.Addr, ":")+1:]
	e.must(200, "GET", "/api/health/checks/port-listener/"+port, nil)
	r := e.must(503, "GET", "/api/health/checks/port-listener/1", nil).obj(t)
	if r["status"] != "failed" {
		t.Errorf("port-listener = %v", r)
	}
	e.must(200, "GET", "/api/aliveness-test/%2F", nil)
	e.must(404, "GET", "/api/aliveness-test/nope", nil)
}

func TestRates(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/api/queues/%2F/r", map[string]any{})
	now := time.Now()
	e.srv.sample(now)
	for range 10 {
		e.must(200, "POST", "/api/exchanges/%2F/amq.default/publish", map[string]any{"routing_key": "r", "payload": "x", "payload_encoding": "string", "properties": map[string]any{}})
	}
	e.srv.sample(now.Add(5 * time.Second))
	q := e.must(200, "GET", "/api/queues/%2F/r", nil).obj(t)
	if rate := q["message_stats"].(map[string]any)["publish_details"].(map[string]any)["rate"]; rate != 2.0 {
		t.Errorf("publish rate = %v", rate)
	}
	o := e.must(200, "GET", "/api/overview", nil).obj(t)
	if rate := o["message_stats"].(map[string]any)["publish_details"].(map[string]any)["rate"]; rate != 2.0 {
		t.Errorf("overview publish rate = %v", rate)
	}
	if d := o["queue_totals"].(map[string]any)["messages_details"].(map[string]any)["rate"]; d != 2.0 {
		t.Errorf("depth rate = %v", d)
	}
	// Deleting the queue keeps the broker totals.
	e.must(204, "DELETE", "/api/queues/%2F/r", nil)
	o = e.must(200, "GET", "/api/overview", nil).obj(t)
	if p := o["message_stats"].(map[string]any)["publish"]; p != 10.0 {
		t.Errorf("publish total after delete = %v", p)
	}
}

func TestConsole(t *testing.T) {
	e := newEnv(t)
	r := e.must(200, "GET", "/", nil, "", "")
	if !strings.Contains(string(r.body), "<title>Warren") {
		t.Errorf("index = %.200s", r.body)
	}
	for _, f := range []string{"/app.js", "/style.css"} {
		e.must(200, "GET", f, nil, "", "")
	}
}

func TestServeAndClose(t *testing.T) {
	e := newEnv(t)
	s, err := New(Config{Addr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", SampleInterval: 10 * time.Millisecond}, e.bs.Broker)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(t.Context()) }()
	req, _ := http.NewRequest("GET", "http://"+s.Addr().String()+"/api/overview", nil)
	req.SetBasicAuth("guest", "guest")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("overview over the listener: %d", res.StatusCode)
	}
	res, err = http.Get("http://" + s.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("metrics: %d", res.StatusCode)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
}

// TestPublishAndGetNeedPermissions: the management API's publish needs
// write on the exchange and get needs read on the queue, as basic.publish
// and basic.get do.
func TestPublishAndGetNeedPermissions(t *testing.T) {
	e := newEnv(t)
	b := e.bs.Broker
	if err := b.PutUser("m", "m-pass", []string{"management"}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetPermissions("m", "/", "", "^$", "^$"); err != nil {
		t.Fatal(err)
	}
	e.must(http.StatusCreated, "PUT", "/api/queues/%2F/perm-q", map[string]any{})
	pub := map[string]any{"routing_key": "perm-q", "payload": "x", "payload_encoding": "string", "properties": map[string]any{}}
	e.must(http.StatusUnauthorized, "POST", "/api/exchanges/%2F/amq.default/publish", pub, "m", "m-pass")
	e.must(http.StatusOK, "POST", "/api/exchanges/%2F/amq.default/publish", pub)
	get := map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
	e.must(http.StatusUnauthorized, "POST", "/api/queues/%2F/perm-q/get", get, "m", "m-pass")
	if err := b.SetPermissions("m", "/", "", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	e.must(http.StatusOK, "POST", "/api/exchanges/%2F/amq.default/publish", pub, "m", "m-pass")
	if got := e.must(http.StatusOK, "POST", "/api/queues/%2F/perm-q/get", get, "m", "m-pass").list(t); len(got) != 1 {
		t.Fatalf("get returned %d messages", len(got))
	}
}

func TestChannelModesShown(t *testing.T) {
	e := newEnv(t)
	conn, err := amqp091.Dial(e.bs.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, mode := range []string{"confirm", "tx"} {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if mode == "confirm" {
			err = ch.Confirm(false)
		} else {
			err = ch.Tx()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, c := range e.must(200, "GET", "/api/channels", nil).list(t) {
		cj := c.(map[string]any)
		seen[fmt.Sprint(cj["number"], cj["confirm"], cj["transactional"])] = true
	}
	if !seen["1 true false"] || !seen["2 false true"] {
		t.Fatalf("channel modes: %v", seen)
	}
}

func TestGuestOnlyFromLoopback(t *testing.T) {
	e := newEnv(t)
	h := e.srv.Handler()
	for _, c := range []struct {
		remote string
		code   int
	}{{"127.0.0.1:50000", 200}, {"[::1]:50000", 200}, {"192.0.2.7:50000", 401}} {
		r := httptest.NewRequest("GET", "/api/whoami", nil)
		r.RemoteAddr = c.remote
		r.SetBasicAuth("guest", "guest")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.code {
			t.Fatalf("guest from %s: %d %s", c.remote, w.Code, w.Body)
		}
		if c.code == 401 && !strings.Contains(w.Body.String(), "User can only log in via localhost") {
			t.Fatalf("reason: %s", w.Body)
		}
	}
}

func TestClusterNameIsAGlobalParameter(t *testing.T) {
	e := newEnv(t)
	if n := e.must(200, "GET", "/api/cluster-name", nil).obj(t)["name"]; n == "" || n == nil {
		t.Fatalf("default cluster name %v", n)
	}
	e.must(204, "PUT", "/api/cluster-name", map[string]any{"name": "prod-east"})
	if n := e.must(200, "GET", "/api/cluster-name", nil).obj(t)["name"]; n != "prod-east" {
		t.Fatalf("cluster name %v", n)
	}
	if v := e.must(200, "GET", "/api/global-parameters/cluster_name", nil).obj(t)["value"]; v != "prod-east" {
		t.Fatalf("global parameter %v", v)
	}
	if n := e.must(200, "GET", "/api/overview", nil).obj(t)["cluster_name"]; n != "prod-east" {
		t.Fatalf("overview cluster_name %v", n)
	}
	e.must(400, "PUT", "/api/cluster-name", map[string]any{"name": 7})
}
