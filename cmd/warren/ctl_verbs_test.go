package main

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/web"
)

// mustFail runs a ctl command that must fail and returns its error text.
func (e *ctlEnv) mustFail(cmd string, args ...string) string {
	e.t.Helper()
	out, err := e.run("", cmd, args...)
	if err == nil {
		e.t.Fatalf("ctl %s %v succeeded:\n%s", cmd, args, out)
	}
	return err.Error()
}

// hasRow reports whether a line of table out has exactly these cells.
func hasRow(out string, cells ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.Join(strings.Fields(line), " ") == strings.Join(cells, " ") {
			return true
		}
	}
	return false
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.Join(strings.Fields(line), " ")
}

func TestCtlConsumersChannelsAndCloseConnection(t *testing.T) {
	e := newCtlEnv(t)
	props := amqp091.NewConnectionProperties()
	props.SetClientConnectionName("billing-worker")
	conn, err := amqp091.DialConfig(e.bs.URL, amqp091.Config{Properties: props})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("invoices", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(7, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume("invoices", "billing-1", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}

	out := e.must("list_consumers")
	if !strings.Contains(out, "invoices") || !strings.Contains(out, "billing-1") || firstLine(out) != "vhost queue_name channel consumer_tag ack_required prefetch_count exclusive arguments" {
		t.Errorf("list_consumers:\n%s", out)
	}
	out = e.must("list_consumers", "queue_name", "consumer_tag", "prefetch_count")
	if firstLine(out) != "queue_name consumer_tag prefetch_count" || !hasRow(out, "invoices", "billing-1", "7") {
		t.Errorf("list_consumers with columns:\n%s", out)
	}
	out = e.must("list_channels", "--formatter", "json", "connection", "number", "consumer_count")
	var chans []map[string]any
	if err := json.Unmarshal([]byte(out), &chans); err != nil || len(chans) != 1 || len(chans[0]) != 3 || chans[0]["consumer_count"] != 1.0 {
		t.Fatalf("list_channels json: %v\n%s", err, out)
	}
	connName, _ := chans[0]["connection"].(string)
	if connName == "" {
		t.Fatalf("no connection name: %v", chans)
	}
	if msg := e.mustFail("list_queues", "name", "mesages"); !strings.Contains(msg, `unknown column "mesages"`) || !strings.Contains(msg, "messages") {
		t.Errorf("unknown column: %s", msg)
	}

	e.must("close_connection", connName, "maintenance window")
	select {
	case ce := <-closed:
		if ce == nil || ce.Code != amqp091.ConnectionForced || !strings.Contains(ce.Reason, "maintenance window") {
			t.Errorf("closed with %v", ce)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("connection not closed")
	}
	// The broker forgets the connection once its close is done, shortly
	// after the client saw connection.close.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := e.bs.Connection(connName); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed connection is still listed")
		}
	}
	if msg := e.mustFail("close_connection", connName); !strings.Contains(msg, "connection '"+connName+"' not found") {
		t.Errorf("closing a closed connection: %s", msg)
	}
}

func TestCtlUsers(t *testing.T) {
	e := newCtlEnv(t)
	e.must("add_user", "bob", "s3cret")
	e.must("set_user_tags", "bob", "administrator", "monitoring")
	out := e.must("list_users", "name", "tags")
	if !hasRow(out, "bob", "administrator,monitoring") {
		t.Errorf("after set_user_tags:\n%s", out)
	}
	// The password survived set_user_tags.
	if _, err := e.run("", "list_vhosts", "--user", "bob", "--password", "s3cret"); err != nil {
		t.Errorf("bob's password after set_user_tags: %v", err)
	}
	e.must("change_password", "bob", "n3w")
	if _, err := e.run("", "list_vhosts", "--user", "bob", "--password", "s3cret"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("old password still works: %v", err)
	}
	if _, err := e.run("", "list_vhosts", "--user", "bob", "--password", "n3w"); err != nil {
		t.Errorf("new password: %v", err)
	}
	if out := e.must("list_users", "name", "tags"); !hasRow(out, "bob", "administrator,monitoring") {
		t.Errorf("tags after change_password:\n%s", out)
	}
	e.must("set_user_tags", "bob")
	if out := e.must("list_users", "name", "tags"); !hasRow(out, "bob") {
		t.Errorf("tags not cleared:\n%s", out)
	}
	if msg := e.mustFail("change_password", "nobody", "x"); !strings.Contains(msg, "user 'nobody' not found") {
		t.Errorf("missing user: %s", msg)
	}
}

func TestCtlTopologyPublishGet(t *testing.T) {
	e := newCtlEnv(t)
	e.must("declare_exchange", "--type", "topic", "events")
	e.must("declare_queue", "--type", "quorum", "--arguments", `{"x-max-length": 5}`, "audit")
	out := e.must("list_queues", "name", "type", "arguments")
	if !strings.Contains(out, "audit") || !strings.Contains(out, "quorum") || !strings.Contains(out, `"x-max-length":5`) {
		t.Errorf("declared quorum queue:\n%s", out)
	}
	if out := e.must("list_exchanges", "name", "type"); !hasRow(out, "events", "topic") {
		t.Errorf("declared exchange:\n%s", out)
	}
	e.must("declare_binding", "--routing-key", "order.*", "events", "audit")
	if out := e.must("list_bindings", "source", "destination", "routing_key"); !hasRow(out, "events", "audit", "order.*") {
		t.Errorf("binding:\n%s", out)
	}

	if out := e.must("publish", "--exchange", "events", "--routing-key", "order.paid", "--properties", `{"headers": {"n": 1}}`, "hello"); out != "Message published\n" {
		t.Errorf("publish: %q", out)
	}
	if out := e.must("publish", "--exchange", "events", "--routing-key", "user.new", "nobody listens"); out != "Message published but NOT routed\n" {
		t.Errorf("unroutable publish: %q", out)
	}
	e.run("stdin body", "publish", "--routing-key", "audit") //nolint:errcheck // checked by get below
	out = e.must("get", "--count", "5", "audit")
	if !strings.Contains(out, "order.paid") || !strings.Contains(out, "hello") || !strings.Contains(out, "stdin body") {
		t.Errorf("get:\n%s", out)
	}
	var msgs []map[string]any
	if err := json.Unmarshal([]byte(e.must("get", "--ackmode", "ack_requeue_false", "--formatter", "json", "audit")), &msgs); err != nil ||
		len(msgs) != 1 || msgs[0]["payload"] != "hello" || msgs[0]["properties"].(map[string]any)["headers"].(map[string]any)["n"] != 1.0 {
		t.Errorf("get json: %v %v", err, msgs)
	}

	e.must("delete_binding", "--routing-key", "order.*", "events", "audit")
	if out := e.must("publish", "--exchange", "events", "--routing-key", "order.paid", "x"); out != "Message published but NOT routed\n" {
		t.Errorf("publish after delete_binding: %q", out)
	}
	if msg := e.mustFail("delete_binding", "--routing-key", "order.*", "events", "audit"); !strings.Contains(msg, "binding from exchange 'events' to queue 'audit' with routing key 'order.*' not found") {
		t.Errorf("deleting a missing binding: %s", msg)
	}
	e.must("delete_exchange", "events")
	if msg := e.mustFail("delete_exchange", "events"); !strings.Contains(msg, "exchange 'events' in vhost '/' not found") {
		t.Errorf("deleting a missing exchange: %s", msg)
	}
	if msg := e.mustFail("get", "nope"); !strings.Contains(msg, "queue 'nope' in vhost '/' not found") {
		t.Errorf("get from a missing queue: %s", msg)
	}
	if msg := e.mustFail("delete_queue", "--vhost", "novhost", "audit"); !strings.Contains(msg, "vhost 'novhost' not found") {
		t.Errorf("queue in a missing vhost: %s", msg)
	}
	if msg := e.mustFail("declare_queue", "--arguments", `{"x-max-length": }`, "q"); !strings.Contains(msg, "--arguments: line 1, column 18") {
		t.Errorf("bad --arguments: %s", msg)
	}
}

func TestCtlErrorsNameTheProblem(t *testing.T) {
	e := newCtlEnv(t)
	if msg := e.mustFail("list_qeueus"); !strings.Contains(msg, `unknown ctl command "list_qeueus"`) || !strings.Contains(msg, `"list_queues"`) {
		t.Errorf("unknown command: %s", msg)
	}

	bad := filepath.Join(t.TempDir(), "defs.json")
	if err := os.WriteFile(bad, []byte("{\n  \"queues\": [\n    {\"name\": \"a\",}\n  ]\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := e.mustFail("import_definitions", bad); !strings.Contains(msg, bad+": line 3, column 18: invalid character '}'") {
		t.Errorf("bad definitions file: %s", msg)
	}

	// The AMQP port, and an HTTP server that is not the API.
	amqpURL := "http://" + e.bs.Addr
	if _, err := (&ctlEnv{t: t, url: amqpURL}).run("", "list_queues"); err == nil || !strings.Contains(err.Error(), "is not Warren's HTTP API") {
		t.Errorf("AMQP port as --url: %v", err)
	}
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html>hello</html>"))
	}))
	defer web.Close()
	if _, err := (&ctlEnv{t: t, url: web.URL}).run("", "list_queues"); err == nil || !strings.Contains(err.Error(), "is not Warren's HTTP API") || !strings.Contains(err.Error(), "text/html") {
		t.Errorf("web page as --url: %v", err)
	}
}

func TestUnknownTopLevelCommand(t *testing.T) {
	err := newApp().Run([]string{"warren", "bnech"})
	if err == nil || !strings.Contains(err.Error(), `unknown command "bnech"`) {
		t.Errorf("warren bnech: %v", err)
	}
}

// TestCtlOverHTTPS reaches the API over HTTPS, trusting the server's CA
// given with --cacert, and refuses a server it cannot verify without it.
func TestCtlOverHTTPS(t *testing.T) {
	e := newCtlEnv(t)
	s, err := web.New(web.Config{Logger: zaptest.NewLogger(t), SampleInterval: time.Hour}, e.bs.Broker)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewTLSServer(s.Handler())
	defer ts.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsEnv := &ctlEnv{t: t, url: ts.URL, bs: e.bs}
	if out := tlsEnv.must("list_vhosts", "--cacert", ca); !hasRow(out, "/", "0") {
		t.Errorf("list_vhosts over HTTPS:\n%s", out)
	}
	if msg := tlsEnv.mustFail("list_vhosts"); !strings.Contains(msg, "--cacert") {
		t.Errorf("unverified server: %s", msg)
	}
}
