package web

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/broker/brokertest"
)

// env is a broker with the management API in front of it.
type env struct {
	t   *testing.T
	bs  *brokertest.Server
	srv *Server
	ts  *httptest.Server
}

func newEnv(t *testing.T) *env {
	t.Helper()
	bs := brokertest.Start(t, nil)
	srv, err := New(Config{Logger: zaptest.NewLogger(t), SampleInterval: time.Hour}, bs.Broker)
	if err != nil {
		t.Fatal(err)
	}
	return newEnvOn(t, bs, srv)
}

// newEnvOn is newEnv for a broker and server the test made.
func newEnvOn(t *testing.T, bs *brokertest.Server, srv *Server) *env {
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &env{t: t, bs: bs, srv: srv, ts: ts}
}

// resp is a decoded response.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decoding %q: %v", r.body, err)
	}
	return v
}

func (r resp) obj(t *testing.T) map[string]any {
	t.Helper()
	m, ok := r.json(t).(map[string]any)
	if !ok {
		t.Fatalf("not an object: %s", r.body)
	}
	return m
}

func (r resp) list(t *testing.T) []any {
	t.Helper()
	l, ok := r.json(t).([]any)
	if !ok {
		t.Fatalf("not a list: %s", r.body)
	}
	return l
}

// channel opens an AMQP connection to e's broker as guest, closed with the
// test, and a channel on it.
func (e *env) channel() *amqp091.Channel {
	e.t.Helper()
	conn, err := amqp091.Dial(e.bs.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		e.t.Fatal(err)
	}
	return ch
}

// do sends a request as guest (or as user/pass when given).
func (e *env) do(method, path string, body any, auth ...string) resp {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, ok := body.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(body); err != nil {
				e.t.Fatal(err)
			}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.ts.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	user, pass := "guest", "guest"
	if len(auth) == 2 {
		user, pass = auth[0], auth[1]
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: data}
}

// must sends a request and checks its status.
func (e *env) must(status int, method, path string, body any, auth ...string) resp {
	e.t.Helper()
	r := e.do(method, path, body, auth...)
	if r.status != status {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.status, status, r.body)
	}
	return r
}

func esc(s string) string { return url.PathEscape(s) }

// waitFor polls cond until it holds or a few seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func num(t *testing.T, v any) float64 {
	t.Helper()
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("not a number: %#v", v)
	}
	return f
}
