package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// ctlRequest is one management API call of warren ctl.
type ctlRequest struct {
	method, path string
	body         any         // marshalled as JSON when not nil
	header       http.Header // extra request headers
	out          any         // a JSON answer is decoded into it when not nil
}

// ctlDo sends one API request; a JSON answer is decoded into out when
// out is not nil. An error status is returned as an error that names
// what was not found (404) or the API's reason.
func ctlDo(cc *cli.Context, method, path string, body, out any) error {
	return ctlSend(cc, ctlRequest{method: method, path: path, body: body, out: out})
}

// ctlSend is ctlDo with request headers.
func ctlSend(cc *cli.Context, r ctlRequest) error {
	status, data, err := ctlRoundTrip(cc, r)
	if err != nil {
		return err
	}
	switch {
	case status == http.StatusNotFound:
		return ctlNotFound(cc, r.method, r.path)
	case status >= 300:
		// A reason is a string, or a term such as ["no_such_user","x"].
		var e struct {
			Reason json.RawMessage `json:"reason"`
		}
		if json.Unmarshal(data, &e) == nil && len(e.Reason) > 0 && string(e.Reason) != `""` && string(e.Reason) != "null" {
			reason := string(e.Reason)
			var s string
			if json.Unmarshal(e.Reason, &s) == nil {
				reason = s
			}
			return fmt.Errorf("%s %s: %d %s: %s", r.method, r.path, status, http.StatusText(status), reason)
		}
		return fmt.Errorf("%s %s: %d %s", r.method, r.path, status, http.StatusText(status))
	}
	if r.out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, r.out); err != nil {
			return fmt.Errorf("%s %s: unexpected answer from %s: %v", r.method, r.path, ctlBase(cc), err)
		}
	}
	return nil
}

func ctlBase(cc *cli.Context) string { return strings.TrimRight(cc.String("url"), "/") }

// ctlRoundTrip sends r and returns the status and body of the answer. It
// fails with a message saying so when --url does not lead to Warren's (or
// RabbitMQ's) HTTP API: nothing listening, another protocol, or an HTTP
// server that does not answer in the API's JSON.
func ctlRoundTrip(cc *cli.Context, r ctlRequest) (int, []byte, error) {
	var rd io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	base := ctlBase(cc)
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return 0, nil, fmt.Errorf("--url %q: want http://host:port or https://host:port of Warren's HTTP API", cc.String("url"))
	}
	req, err := http.NewRequestWithContext(cc.Context, r.method, base+r.path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.SetBasicAuth(cc.String("user"), cc.String("password"))
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	client := &http.Client{Timeout: 60 * time.Second}
	if f := cc.String("cacert"); f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return 0, nil, fmt.Errorf("--cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return 0, nil, fmt.Errorf("--cacert %s: no PEM certificate in it", f)
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, nil, ctlTransportError(base, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 256<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the answer of %s: %w", base, err)
	}
	if len(data) > 0 {
		ct, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
		if ct != "application/json" || !json.Valid(data) {
			return 0, nil, fmt.Errorf("%s is not Warren's HTTP API: %s %s answered %d with %q, not JSON; point --url at the management listener (--http-addr, default http://localhost:15672)",
				base, r.method, r.path, res.StatusCode, ct)
		}
	}
	return res.StatusCode, data, nil
}

// ctlTransportError explains a request that got no HTTP answer.
func ctlTransportError(base string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "malformed HTTP") || strings.Contains(msg, "AMQP"):
		return fmt.Errorf("%s is not Warren's HTTP API: it does not speak HTTP (the AMQP port?); point --url at the management listener (--http-addr, default http://localhost:15672): %v", base, err)
	case strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%s: the server speaks plain HTTP; use http:// in --url", base)
	case strings.Contains(msg, "x509:") || strings.Contains(msg, "tls:"):
		return fmt.Errorf("%s: TLS: %v (give the CA that signed the server's certificate with --cacert)", base, err)
	case strings.Contains(msg, "connection refused"):
		return fmt.Errorf("cannot reach Warren's HTTP API at %s: connection refused (is warren running, with the management listener on this address?)", base)
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Timeout() {
		return fmt.Errorf("Warren's HTTP API at %s did not answer in time: %v", base, err)
	}
	return fmt.Errorf("cannot reach Warren's HTTP API at %s: %v", base, err)
}

// ctlNotFound names what a 404 answer of method path did not find. When
// the path is inside a vhost that does not exist, the vhost is named.
func ctlNotFound(cc *cli.Context, method, path string) error {
	p, _, _ := strings.Cut(path, "?")
	seg := strings.Split(strings.TrimPrefix(p, "/api/"), "/")
	for i := range seg {
		if s, err := url.PathUnescape(seg[i]); err == nil {
			seg[i] = s
		}
	}
	at := func(i int) string {
		if i < len(seg) {
			return seg[i]
		}
		return ""
	}
	what := ""
	vhost, inVHost := "", false
	kinds := map[string]string{
		"queues": "queue", "exchanges": "exchange", "policies": "policy",
		"operator-policies": "operator policy", "super-streams": "super stream",
	}
	switch kind := at(0); {
	case kinds[kind] != "" && len(seg) >= 3:
		vhost, inVHost = at(1), true
		what = fmt.Sprintf("%s '%s' in vhost '%s'", kinds[kind], at(2), vhost)
	case kind == "permissions" && len(seg) >= 3:
		vhost, inVHost = at(1), true
		what = fmt.Sprintf("permissions of user '%s' in vhost '%s'", at(2), vhost)
	case kind == "bindings" && len(seg) >= 6:
		vhost, inVHost = at(1), true
		dt := "queue"
		if at(4) == "e" {
			dt = "exchange"
		}
		what = fmt.Sprintf("binding from exchange '%s' to %s '%s' in vhost '%s'", at(3), dt, at(5), vhost)
	case kind == "users" && len(seg) >= 2:
		what = fmt.Sprintf("user '%s'", at(1))
	case kind == "connections" && len(seg) >= 2:
		what = fmt.Sprintf("connection '%s'", at(1))
	case (kind == "vhosts" || kind == "aliveness-test") && len(seg) >= 2:
		what = fmt.Sprintf("vhost '%s'", at(1))
	case len(seg) == 2 && kind != "":
		vhost, inVHost = at(1), true
		what = fmt.Sprintf("vhost '%s'", vhost)
	default:
		what = "API path " + p
	}
	if inVHost && !strings.HasPrefix(what, "vhost") {
		status, _, err := ctlRoundTrip(cc, ctlRequest{method: "GET", path: "/api/vhosts/" + url.PathEscape(vhost)})
		if err == nil && status == http.StatusNotFound {
			what = fmt.Sprintf("vhost '%s'", vhost)
		}
	}
	return fmt.Errorf("%s not found (%s %s: 404 Not Found)", what, method, path)
}
