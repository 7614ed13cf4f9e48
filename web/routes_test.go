package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// wildcard is a {name} segment of a route pattern.
var wildcard = regexp.MustCompile(`\{[^}]+\}`)

// samplePath fills the wildcards of a route pattern: the vhost "/", as
// clients send it (%2F), and "x" for every other name.
func samplePath(pattern string) string {
	return wildcard.ReplaceAllStringFunc(pattern, func(w string) string {
		if w == "{vhost}" {
			return "%2F"
		}
		return "x"
	})
}

// allowedMethods is what a path of the routing table answers to: its
// registered methods, HEAD with GET, and OPTIONS.
func allowedMethods(routes []route) map[string][]string {
	allowed := make(map[string][]string)
	for _, rt := range routes {
		allowed[rt.path] = append(allowed[rt.path], rt.method)
		if rt.method == "GET" {
			allowed[rt.path] = append(allowed[rt.path], "HEAD")
		}
	}
	for p := range allowed {
		allowed[p] = append(allowed[p], "OPTIONS")
	}
	return allowed
}

// TestRoutesTrailingSlash: every route of the table is served with and
// without a trailing slash, as RabbitMQ serves it. Without credentials a
// route that matched asks for them (401); a path no route matches is 404
// before any login, so the status tells which happened, for every method,
// with no side effect.
func TestRoutesTrailingSlash(t *testing.T) {
	e := newEnv(t)
	routes := e.srv.apiRoutes()
	if len(routes) < 50 {
		t.Fatalf("only %d routes in the table", len(routes))
	}
	for _, rt := range routes {
		p := samplePath(rt.path)
		for _, path := range []string{p, p + "/"} {
			if r := e.do(rt.method, path, nil, "", ""); r.status != 401 {
				t.Errorf("%s %s (route %s): status %d, want 401: %s", rt.method, path, rt.path, r.status, r.body)
			}
		}
	}
	// Unknown paths stay unknown, slash or not.
	for _, path := range []string{"/api/nonsense", "/api/nonsense/", "/api/queues/%2F/q/nonsense/"} {
		e.must(404, "GET", path, nil)
	}
}

// TestRoutesTrailingSlashContent: the slash form answers what the plain
// form answers, and an empty last segment is not taken for a name.
func TestRoutesTrailingSlashContent(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/api/queues/%2F/q1", map[string]any{"durable": true})
	e.must(201, "PUT", "/api/vhosts/v%2Fw", nil)
	conn, err := amqp091.DialConfig(e.bs.URL, amqp091.Config{Properties: amqp091.Table{"connection_name": "recovering"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	// A client's connection-recovery tests find their connection so.
	waitFor(t, "the connection in /api/connections/", func() bool {
		for _, c := range e.must(200, "GET", "/api/connections/", nil).list(t) {
			if c.(map[string]any)["client_properties"].(map[string]any)["connection_name"] == "recovering" {
				return true
			}
		}
		return false
	})
	// /api/queues/%2F/ lists the queues of "/"; it is not the queue "" of
	// the vhost "/".
	qs := e.must(200, "GET", "/api/queues/%2F/", nil).list(t)
	if len(qs) != 1 || qs[0].(map[string]any)["name"] != "q1" {
		t.Errorf("GET /api/queues/%%2F/ = %s", qs)
	}
	if q := e.must(200, "GET", "/api/queues/%2F/q1/", nil).obj(t); q["name"] != "q1" || q["vhost"] != "/" {
		t.Errorf("GET /api/queues/%%2F/q1/ = %v", q)
	}
	if v := e.must(200, "GET", "/api/vhosts/%2F/", nil).obj(t); v["name"] != "/" {
		t.Errorf("GET /api/vhosts/%%2F/ = %v", v)
	}
	if v := e.must(200, "GET", "/api/vhosts/v%2Fw/", nil).obj(t); v["name"] != "v/w" {
		t.Errorf("GET /api/vhosts/v%%2Fw/ = %v", v)
	}
	e.must(200, "GET", "/api/exchanges/%2F/amq.direct/bindings/source/", nil)
	// Writes too: PUT, then DELETE, with the slash.
	e.must(201, "PUT", "/api/queues/%2F/q2/", map[string]any{"durable": false})
	e.must(200, "GET", "/api/queues/%2F/q2", nil)
	e.must(204, "DELETE", "/api/queues/%2F/q2/", nil)
	e.must(404, "GET", "/api/queues/%2F/q2", nil)
	// Two slashes leave an empty name, which names nothing.
	e.must(404, "GET", "/api/queues/%2F//", nil)

	// Every GET route answers the same status both ways.
	for _, rt := range e.srv.apiRoutes() {
		if rt.method != "GET" {
			continue
		}
		p := strings.ReplaceAll(samplePath(rt.path), "/x", "/q1")
		a, b := e.do("GET", p, nil), e.do("GET", p+"/", nil)
		if a.status != b.status {
			t.Errorf("GET %s: %d, with a slash %d: %s", p, a.status, b.status, b.body)
		}
	}
}

// TestRoutesMethodNotAllowed: a method a path does not serve is 405 with
// an Allow header and no body, as from RabbitMQ, slash or not, before any
// login; OPTIONS answers the Allow header.
func TestRoutesMethodNotAllowed(t *testing.T) {
	e := newEnv(t)
	for path, allowed := range allowedMethods(e.srv.apiRoutes()) {
		p := samplePath(path)
		for _, url := range []string{p, p + "/"} {
			for _, m := range []string{"GET", "HEAD", "PUT", "POST", "DELETE", "PATCH"} {
				if slices.Contains(allowed, m) {
					continue
				}
				for _, auth := range [][]string{{"guest", "guest"}, {"", ""}} {
					r := e.do(m, url, nil, auth...)
					if r.status != 405 {
						t.Errorf("%s %s as %q: status %d, want 405: %s", m, url, auth[0], r.status, r.body)
						continue
					}
					checkAllow(t, m+" "+url, r.header.Get("Allow"), allowed)
					if len(r.body) != 0 {
						t.Errorf("%s %s: 405 with body %q", m, url, r.body)
					}
				}
			}
			r := e.do("OPTIONS", url, nil, "", "")
			if r.status != 200 {
				t.Errorf("OPTIONS %s: status %d, want 200: %s", url, r.status, r.body)
				continue
			}
			checkAllow(t, "OPTIONS "+url, r.header.Get("Allow"), allowed)
		}
	}
}

func checkAllow(t *testing.T, req, header string, want []string) {
	t.Helper()
	got := strings.Split(header, ", ")
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Errorf("%s: Allow %q, want %v", req, header, want)
	}
}

// TestMetricsTrailingSlash: the metrics listener serves /metrics/ too, and
// a wrong method there is 405 with an Allow header.
func TestMetricsTrailingSlash(t *testing.T) {
	e := newEnv(t)
	ts := httptest.NewServer(e.srv.MetricsHandler())
	defer ts.Close()
	for _, path := range []string{"/metrics", "/metrics/"} {
		res, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(body), "rabbitmq_queues ") {
			t.Errorf("GET %s: status %d: %.200s", path, res.StatusCode, body)
		}
		res, err = http.Post(ts.URL+path, "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 405 || res.Header.Get("Allow") == "" {
			t.Errorf("POST %s: status %d, Allow %q, want 405 with Allow", path, res.StatusCode, res.Header.Get("Allow"))
		}
	}
}
