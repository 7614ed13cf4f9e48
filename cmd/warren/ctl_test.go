package main

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/broker/brokertest"
	"github.com/warrenmq/warren/web"
)

// ctlEnv runs warren ctl commands against an in-process broker's API.
type ctlEnv struct {
	t   *testing.T
	url string
	bs  *brokertest.Server
}

func newCtlEnv(t *testing.T) *ctlEnv {
	bs := brokertest.Start(t, nil)
	s, err := web.New(web.Config{Logger: zaptest.NewLogger(t), SampleInterval: time.Hour}, bs.Broker)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return &ctlEnv{t: t, url: ts.URL, bs: bs}
}

// run runs "warren ctl cmd args..." and returns its output.
func (e *ctlEnv) run(stdin string, cmd string, args ...string) (string, error) {
	app := newApp()
	var out bytes.Buffer
	app.Writer = &out
	app.Reader = strings.NewReader(stdin)
	argv := append([]string{"warren", "ctl", cmd, "--url", e.url}, args...)
	err := app.Run(argv)
	return out.String(), err
}

func (e *ctlEnv) must(cmd string, args ...string) string {
	e.t.Helper()
	out, err := e.run("", cmd, args...)
	if err != nil {
		e.t.Fatalf("ctl %s %v: %v", cmd, args, err)
	}
	return out
}

func TestCtl(t *testing.T) {
	e := newCtlEnv(t)
	e.must("add_vhost", "shop")
	e.must("add_user", "--tags", "management", "ann", "pw")
	e.must("set_permissions", "--vhost", "shop", "ann", ".*", ".*", ".*")
	e.must("declare_queue", "--vhost", "shop", "orders")
	e.must("declare_queue", "--vhost", "shop", "--durable=false", "scratch")

	out := e.must("list_queues")
	if !strings.Contains(out, "orders") || !strings.Contains(out, "scratch") || !strings.HasPrefix(out, "vhost") {
		t.Errorf("list_queues:\n%s", out)
	}
	out = e.must("list_queues", "--vhost", "shop", "--json")
	var qs []map[string]any
	if err := json.Unmarshal([]byte(out), &qs); err != nil || len(qs) != 2 {
		t.Fatalf("list_queues --json: %v\n%s", err, out)
	}
	if out := e.must("list_users"); !strings.Contains(out, "ann") || !strings.Contains(out, "management") {
		t.Errorf("list_users:\n%s", out)
	}
	if out := e.must("list_exchanges", "--vhost", "shop"); !strings.Contains(out, "amq.topic") {
		t.Errorf("list_exchanges:\n%s", out)
	}
	if out := e.must("list_bindings", "--vhost", "shop"); !strings.Contains(out, "orders") {
		t.Errorf("list_bindings:\n%s", out)
	}
	if out := e.must("list_connections"); !strings.HasPrefix(out, "name") {
		t.Errorf("list_connections:\n%s", out)
	}
	if out := e.must("status"); !strings.Contains(out, "queues") || !strings.Contains(out, "warren@") || !strings.Contains(out, "memory alarm") {
		t.Errorf("status:\n%s", out)
	}
	e.must("purge_queue", "--vhost", "shop", "orders")

	// Definitions round trip through a file.
	file := filepath.Join(t.TempDir(), "defs.json")
	e.must("export_definitions", file)
	data, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(data), `"orders"`) {
		t.Fatalf("exported: %v %s", err, data)
	}
	e2 := newCtlEnv(t)
	e2.must("import_definitions", file)
	if out := e2.must("list_queues", "--vhost", "shop"); !strings.Contains(out, "orders") {
		t.Errorf("imported queues:\n%s", out)
	}
	if _, err := e2.run(string(data), "import_definitions"); err != nil {
		t.Errorf("import from stdin: %v", err)
	}

	e.must("delete_queue", "--vhost", "shop", "--if-empty", "orders")
	if _, err := e.run("", "delete_queue", "--vhost", "shop", "orders"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("deleting a missing queue: %v", err)
	}
	e.must("delete_user", "ann")
	e.must("delete_vhost", "shop")
	if out := e.must("list_users"); strings.Contains(out, "ann") {
		t.Errorf("ann not deleted:\n%s", out)
	}
	if _, err := e.run("", "list_queues", "--password", "wrong"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("bad password: %v", err)
	}
}
