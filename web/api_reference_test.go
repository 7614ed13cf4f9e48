package web

import (
	"context"
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The keys and JSON types of RabbitMQ 3.10's management API objects,
// captured from a real node under load (testdata/README.md), are checked
// against Warren's objects under the same load.

// opaqueKeys are objects whose keys depend on the data (arguments,
// client properties, ...) or on RabbitMQ's internals: compared as
// objects, not key by key.
var opaqueKeys = map[string]bool{
	"client_properties": true, "arguments": true, "capabilities": true, "effective_policy_definition": true,
	"backing_queue_status": true, "garbage_collection": true, "metadata": true, "applications": true,
	"auth_mechanisms": true, "exchange_types": true, "contexts": true, "listeners": true, "memory": true,
	"cluster_links": true, "config_files": true, "log_files": true, "enabled_plugins": true,
	"sample_retention_policies": true, "churn_rates": true, "statistics_db_event_queue": true,
	"exclusive_consumer_tag": true, "slave_nodes": true, "synchronised_slave_nodes": true, "members": true,
	"online": true, "recoverable_slaves": true, "limits": true, "metrics_gc_queue_length": true,
	"ra_open_file_metrics": true, "partitions": true, "db_dir": true, "samples": true,
	"single_active_consumer_tag": true, "head_message_timestamp": true, "idle_since": true, "policy": true,
	"operator_policy": true, "user_provided_name": true, "owner_pid_details": true, "tags": true,
	"description": true, "default_queue_type": true, "cluster_state": true, "leader": true, "protocol": true,
}

// expandedDetails are the "_details" objects compared key by key (the
// others are rate objects, checked by details_with_samples).
var expandedDetails = map[string]bool{"connection_details": true, "channel_details": true, "peer_details": true, "queue": true}

// notServed are RabbitMQ's keys Warren does not serve, and why.
var notServed = map[string]string{
	"overview.release_series_support_status": "RabbitMQ's release series",
	"overview.statistics_db_event_queue":     "RabbitMQ's statistics database",
	"overview.message_stats.disk_reads":      "RabbitMQ's message store counters",
	"overview.message_stats.disk_writes":     "RabbitMQ's message store counters",

	"nodes.applications":             "Erlang applications",
	"nodes.config_files":             "RabbitMQ's config files",
	"nodes.log_files":                "Warren logs to its standard output",
	"nodes.context_switches":         "Erlang VM statistic",
	"nodes.gc_bytes_reclaimed":       "Erlang VM statistic",
	"nodes.gc_num_details":           "gc_num is served without a rate",
	"nodes.io_":                      "Erlang file I/O statistics",
	"nodes.mnesia_":                  "Mnesia",
	"nodes.msg_store_":               "RabbitMQ's message store",
	"nodes.queue_index_":             "RabbitMQ's queue index",
	"nodes.metrics_gc_queue_length":  "RabbitMQ's statistics database",
	"nodes.ra_open_file_metrics":     "Ra (Raft) file handles",
	"nodes.net_ticktime":             "Erlang distribution",
	"nodes.proc_total":               "Go has no goroutine limit",
	"connections.garbage_collection": "Erlang process",
	"connections.reductions":         "Erlang process",
	"channels.garbage_collection":    "Erlang process",
	"channels.reductions":            "Erlang process",
	"channels.messages_uncommitted":  "transaction state is the channel reader's own",
	"channels.acks_uncommitted":      "transaction state is the channel reader's own",
	"channels.pending_raft_commands": "not tracked",
	"queues.backing_queue_status":    "RabbitMQ's classic queue internals",
	"queues.garbage_collection":      "Erlang process",
	"queues.reductions":              "Erlang process",
	"queues.open_files":              "Ra (Raft) file handles",
}

func excluded(endpoint, key string) bool {
	for k := range notServed {
		ep, prefix, _ := strings.Cut(k, ".")
		if ep == endpoint && (key == prefix || strings.HasPrefix(key, prefix+"_") || strings.HasPrefix(key, prefix+".") || strings.HasSuffix(prefix, "_") && strings.HasPrefix(key, prefix)) {
			return true
		}
	}
	return false
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	}
	return "object"
}

// flatKeys records the keys of obj (dotted paths) and their types, as
// the reference was made.
func flatKeys(obj map[string]any, prefix string, out map[string]string) {
	for k, v := range obj {
		p := prefix + k
		out[p] = jsonType(v)
		m, isObj := v.(map[string]any)
		if !isObj || opaqueKeys[k] {
			continue
		}
		if strings.HasSuffix(k, "_details") && !expandedDetails[k] {
			continue
		}
		if k == "queue" || !strings.HasSuffix(k, "_details") || expandedDetails[k] {
			flatKeys(m, p+".", out)
		}
	}
}

