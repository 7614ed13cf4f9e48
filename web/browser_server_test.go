package web

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// canvasData reads what the console drew on the canvas id: its
// data-source, data-span and the points and last value of series key.
func (e *browserEnv) canvasData(id, key string) (source, span string, points int, last float64) {
	e.t.Helper()
	raw := eval[string](e, `(() => { const c = document.getElementById("`+id+`"); return c ? JSON.stringify(c.dataset) : "{}"; })()`)
	var d struct{ Source, Span, Points, Last string }
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		e.t.Fatalf("%s: %v", raw, err)
	}
	var pts map[string]int
	var lasts map[string]float64
	_ = json.Unmarshal([]byte(d.Points), &pts)
	_ = json.Unmarshal([]byte(d.Last), &lasts)
	return d.Source, d.Span, pts[key], lasts[key]
}

// The console against what the API serves beyond lists: rate history,
// node statistics, topic permissions.

// TestBrowserRateHistory: the overview and a queue's page draw the history
// the server keeps (the API's samples), over the range picked.
func TestBrowserRateHistory(t *testing.T) {
	e := newBrowserEnv(t, 90*time.Second)
	b := e.bs.Broker
	if err := b.DeclareQueue("/", "", broker.QueueSpec{Name: "h"}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := b.Publish("/", "", "", "h", amqp.Properties{}, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// The server's history at the page's first range (10 minutes at 5 s)
	// holds 5 messages twice.
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest("GET", e.base+"api/overview?lengths_age=600&lengths_incr=5", nil)
		req.SetBasicAuth("guest", "guest")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var o struct {
			QueueTotals struct {
				Details struct {
					Samples []struct{ Sample float64 } `json:"samples"`
				} `json:"messages_details"`
			} `json:"queue_totals"`
		}
		err = json.NewDecoder(res.Body).Decode(&o)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if s := o.QueueTotals.Details.Samples; len(s) >= 2 && s[0].Sample == 5 && s[1].Sample == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server kept no history of 5 messages: %+v", o)
		}
		time.Sleep(200 * time.Millisecond)
	}

	e.login("guest", "guest")
	e.holdRefresh()
	e.waitText("#total-messages", "5")
	source, span, points, last := e.canvasData("chart-depth", "total")
	if source != "server" || span != "600" || points < 2 || last != 5 {
		t.Errorf("overview depth chart: source %q span %q, %d points, last %v; want the server's history of the last 600 s, ending at 5", source, span, points, last)
	}
	for _, c := range []struct{ value, span string }{{"3600:60", "3600"}, {"86400:60", "86400"}, {"600:5", "600"}} {
		e.run("pick "+c.value, chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById("rates-range"); s.value = "`+c.value+`"; s.dispatchEvent(new Event("change")); })()`))
		e.waitEval("the chart's span", `document.getElementById("chart-rates").dataset.span || ""`, c.span)
	}

	// A queue's history is kept once its page asks for it.
	e.goTo("#/queue/%2F/h", "#queue-messages", "5")
	deadline = time.Now().Add(30 * time.Second)
	for {
		if source, _, points, last = e.canvasData("chart-queue-depth", "total"); source == "server" && points >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue depth chart: source %q, %d points", source, points)
		}
		time.Sleep(500 * time.Millisecond)
		e.tick("#queue-name")
	}
	if last != 5 {
		t.Errorf("queue depth chart ends at %v, want 5", last)
	}
}

// TestBrowserNodeAndTopicPermissions: the node panel shows the node's
// memory, disk, file descriptors and sockets against their limits, and an
// administrator sets and clears topic permissions.
func TestBrowserNodeAndTopicPermissions(t *testing.T) {
	e := newBrowserEnv(t, 60*time.Second)
	b := e.bs.Broker
	e.login("guest", "guest")
	e.holdRefresh()
	for _, g := range []struct{ id, pattern string }{
		{"node-memory", `^[0-9.]+ [KMGT]?i?B of [0-9.]+ [KMGT]?i?B$`},
		{"node-disk", `^[0-9.]+ [KMGT]?i?B \(limit [0-9.]+ [KMGT]?i?B\)$`},
		{"node-fds", `^[0-9,]+ of [0-9,]+$`},
		{"node-sockets", `^[0-9,]+ of [0-9,]+$`},
	} {
		e.waitEval(g.id, `(() => { const v = document.querySelector("#`+g.id+` .v"); return v && /`+g.pattern+`/.test(v.innerText) ? "shown" : (v ? v.innerText : ""); })()`, "shown")
	}

	e.goTo("#/admin", `#users-table tr[data-name="guest"] td:nth-child(1)`, "guest")
	e.set("#tperm-user", "guest")
	e.set("#tperm-exchange", "amq.topic")
	e.set("#tperm-write", `^orders\.`)
	e.set("#tperm-read", ".*")
	e.click("#tperm-set")
	e.waitText(`#topic-permissions-table tr[data-user="guest"] td:nth-child(4)`, `^orders\.`)
	if tps := b.TopicPermissions(); len(tps) != 1 || tps[0].Exchange != "amq.topic" || tps[0].Write != `^orders\.` || tps[0].Read != ".*" {
		t.Fatalf("topic permissions %+v", tps)
	}
	e.click(`#topic-permissions-table tr[data-user="guest"] button`)
	e.waitText("#topic-permissions-table tbody td", "Nothing here yet.")
	if tps := b.TopicPermissions(); len(tps) != 0 {
		t.Errorf("topic permissions after clearing: %+v", tps)
	}
}
