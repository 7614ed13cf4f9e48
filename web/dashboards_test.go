package web

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The PromQL queries of RabbitMQ's Grafana dashboards "RabbitMQ-Overview"
// (grafana.com id 10991) and "RabbitMQ-Quorum-Queues-Raft" (id 11340),
// as rabbitmq-server's deps/rabbitmq_prometheus/docker/grafana/dashboards
// hold them. Each panel's query must return series from Warren under
// load: every vector selector in it, with its label matchers, must match
// at least one sample of Warren's exposition (the functions and
// operators around the selectors are not evaluated).
var dashboardQueries = []struct {
	dashboard, panel, expr string
	// missing, when set, says why Warren does not serve the query: the
	// test then checks that it indeed returns nothing.
	missing string
}{
	{"RabbitMQ-Overview", "Ready messages", `sum(rabbitmq_queue_messages_ready * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`, ""},
	{"RabbitMQ-Overview", "Incoming messages / s", `sum(rate(rabbitmq_channel_messages_published_total[60s]) * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`, ""},
	{"RabbitMQ-Overview", "Publishers", `sum(rabbitmq_channels * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) - sum(rabbitmq_channel_consumers * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`, ""},
	{"RabbitMQ-Overview", "Connections", `sum(rabbitmq_connections * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`, ""},
	{"RabbitMQ-Overview", "Queues", `sum(rabbitmq_queues * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`, ""},
	{"RabbitMQ-Overview", "Unacknowledged messages", `sum(rabbitmq_queue_messages_unacked * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`, ""},
	{"RabbitMQ-Overview", "Outgoing messages / s", `sum(rate(rabbitmq_channel_messages_redelivered_total[60s]) * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) +
sum(rate(rabbitmq_channel_messages_delivered_total[60s]) * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) +
sum(rate(rabbitmq_channel_messages_delivered_ack_total[60s]) * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) +
sum(rate(rabbitmq_channel_get_total[60s]) * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) +
sum(rate(rabbitmq_channel_get_ack_total[60s]) * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`, ""},
	{"RabbitMQ-Overview", "Consumers", `sum(rabbitmq_channel_consumers * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`, ""},
	{"RabbitMQ-Overview", "Channels", `sum(rabbitmq_channels * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`, ""},
	{"RabbitMQ-Overview", "Nodes", `sum(rabbitmq_build_info * on(instance) group_left(rabbitmq_cluster) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`, ""},
	{"RabbitMQ-Overview", "NODES table", `rabbitmq_build_info * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}`, ""},
	{"RabbitMQ-Overview", "Memory available before publishers blocked", `(rabbitmq_resident_memory_limit_bytes * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) -
(rabbitmq_process_resident_memory_bytes * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`, ""},
	{"RabbitMQ-Overview", "Disk space available before publishers blocked", `rabbitmq_disk_space_available_bytes * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}`, ""},
	{"RabbitMQ-Overview", "File descriptors available", `(rabbitmq_process_max_fds * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) -
(rabbitmq_process_open_fds * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`, ""},
	{"RabbitMQ-Overview", "TCP sockets available", `(rabbitmq_process_max_tcp_sockets * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) -
(rabbitmq_process_open_tcp_sockets * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})`, ""},
	{"RabbitMQ-Overview", "Messages ready to be delivered to consumers", `sum(rabbitmq_queue_messages_ready * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Messages pending consumer acknowledgement", `sum(rabbitmq_queue_messages_unacked * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Messages published / s", `sum(rate(rabbitmq_channel_messages_published_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Messages confirmed to publishers / s", `sum(rate(rabbitmq_channel_messages_confirmed_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Messages routed to queues / s", `sum(rate(rabbitmq_queue_messages_published_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Messages unconfirmed to publishers / s", `sum(rate(rabbitmq_channel_messages_unconfirmed[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Unroutable messages dropped / s", `sum(rate(rabbitmq_channel_messages_unroutable_dropped_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Unroutable messages returned to publishers / s", `sum(rate(rabbitmq_channel_messages_unroutable_returned_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Messages delivered / s", `sum(
  (rate(rabbitmq_channel_messages_delivered_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) +
  (rate(rabbitmq_channel_messages_delivered_ack_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})
) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Messages redelivered / s", `sum(rate(rabbitmq_channel_messages_redelivered_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Messages delivered with manual ack / s", `sum(rate(rabbitmq_channel_messages_delivered_ack_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Messages delivered auto ack / s", `sum(rate(rabbitmq_channel_messages_delivered_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Messages acknowledged / s", `sum(rate(rabbitmq_channel_messages_acked_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Polling operations with auto ack / s", `sum(rate(rabbitmq_channel_get_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Polling operations that yield no result / s", `sum(rate(rabbitmq_channel_get_empty_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Polling operations with manual ack / s", `sum(rate(rabbitmq_channel_get_ack_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Total queues", `rabbitmq_queues * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}`, ""},
	{"RabbitMQ-Overview", "Queues declared / s", `sum(rate(rabbitmq_queues_declared_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Queues created / s", `sum(rate(rabbitmq_queues_created_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Queues deleted / s", `sum(rate(rabbitmq_queues_deleted_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Total channels", `rabbitmq_channels * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}`, ""},
	{"RabbitMQ-Overview", "Channels opened / s", `sum(rate(rabbitmq_channels_opened_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Channels closed / s", `sum(rate(rabbitmq_channels_closed_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Total connections", `rabbitmq_connections * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}`, ""},
	{"RabbitMQ-Overview", "Connections opened / s", `sum(rate(rabbitmq_connections_opened_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "Connections closed / s", `sum(rate(rabbitmq_connections_closed_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Overview", "variable namespace", `label_values(rabbitmq_identity_info, namespace)`, ""},
	{"RabbitMQ-Overview", "variable rabbitmq_cluster", `label_values(rabbitmq_identity_info{namespace="$namespace"}, rabbitmq_cluster)`, ""},

	{"RabbitMQ-Quorum-Queues-Raft", "Log entries committed / s", `sum(rate(rabbitmq_raft_log_commit_index[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Quorum-Queues-Raft", "Log entry commit latency", `rabbitmq_raft_entry_commit_latency_seconds * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}`, ""},
	{"RabbitMQ-Quorum-Queues-Raft", "Uncommitted log entries", `sum(
  (rabbitmq_raft_log_last_written_index * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) -
  (rabbitmq_raft_log_commit_index * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})
) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Quorum-Queues-Raft", "Leader elections / s", `sum(rate(rabbitmq_raft_term_total[60s]) * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) by(rabbitmq_node)`, ""},
	{"RabbitMQ-Quorum-Queues-Raft", "Raft members with >5k entries in the log", `sum(
  (rabbitmq_raft_log_last_written_index * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"}) - 
  (rabbitmq_raft_log_snapshot_index * on(instance) group_left(rabbitmq_cluster, rabbitmq_node) rabbitmq_identity_info{rabbitmq_cluster="$rabbitmq_cluster", namespace="$namespace"})
) by(queue, rabbitmq_node) > 5000`, ""},
}

// series is one sample of an exposition: its name and labels.
type promSeries struct {
	name   string
	labels map[string]string
}

// parseExposition reads Prometheus's text format.
func parseExposition(t *testing.T, r io.Reader) []promSeries {
	t.Helper()
	var out []promSeries
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		s := promSeries{labels: map[string]string{}}
		i := strings.IndexAny(line, "{ ")
		if i < 0 {
			t.Fatalf("bad exposition line %q", line)
		}
		s.name = line[:i]
		if line[i] == '{' {
			rest := line[i+1:]
			for !strings.HasPrefix(rest, "}") {
				eq := strings.Index(rest, `="`)
				if eq < 0 {
					t.Fatalf("bad labels in %q", line)
				}
				name := strings.TrimPrefix(rest[:eq], ",")
				var val strings.Builder
				j := eq + 2
				for ; rest[j] != '"'; j++ {
					if rest[j] == '\\' {
						j++
						if rest[j] == 'n' {
							val.WriteByte('\n')
							continue
						}
					}
					val.WriteByte(rest[j])
				}
				s.labels[name] = val.String()
				rest = strings.TrimPrefix(rest[j+1:], ",")
			}
		}
		out = append(out, s)
	}
	return out
}

// matcher is a label matcher of a selector.
type matcher struct{ label, op, value string }

func (m matcher) matches(labels map[string]string) bool {
	v := labels[m.label]
	switch m.op {
	case "=":
		return v == m.value
	case "!=":
		return v != m.value
	case "=~", "!~":
		re := regexp.MustCompile("^(?:" + m.value + ")$")
		return re.MatchString(v) == (m.op == "=~")
	}
	panic("unknown matcher " + m.op)
}

// selector is a PromQL vector selector.
type selector struct {
	metric   string
	matchers []matcher
}

func (s selector) String() string {
	var ms []string
	for _, m := range s.matchers {
		ms = append(ms, fmt.Sprintf("%s%s%q", m.label, m.op, m.value))
	}
	return s.metric + "{" + strings.Join(ms, ",") + "}"
}

// promKeywords take a parenthesised list of label names, not an
// expression.
var promKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// selectors extracts the vector selectors of a PromQL expression: its
// identifiers that are neither functions (followed by "(") nor keywords,
// with their {matchers}. Grafana's label_values(selector, label) is
// read as its selector.
func selectors(t *testing.T, expr string) []selector {
	t.Helper()
	var out []selector
	i := 0
	skipSpace := func() {
		for i < len(expr) && unicode.IsSpace(rune(expr[i])) {
			i++
		}
	}
	ident := func() string {
		start := i
		for i < len(expr) && (expr[i] == '_' || expr[i] == ':' || unicode.IsLetter(rune(expr[i])) || unicode.IsDigit(rune(expr[i]))) {
			i++
		}
		return expr[start:i]
	}
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == '"':
			i = i + 1 + strings.IndexByte(expr[i+1:], '"') + 1
		case c == '[':
			i += strings.IndexByte(expr[i:], ']') + 1
		case unicode.IsDigit(rune(c)):
			for i < len(expr) && (unicode.IsDigit(rune(expr[i])) || expr[i] == '.') {
				i++
			}
		case c == '_' || unicode.IsLetter(rune(c)):
			name := ident()
			skipSpace()
			if promKeywords[name] {
				i += strings.IndexByte(expr[i:], ')') + 1
				continue
			}
			if i < len(expr) && expr[i] == '(' {
				if name == "label_values" {
					// label_values(selector, label): skip the label.
					j := strings.LastIndexByte(expr, ',')
					sels := selectors(t, expr[i+1:j])
					return append(out, sels...)
				}
				continue // a function
			}
			sel := selector{metric: name}
			if i < len(expr) && expr[i] == '{' {
				end := strings.IndexByte(expr[i:], '}') + i
				for _, part := range splitMatchers(expr[i+1 : end]) {
					m := regexp.MustCompile(`^\s*(\w+)\s*(=~|!~|!=|=)\s*"(.*)"\s*$`).FindStringSubmatch(part)
					if m == nil {
						t.Fatalf("bad matcher %q in %s", part, expr)
					}
					sel.matchers = append(sel.matchers, matcher{m[1], m[2], m[3]})
				}
				i = end + 1
			}
			out = append(out, sel)
		default:
			i++
		}
	}
	return out
}

// splitMatchers splits matchers at the commas outside quotes.
func splitMatchers(s string) []string {
	var out []string
	inQuote, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			inQuote = !inQuote
		case ',':
			if !inQuote {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if strings.TrimSpace(s[start:]) != "" {
		out = append(out, s[start:])
	}
	return out
}

func TestGrafanaDashboardQueries(t *testing.T) {
	e := newEnv(t)
	loadBroker(t, e)
	// Churn too: a queue deleted, a channel and a connection closed.
	e.must(201, "PUT", "/api/queues/%2F/gone", map[string]any{})
	e.must(204, "DELETE", "/api/queues/%2F/gone", nil)

	ts := httptest.NewServer(e.srv.MetricsHandler())
	defer ts.Close()
	res, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	series := parseExposition(t, res.Body)
	cluster := ""
	for _, s := range series {
		if s.name == "rabbitmq_identity_info" {
			cluster = s.labels["rabbitmq_cluster"]
		}
	}
	if cluster == "" {
		t.Fatal("no rabbitmq_identity_info with a rabbitmq_cluster label")
	}
	vars := strings.NewReplacer("$rabbitmq_cluster", cluster, "$namespace", "")
	for _, q := range dashboardQueries {
		sels := selectors(t, vars.Replace(q.expr))
		if len(sels) == 0 {
			t.Fatalf("%s / %s: no selector found", q.dashboard, q.panel)
		}
		var empty []string
		for _, sel := range sels {
			found := false
			for _, s := range series {
				if s.name != sel.metric {
					continue
				}
				ok := true
				for _, m := range sel.matchers {
					ok = ok && m.matches(s.labels)
				}
				if ok {
					found = true
					break
				}
			}
			if !found {
				empty = append(empty, sel.String())
			}
		}
		switch {
		case q.missing == "" && len(empty) > 0:
			t.Errorf("%s / %s: no series for %s", q.dashboard, q.panel, strings.Join(empty, ", "))
		case q.missing != "" && len(empty) == 0:
			t.Errorf("%s / %s: now served; drop its missing note (%s)", q.dashboard, q.panel, q.missing)
		}
	}
}

// TestMetricsEndpoints: /metrics/per-object labels channel families by
// channel, /metrics/detailed serves the families asked for, of the
// vhosts asked for.
func TestMetricsEndpoints(t *testing.T) {
	e := newEnv(t)
	loadBroker(t, e)
	e.must(201, "PUT", "/api/vhosts/other", nil)
	e.must(201, "PUT", "/api/queues/other/oq", map[string]any{})
	ts := httptest.NewServer(e.srv.MetricsHandler())
	defer ts.Close()
	scrape := func(path string) []promSeries {
		t.Helper()
		res, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d", path, res.StatusCode)
		}
		return parseExposition(t, res.Body)
	}
	find := func(ss []promSeries, name string, labels map[string]string) []promSeries {
		var out []promSeries
		for _, s := range ss {
			if s.name != name {
				continue
			}
			ok := true
			for k, v := range labels {
				ok = ok && s.labels[k] == v
			}
			if ok {
				out = append(out, s)
			}
		}
		return out
	}
	po := scrape("/metrics/per-object")
	if got := find(po, "rabbitmq_channel_messages_published_total", map[string]string{"vhost": "/", "exchange": "lx"}); len(got) != 1 || got[0].labels["channel"] == "" {
		t.Errorf("per-object published = %v", got)
	}
	if got := find(po, "rabbitmq_raft_log_commit_index", map[string]string{"vhost": "/", "queue": "lqq"}); len(got) != 1 {
		t.Errorf("per-object raft commit index = %v", got)
	}
	agg := scrape("/metrics")
	if got := find(agg, "rabbitmq_channel_messages_published_total", nil); len(got) != 1 || len(got[0].labels) != 0 {
		t.Errorf("aggregated published = %v", got)
	}
	d := scrape("/metrics/detailed?family=queue_coarse_metrics&vhost=other")
	if got := find(d, "rabbitmq_detailed_queue_messages_ready", nil); len(got) != 1 || got[0].labels["queue"] != "oq" {
		t.Errorf("detailed queue_coarse_metrics of other = %v", got)
	}
	if got := find(d, "rabbitmq_detailed_channel_consumers", nil); len(got) != 0 {
		t.Errorf("detailed served a family not asked for: %v", got)
	}
	d = scrape("/metrics/detailed?family=channel_queue_metrics&family=connection_coarse_metrics")
	if got := find(d, "rabbitmq_detailed_channel_messages_acked_total", map[string]string{"vhost": "/"}); len(got) == 0 {
		t.Errorf("detailed channel_queue_metrics = %v", got)
	}
	if got := find(d, "rabbitmq_detailed_connection_incoming_bytes_total", nil); len(got) != 1 {
		t.Errorf("detailed connection_coarse_metrics = %v", got)
	}
	if res, _ := http.Get(ts.URL + "/metrics/detailed?family=nonsense"); res == nil || res.StatusCode != 400 {
		t.Errorf("unknown family: %v", res)
	}
}