// loadBroker runs RabbitMQ's reference load against e's broker: a
// publisher with confirms to a topic exchange bound to a classic and a
// quorum queue, a consumer with manual acks on the classic one, and
// basic.get on the quorum one. It returns when each has happened, and
// stops with the test.
func loadBroker(t *testing.T, e *env) {
	t.Helper()
	conn, err := amqp091.DialConfig(e.bs.URL, amqp091.Config{Properties: amqp091.Table{"connection_name": "loadgen"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	pub, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(pub.Confirm(false))
	confirms := pub.NotifyPublish(make(chan amqp091.Confirmation, 100))
	must(pub.ExchangeDeclare("lx", "topic", true, false, false, false, nil))
	_, err = pub.QueueDeclare("lq", true, false, false, false, nil)
	must(err)
	_, err = pub.QueueDeclare("lqq", true, false, false, false, amqp091.Table{"x-queue-type": "quorum"})
	must(err)
	must(pub.QueueBind("lq", "#", "lx", false, nil))
	must(pub.QueueBind("lqq", "k.#", "lx", false, nil))
	cons, err := conn.Channel()
	must(err)
	must(cons.Qos(10, 0, false))
	msgs, err := cons.Consume("lq", "ctag", false, false, false, false, nil)
	must(err)
	for i := range 20 {
		must(pub.PublishWithContext(context.Background(), "lx", "k.a", false, false, amqp091.Publishing{Body: []byte("hello")}))
		if c := <-confirms; !c.Ack {
			t.Fatalf("publish %d nacked", i)
		}
		(<-msgs).Ack(false)
	}
	// An unroutable one, dropped.
	must(pub.PublishWithContext(context.Background(), "amq.direct", "nowhere", false, false, amqp091.Publishing{Body: []byte("x")}))
	<-confirms
	getter, err := conn.Channel()
	must(err)
	m, ok, err := getter.Get("lqq", false)
	must(err)
	if !ok {
		t.Fatal("basic.get on lqq found nothing")
	}
	must(m.Ack(false))
	_, _, err = getter.Get("lqq", true)
	must(err)
	// Every counter is read by snapshots: wait until the ack is in.
	waitFor(t, "the acks in the counters", func() bool {
		q := e.must(200, "GET", "/api/queues/%2F/lq", nil).obj(t)
		return q["message_stats"].(map[string]any)["ack"] == 20.0
	})
}

func TestAPIKeysAsRabbitMQ(t *testing.T) {
	data, err := os.ReadFile("testdata/rabbitmq-3.10-api-keys.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref map[string]json.RawMessage
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	loadBroker(t, e)
	now := time.Now()
	e.srv.sample(now.Add(-5 * time.Second))
	e.srv.sample(now)
	endpoints := []string{"overview", "nodes", "connections", "channels", "exchanges", "queues", "vhosts", "consumers", "bindings"}
	for _, ep := range endpoints {
		var want map[string]string
		if err := json.Unmarshal(ref[ep], &want); err != nil {
			t.Fatalf("%s: %v", ep, err)
		}
		got := make(map[string]string)
		switch v := e.must(200, "GET", "/api/"+ep, nil).json(t).(type) {
		case map[string]any:
			flatKeys(v, "", got)
		case []any:
			for _, o := range v {
				flatKeys(o.(map[string]any), "", got)
			}
		}
		var missing, wrong []string
		for k, typ := range want {
			if excluded(ep, k) {
				continue
			}
			g, ok := got[k]
			switch {
			case !ok:
				missing = append(missing, k)
			case typ != "null" && g != "null" && g != typ:
				wrong = append(wrong, k+": "+g+", RabbitMQ "+typ)
			}
		}
		sort.Strings(missing)
		sort.Strings(wrong)
		if len(missing) > 0 {
			t.Errorf("/api/%s lacks RabbitMQ's %s", ep, strings.Join(missing, ", "))
		}
		if len(wrong) > 0 {
			t.Errorf("/api/%s types differ: %s", ep, strings.Join(wrong, "; "))
		}
	}

	// A "_details" object with samples, as msg_rates_age and the like ask.
	var want map[string]string
	if err := json.Unmarshal(ref["details_with_samples"], &want); err != nil {
		t.Fatal(err)
	}
	q := e.must(200, "GET", "/api/queues/%2F/lq?lengths_age=60&lengths_incr=5&msg_rates_age=60&msg_rates_incr=5", nil).obj(t)
	for _, d := range []map[string]any{q["messages_details"].(map[string]any), q["message_stats"].(map[string]any)["publish_details"].(map[string]any)} {
		got := map[string]string{}
		for k, v := range d {
			got[k] = jsonType(v)
		}
		samples, _ := d["samples"].([]any)
		if len(samples) == 0 {
			t.Fatalf("no samples in %v", d)
		}
		for k, v := range samples[0].(map[string]any) {
			got["samples[]."+k] = jsonType(v)
		}
		for k, typ := range want {
			if got[k] != typ {
				t.Errorf("details %s: %q, RabbitMQ %q (%v)", k, got[k], typ, d)
			}
		}
	}
}
