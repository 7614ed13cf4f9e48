package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCtlSuperStreams(t *testing.T) {
	e := newCtlEnv(t)
	e.must("add_super_stream", "--partitions", "3", "--max-age", "7D", "invoices")
	e.must("add_super_stream", "--binding-keys", "amer,emea,apac", "--hash-routing", "orders")

	var qs []map[string]any
	if err := json.Unmarshal([]byte(e.must("list_queues", "--json")), &qs); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, q := range qs {
		names[q["name"].(string)] = true
		if q["type"] != "stream" {
			t.Errorf("queue %v has type %v", q["name"], q["type"])
		}
	}
	for _, n := range []string{"invoices-0", "invoices-1", "invoices-2", "orders-amer", "orders-emea", "orders-apac"} {
		if !names[n] {
			t.Errorf("missing partition %s in %v", n, names)
		}
	}
	out := e.must("list_bindings", "--json")
	var bs []map[string]any
	if err := json.Unmarshal([]byte(out), &bs); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, b := range bs {
		if b["source"] == "invoices" {
			found++
			args := b["arguments"].(map[string]any)
			if b["destination"] != "invoices-"+b["routing_key"].(string) || args["x-stream-partition-order"] == nil {
				t.Errorf("binding %v", b)
			}
		}
	}
	if found != 3 {
		t.Errorf("%d bindings from invoices:\n%s", found, out)
	}
	if out := e.must("list_exchanges", "--json"); !strings.Contains(out, `"x-super-stream": true`) {
		t.Errorf("exchanges:\n%s", out)
	}
	if _, err := e.run("", "add_super_stream", "--partitions", "2", "--binding-keys", "a", "bad"); err == nil {
		t.Error("both --partitions and --binding-keys were accepted")
	}
	if _, err := e.run("", "add_super_stream", "bad"); err == nil {
		t.Error("a super stream without partitions was accepted")
	}
	e.must("delete_super_stream", "invoices")
	if out := e.must("list_queues"); strings.Contains(out, "invoices-") {
		t.Errorf("partitions left after delete_super_stream:\n%s", out)
	}
	if out := e.must("list_exchanges"); strings.Contains(out, "invoices") {
		t.Errorf("exchange left after delete_super_stream:\n%s", out)
	}
}

func TestCtlStreamStatus(t *testing.T) {
	e := newCtlEnv(t)
	e.must("add_super_stream", "--partitions", "1", "st")
	out := e.must("stream_status", "st-0")
	for _, want := range []string{"first_offset\t0", "next_offset\t0", "committed_offset\t0"} {
		if !strings.Contains(out, want) {
			t.Errorf("stream_status lacks %q:\n%s", want, out)
		}
	}
	if _, err := e.run("", "stream_status", "st"); err == nil {
		t.Error("stream_status of a missing queue succeeded")
	}
}
