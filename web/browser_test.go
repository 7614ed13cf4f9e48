package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// The console driven by a real browser: Debian's headless Chromium through
// chromedp. Without chromium the tests skip, unless WARREN_INTEROP=1
// (scripts/test.sh), which makes its absence a failure. Screenshots go to
// $WARREN_ARTIFACTS (default: the test's temp dir).

const chromiumPath = "/usr/bin/chromium"

// browserEnv is a broker, its management server on 127.0.0.1:0 and a
// browser tab.
type browserEnv struct {
	t         *testing.T
	bs        *brokertest.Server
	base      string
	ctx       context.Context
	artifacts string
}

func newBrowserEnv(t *testing.T, timeout time.Duration) *browserEnv {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("WARREN_INTEROP") == "1" {
			t.Fatalf("%s is required (WARREN_INTEROP=1): %v", chromiumPath, err)
		}
		t.Skipf("SKIPPED: %s is not installed; set WARREN_INTEROP=1 to make that a failure, or run bash scripts/test.sh, which installs it and sets it", chromiumPath)
	}
	bs := brokertest.Start(t, nil)
	srv, err := New(Config{Addr: "127.0.0.1:0", MetricsAddr: "-", SampleInterval: time.Second, Logger: zaptest.NewLogger(t)}, bs.Broker)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	artifacts := os.Getenv("WARREN_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	} else if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox,
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	ctx, cancelTimeout := context.WithTimeout(bctx, timeout)
	t.Cleanup(func() {
		cancelTimeout()
		cancelBrowser()
		cancelAlloc()
	})
	return &browserEnv{t: t, bs: bs, base: "http://" + srv.Addr().String() + "/", ctx: ctx, artifacts: artifacts}
}

func (e *browserEnv) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	e.t.Helper()
	if err := chromedp.Do(e.ctx, actions...); err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

// screenshot saves the page as name.png among the artifacts.
func (e *browserEnv) screenshot(name string) {
	e.t.Helper()
	e.run("scroll to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	png, err := chromedp.Run(e.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		e.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(e.artifacts, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.t.Logf("screenshot: %s", path)
}

// waitText polls the text of the element sel until it is want. It reads
// the text in the page with one script (querySelector, textContent) so
// that a re-render replacing the element between a query and a read is
// just another poll, not an error.
func (e *browserEnv) waitText(sel, want string) {
	e.t.Helper()
	quoted, _ := json.Marshal(sel)
	e.waitEval(sel, `(() => { const n = document.querySelector(`+string(quoted)+`); return n ? n.innerText : ""; })()`, want)
}

// waitEval polls script until its value, trimmed, is want.
func (e *browserEnv) waitEval(what, script, want string) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got string
	var err error
	for time.Now().Before(deadline) {
		if got, err = chromedp.Run(e.ctx, chromedp.Evaluate[string](script)); err == nil && strings.TrimSpace(got) == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("%s: %q, want %q (last error: %v)", what, got, want, err)
}

func (e *browserEnv) login(user, pass string) {
	e.t.Helper()
	e.run("log in",
		chromedp.Navigate(e.base),
		chromedp.WaitVisible(chromedp.ID("login-user")),
		chromedp.SendKeys(chromedp.ID("login-user"), user),
		chromedp.SendKeys(chromedp.ID("login-pass"), pass),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("app-view")),
	)
	e.waitText("#whoami-name", user)
}

func TestBrowserConsole(t *testing.T) {
	e := newBrowserEnv(t, 60*time.Second)

	// A client declares a queue and publishes to it over AMQP, and stays
	// connected.
	conn, err := amqp091.DialConfig(e.bs.URL, amqp091.Config{Properties: amqp091.Table{"connection_name": "browser-test-client"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("browser-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := ch.Publish("", "browser-q", false, false, amqp091.Publishing{Body: fmt.Appendf(nil, "from amqp %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.bs.Broker.SetPolicy("/", "limits", "^browser-", "queues", 1, map[string]any{"max-length": int64(1000)}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "3 messages in browser-q", func() bool {
		q, err := e.bs.Broker.Queue("/", "browser-q")
		return err == nil && q.Ready == 3
	})

	// Logging in with a wrong password fails, then the right one works.
	e.run("failed login",
		chromedp.Navigate(e.base),
		chromedp.WaitVisible(chromedp.ID("login-user")),
		chromedp.SendKeys(chromedp.ID("login-user"), "guest"),
		chromedp.SendKeys(chromedp.ID("login-pass"), "nope"),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("login-error")),
	)
	e.login("guest", "guest")
	// No periodic refresh: a re-render between finding a button and
	// clicking it would lose the click. The pages still re-render after
	// each action.
	e.run("stop refreshing", chromedp.Evaluate[chromedp.Void](`clearInterval(state.timer); window.setInterval = () => 0`))
	e.waitText("#total-queues", "1")
	e.screenshot("overview")

	// The queue appears on the queues page with its message count.
	row := `#queue-table tr[data-name="browser-q"]`
	e.run("queues page",
		chromedp.Click(chromedp.ID("nav-queues")),
		chromedp.WaitVisible(chromedp.CSS(row)),
	)
	e.waitText(row+" td:nth-child(6)", "3")
	e.screenshot("queues")

	// Publish a message from the queue's page and get the four back.
	e.run("queue page",
		chromedp.Click(chromedp.CSS(row+" a")),
		chromedp.WaitVisible(chromedp.ID("queue-name")),
	)
	e.waitText("#queue-messages", "3")
	e.waitText("#queue-policy", "limits")
	e.waitText("#queue-effective-policy", `{"max-length":1000}`)
	e.run("publish",
		chromedp.SendKeys(chromedp.ID("qpublish-payload"), "hello from the browser"),
		chromedp.Click(chromedp.ID("qpublish-submit")),
	)
	e.waitText("#queue-messages", "4")
	e.run("get",
		chromedp.SetValue(chromedp.ID("get-ackmode"), "ack_requeue_false"),
		chromedp.SetValue(chromedp.ID("get-count"), "4"),
		chromedp.Click(chromedp.ID("get-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#get-result .message[data-index="3"]`)),
	)
	e.waitText(`#get-result .message[data-index="3"] pre`, "hello from the browser")
	e.waitText(`#get-result .message[data-index="0"] pre`, "from amqp 0")
	e.waitText("#queue-messages", "0")
	e.screenshot("queue")

	// Close the client's connection from the connections page.
	closeBtn := `#connections-table button[data-action="close"]`
	e.run("connections page",
		chromedp.Click(chromedp.ID("nav-connections")),
		chromedp.WaitVisible(chromedp.CSS(closeBtn)),
	)
	e.waitText(`#connections-table tbody tr td:nth-child(4)`, "browser-test-client")
	e.screenshot("connections")
	e.run("close connection",
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.Click(chromedp.CSS(closeBtn)),
	)
	select {
	case err := <-closed:
		if err == nil || err.Code != amqp091.ConnectionForced {
			t.Fatalf("client saw close %v, want 320 CONNECTION_FORCED", err)
		}
		t.Logf("client saw: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the client's connection was not closed")
	}
	waitFor(t, "the connection to go", func() bool { return len(e.bs.Broker.Connections()) == 0 })
	e.run("connections page again",
		chromedp.Click(chromedp.ID("nav-overview")),
		chromedp.WaitVisible(chromedp.ID("total-queues")),
		chromedp.Click(chromedp.ID("nav-connections")),
	)
	e.waitText(`#connections-table tbody tr td`, "Nothing here yet.")
}

// TestBrowserQueuesPageLoad measures how long the console's queues page
// takes to show its table with many queues (WARREN_BROWSER_QUEUES, default
// 10,000). It only runs when that variable is set.
func TestBrowserQueuesPageLoad(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("WARREN_BROWSER_QUEUES"))
	if n <= 0 {
		t.Skip("set WARREN_BROWSER_QUEUES=10000 to measure")
	}
	e := newBrowserEnv(t, 5*time.Minute)
	declareQueues(t, e.bs.Broker, n)
	e.login("guest", "guest")
	last := fmt.Sprintf(`#queue-table tr[data-name="q%05d"]`, 49) // the first page holds 50
	for i := range 3 {
		e.run("overview", chromedp.Navigate(e.base+"#/overview"), chromedp.WaitVisible(chromedp.ID("total-queues")))
		start := time.Now()
		e.run("queues page",
			chromedp.Click(chromedp.ID("nav-queues")),
			chromedp.WaitVisible(chromedp.CSS(last)),
		)
		t.Logf("run %d: queues page with %d queues: table shown after %v", i+1, n, time.Since(start).Round(time.Millisecond))
	}
	e.run("count", chromedp.WaitVisible(chromedp.ID("queue-count")))
	if got, err := chromedp.Run(e.ctx, chromedp.Text(chromedp.ID("queue-count"))); err != nil || !strings.HasSuffix(got, " queues") || !strings.Contains(strings.ReplaceAll(got, ",", ""), fmt.Sprintf("%d of %d", n, n)) {
		t.Errorf("queue count %q, %v", got, err)
	}
	e.screenshot("queues-10k")
}

// declareQueues declares q00000, q00001, ... on vhost / through the broker.
func declareQueues(t testing.TB, b *broker.Broker, n int) {
	t.Helper()
	for i := range n {
		if err := b.DeclareQueue("/", "", broker.QueueSpec{Name: fmt.Sprintf("q%05d", i)}); err != nil {
			t.Fatal(errors.Join(fmt.Errorf("queue %d", i), err))
		}
	}
}

// TestAuthFromScript: a script's 401 (X-Requested-With: XMLHttpRequest)
// carries no WWW-Authenticate, so a browser shows no login dialog over the
// console's own.
func TestAuthFromScript(t *testing.T) {
	e := newEnv(t)
	req, _ := http.NewRequest("GET", e.ts.URL+"/api/whoami", nil)
	req.SetBasicAuth("guest", "wrong")
	req.Header.Set("X-Requested-With", "XMLHttpRequest")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 || res.Header.Get("WWW-Authenticate") != "" {
		t.Errorf("status %d, WWW-Authenticate %q", res.StatusCode, res.Header.Get("WWW-Authenticate"))
	}
}

// eval runs a script in the page and returns its result.
func eval[T any](e *browserEnv, script string) T {
	e.t.Helper()
	v, err := chromedp.Run(e.ctx, chromedp.Evaluate[T](script))
	if err != nil {
		e.t.Fatalf("evaluate %s: %v", script, err)
	}
	return v
}

// holdRefresh keeps the page's periodic refresh from firing by itself:
// the test fires it with tick, so that a refresh never lands between
// finding an element and clicking it.
func (e *browserEnv) holdRefresh() {
	e.t.Helper()
	e.run("hold the refresh", chromedp.Evaluate[chromedp.Void](`
		clearInterval(state.timer);
		window.setInterval = (f) => { window.testTick = f; return 0; };`))
}

// tick fires the page's refresh once, as its 5 s timer does, and waits
// until the element sel has been rendered anew.
func (e *browserEnv) tick(sel string) {
	e.t.Helper()
	quoted, _ := json.Marshal(sel)
	e.run("mark and tick", chromedp.Evaluate[chromedp.Void](`document.querySelector(`+string(quoted)+`).dataset.stale = "1"; window.testTick();`))
	e.waitEval(sel+" rendered anew", `(() => { const n = document.querySelector(`+string(quoted)+`); return n && !n.dataset.stale ? "fresh" : "stale"; })()`, "fresh")
}

// goTo opens a console route (the part after #) and waits for the element
// sel to show want.
func (e *browserEnv) goTo(hash, sel, want string) {
	e.t.Helper()
	e.run("go to "+hash, chromedp.Evaluate[chromedp.Void](`location.hash = `+strconv.Quote(hash)))
	e.waitText(sel, want)
}

// TestBrowserQueuePageFollowsRoute: moving from one queue's page to
// another's starts with the new queue's forms and no Get results, keeps
// what the user chose across the periodic refresh, and a queue that does
// not exist shows as such, with no buttons acting on another queue.
func TestBrowserQueuePageFollowsRoute(t *testing.T) {
	e := newBrowserEnv(t, 60*time.Second)
	b := e.bs.Broker
	for _, name := range []string{"first", "orders"} {
		if err := b.DeclareQueue("/", "", broker.QueueSpec{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Publish("/", "", "", "first", amqp.Properties{}, []byte("kept in first")); err != nil {
		t.Fatal(err)
	}
	e.login("guest", "guest")
	e.holdRefresh()

	// A Get on "first" shows its message.
	e.goTo("#/queue/%2F/first", "#queue-name", "first")
	e.run("get from first",
		chromedp.Click(chromedp.ID("get-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#get-result .message[data-index="0"]`)),
	)

	// On "orders" the form and the results are those of "orders".
	e.goTo("#/queue/%2F/orders", "#queue-name", "orders")
	if n := eval[int](e, `document.querySelectorAll("#get-result .message").length`); n != 0 {
		t.Errorf("orders' page shows %d messages got from first", n)
	}
	if key := eval[string](e, `document.getElementById("qpublish-key").value`); key != "orders" {
		t.Errorf("orders' publish form has routing key %q, want orders", key)
	}

	// The delivery mode chosen survives a refresh and is what is published.
	e.run("choose persistent", chromedp.SetValue(chromedp.ID("qpublish-mode"), "2"))
	e.tick("#queue-name")
	if mode := eval[string](e, `document.getElementById("qpublish-mode").value`); mode != "2" {
		t.Errorf("delivery mode after a refresh is %q, want 2 (persistent)", mode)
	}
	e.run("publish from orders",
		chromedp.SendKeys(chromedp.ID("qpublish-payload"), "for orders"),
		chromedp.Click(chromedp.ID("qpublish-submit")),
	)
	waitFor(t, "the published message", func() bool {
		f, _ := b.Queue("/", "first")
		o, _ := b.Queue("/", "orders")
		return f.Ready+o.Ready == 2
	})
	if o, _ := b.Queue("/", "orders"); o.Ready != 1 {
		t.Fatalf("orders has %d messages, want the 1 published from its page", o.Ready)
	}
	got, err := b.Get("/", "", "orders", 1, false)
	if err != nil || len(got) != 1 {
		t.Fatalf("get from orders: %v, %v", got, err)
	}
	if string(got[0].Body) != "for orders" || got[0].Properties.DeliveryMode != 2 {
		t.Errorf("orders got %q with delivery mode %d, want \"for orders\", 2", got[0].Body, got[0].Properties.DeliveryMode)
	}

	// A queue that does not exist is not shown as the previous one.
	e.goTo("#/queue/%2F/missing", "#not-found", "Queue missing in virtual host / does not exist.")
	if n := eval[int](e, `document.querySelectorAll("#purge-btn, #delete-btn, #queue-name").length`); n != 0 {
		t.Errorf("a missing queue's page has %d of the previous queue's name and buttons", n)
	}
}

// fill types into the element sel (firing input events, as a person's
// typing does).
func (e *browserEnv) fill(sel, text string) {
	e.t.Helper()
	e.run("fill "+sel, chromedp.SendKeys(chromedp.CSS(sel), text))
}

// set sets the value of the input or select sel.
func (e *browserEnv) set(sel, value string) {
	e.t.Helper()
	e.run("set "+sel, chromedp.SetValue(chromedp.CSS(sel), value))
}

// click clicks sel.
func (e *browserEnv) click(sel string) {
	e.t.Helper()
	e.run("click "+sel, chromedp.Click(chromedp.CSS(sel)))
}

// act clicks sel, a button whose action reports done with the flash text
// ok, and waits for that report. The action shows its page anew once the
// API has answered, which may be after the broker holds its change: going
// on to another page or form before then let that late re-render replace
// the inputs being typed into.
func (e *browserEnv) act(sel, ok string) {
	e.t.Helper()
	e.run("clear the flash", chromedp.Evaluate[chromedp.Void](`document.getElementById("flash").textContent = ""`))
	e.click(sel)
	e.waitText("#flash", ok)
}

// arg fills row n (from 1) of the arguments editor id.
func (e *browserEnv) arg(id string, n int, key, value, typ string) {
	e.t.Helper()
	row := fmt.Sprintf("#%s .arg-row:nth-child(%d) ", id, n)
	e.fill(row+".arg-key", key)
	e.set(row+".arg-value", value)
	e.set(row+".arg-type", typ)
}

// TestBrowserConsolePages drives the console's forms and pages: the login
// page's reasons, the node panel, queue and exchange forms with type and
// arguments, policies and operator policies, publish with properties and
// headers and get showing them, connection and channel pages, user tags.
func TestBrowserConsolePages(t *testing.T) {
	e := newBrowserEnv(t, 90*time.Second)
	b := e.bs.Broker
	if err := b.PutUser("app", "app-pass", nil); err != nil {
		t.Fatal(err)
	}

	// The login page says why a login was refused.
	e.run("open", chromedp.Navigate(e.base), chromedp.WaitVisible(chromedp.ID("login-user")))
	e.fill("#login-user", "app")
	e.fill("#login-pass", "app-pass")
	e.click("#login-submit")
	e.waitText("#login-error", "Login refused: Not management user")
	e.set("#login-user", "guest")
	e.set("#login-pass", "wrong")
	e.click("#login-submit")
	e.waitText("#login-error", "Login refused: Login failed")
	e.set("#login-pass", "guest")
	e.click("#login-submit")
	e.waitText("#whoami-name", "guest")
	e.holdRefresh()

	// The overview has a panel for each node, and the current rates
	// beside its charts.
	e.waitEval("node panels", `String(document.querySelectorAll("#nodes .node[data-name]").length)`, "1")
	e.waitEval("uptime", `document.querySelector("#node-uptime .v").innerText.endsWith("s") ? "shown" : ""`, "shown")
	e.waitText("#legend-rates-publish", "0.0/s")
	e.waitText("#legend-depth-ready", "0")

	// A quorum queue with a typed argument, from the queues page.
	e.goTo("#/queues", "#queue-count", "0 of 0 queues")
	e.set("#queue-new-type", "quorum")
	e.fill("#queue-new-name", "q-quorum")
	e.arg("queue-new-args", 1, "x-max-length", "10", "number")
	e.act("#queue-create", "Queue created")
	waitFor(t, "the quorum queue", func() bool { _, err := b.Queue("/", "q-quorum"); return err == nil })
	q, _ := b.Queue("/", "q-quorum")
	if q.Type != "quorum" || fmt.Sprint(q.Arguments["x-max-length"]) != "10" {
		t.Errorf("queue type %q arguments %v, want quorum with x-max-length 10", q.Type, q.Arguments)
	}

	// A topic exchange with an alternate exchange.
	e.goTo("#/exchanges", `#exchange-table tr[data-name="amq.topic"] td:nth-child(3)`, "topic")
	e.fill("#exchange-new-name", "x-events")
	e.set("#exchange-new-type", "topic")
	e.arg("exchange-new-args", 1, "alternate-exchange", "amq.fanout", "string")
	e.act("#exchange-create", "Exchange created")
	waitFor(t, "the exchange", func() bool { _, err := b.Exchange("/", "x-events"); return err == nil })
	if x, _ := b.Exchange("/", "x-events"); x.Type != "topic" || x.Arguments["alternate-exchange"] != "amq.fanout" {
		t.Errorf("exchange %+v, want topic with alternate-exchange amq.fanout", x)
	}

	// A policy and an operator policy from their pages.
	for _, c := range []struct {
		page, prefix, name string
		operator           bool
	}{{"#/policies", "policy", "ttl", false}, {"#/operator-policies", "oppolicy", "cap", true}} {
		e.goTo(c.page, "#"+c.prefix+"-table tbody td", "Nothing here yet.")
		e.fill("#"+c.prefix+"-new-name", c.name)
		e.fill("#"+c.prefix+"-new-pattern", "^q-")
		e.arg(c.prefix+"-new-definition", 1, "max-length", "5", "number")
		e.click("#" + c.prefix + "-create")
		e.waitText("#"+c.prefix+`-table tr[data-name="`+c.name+`"] td:nth-child(5)`, `{"max-length":5}`)
		ps, _ := b.Policies("/")
		found := false
		for _, p := range ps {
			if p.Name == c.name && p.Operator == c.operator && p.Pattern == "^q-" && fmt.Sprint(p.Definition["max-length"]) == "5" {
				found = true
			}
		}
		if !found {
			t.Errorf("policy %s (operator %v) not stored as set: %+v", c.name, c.operator, ps)
		}
	}

	// Publish with properties and headers; Get shows them.
	e.goTo("#/queue/%2F/q-quorum", "#queue-name", "q-quorum")
	e.set("#qpublish-mode", "2")
	e.fill("#qpublish-content-type", "application/json")
	e.fill("#qpublish-correlation-id", "c-1")
	e.arg("qpublish-headers", 1, "x-trace", "abc", "string")
	e.arg("qpublish-headers", 2, "x-attempt", "3", "number")
	e.fill("#qpublish-payload", `{"n":1}`)
	e.click("#qpublish-submit")
	e.waitText("#queue-messages", "1")
	e.click("#get-submit")
	e.waitText("#msg-0-content_type", "application/json")
	e.waitText("#msg-0-correlation_id", "c-1")
	e.waitText("#msg-0-delivery_mode", "2")
	e.waitText(`#msg-0-headers tr[data-header="x-trace"] td:nth-child(2)`, "abc")
	e.waitText(`#msg-0-headers tr[data-header="x-attempt"] td:nth-child(2)`, "3")
	got, err := b.Get("/", "", "q-quorum", 1, true)
	if err != nil || len(got) != 1 {
		t.Fatalf("get: %v %v", got, err)
	}
	if p := got[0].Properties; p.ContentType != "application/json" || p.CorrelationID != "c-1" || p.Headers["x-trace"] != "abc" || fmt.Sprint(p.Headers["x-attempt"]) != "3" {
		t.Errorf("published properties %+v", p)
	}

	// A client's connection and channel have pages of their own.
	conn, err := amqp091.DialConfig(e.bs.URL, amqp091.Config{Properties: amqp091.Table{"connection_name": "detail-client"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(7, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume("q-quorum", "detail-consumer", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	e.goTo("#/connections", "#connections-table tbody tr td:nth-child(4)", "detail-client")
	e.click("#connections-table tbody tr td:nth-child(1) a")
	e.waitText("#connection-name", "detail-client")
	e.waitText("#connection-channels", "1")
	e.waitEval("client properties", `(() => { const dt = [...document.querySelectorAll("#connection-client dt")].find((n) => n.innerText === "connection_name"); return dt ? dt.nextElementSibling.innerText : ""; })()`, "detail-client")
	e.click("#connection-channels-table tbody tr td:nth-child(1) a")
	e.waitText("#channel-prefetch", "7")
	e.waitText("#channel-consumers-table tbody tr td:nth-child(1)", "detail-consumer")

	// An administrator sets a user's tags; the password stays.
	e.goTo("#/admin", `#users-table tr[data-name="app"] td:nth-child(1)`, "app")
	e.set("#user-tags-user", "app")
	e.fill("#user-tags-tags", "monitoring")
	e.click("#user-tags-set")
	e.waitText(`#users-table tr[data-name="app"] td:nth-child(2)`, "monitoring")
	if u, ok := b.Authenticate("app", "app-pass"); !ok || len(u.Tags) != 1 || u.Tags[0] != "monitoring" {
		t.Errorf("after setting tags: user %+v, authenticated %v", u, ok)
	}

	// Now a monitoring user, app logs in; the admin page is not offered,
	// and at its address says why it cannot be shown.
	e.click("#logout")
	e.run("login form", chromedp.WaitVisible(chromedp.ID("login-user")))
	e.set("#login-user", "app")
	e.set("#login-pass", "app-pass")
	e.click("#login-submit")
	e.waitText("#whoami-name", "app")
	if hidden := eval[bool](e, `document.getElementById("nav-admin").hidden`); !hidden {
		t.Error("the admin link is offered to a monitoring user")
	}
	e.goTo("#/admin", "#page-error", "Not administrator user")
}

// pageLoad opens route and returns how long the page took, in the
// browser, from the route change until the element sel shows want (digits
// and letters compared, so "10,000" is "10000") and the next frame is
// painted.
func (e *browserEnv) pageLoad(route, sel, want string) time.Duration {
	e.t.Helper()
	args, _ := json.Marshal([]string{route, sel, want})
	script := `(([route, sel, want]) => new Promise((resolve, reject) => {
		const norm = (s) => s.replace(/[^0-9a-z ]/gi, "").trim();
		const t0 = performance.now();
		location.hash = route;
		const check = () => {
			const n = document.querySelector(sel);
			if (n && norm(n.innerText) === norm(want)) { requestAnimationFrame(() => resolve(performance.now() - t0)); return; }
			if (performance.now() - t0 > 120000) { reject(new Error(sel + ": " + (n ? n.innerText : "absent"))); return; }
			setTimeout(check, 2);
		};
		check();
	}))(` + string(args) + `)`
	ms, err := chromedp.Run(e.ctx, chromedp.Evaluate[float64](script, chromedp.EvalAwaitPromise))
	if err != nil {
		e.t.Fatalf("load %s: %v", route, err)
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// TestBrowserAtScale loads each console page with many queues and
// connections and logs how long each took. By default it is a smoke run
// (300 queues, 30 connections); WARREN_BROWSER_SCALE=10000,1000 sets the
// numbers of queues and connections.
func TestBrowserAtScale(t *testing.T) {
	nq, nc := 300, 30
	if s := os.Getenv("WARREN_BROWSER_SCALE"); s != "" {
		if _, err := fmt.Sscanf(s, "%d,%d", &nq, &nc); err != nil {
			t.Fatalf("WARREN_BROWSER_SCALE=%q: want queues,connections", s)
		}
	}
	e := newBrowserEnv(t, 10*time.Minute)
	declareQueues(t, e.bs.Broker, nq)
	for i := range nc {
		conn, err := amqp091.DialConfig(e.bs.URL, amqp091.Config{Properties: amqp091.Table{"connection_name": fmt.Sprintf("client-%04d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		if _, err := conn.Channel(); err != nil {
			t.Fatal(err)
		}
	}
	e.login("guest", "guest")
	e.holdRefresh()
	mid := fmt.Sprintf("q%05d", nq/2)
	xs, err := e.bs.Broker.Exchanges("")
	if err != nil {
		t.Fatal(err)
	}
	pages := []struct{ name, route, sel, want string }{
		{"overview", "#/overview", "#total-queues", strconv.Itoa(nq)},
		{"queues", "#/queues", "#queue-count", fmt.Sprintf("%d of %d queues", nq, nq)},
		{"queue", "#/queue/%2F/" + mid, "#queue-name", mid},
		{"connections", "#/connections", "#connection-count", fmt.Sprintf("%d of %d connections", nc, nc)},
		{"channels", "#/channels", "#channel-count", fmt.Sprintf("%d of %d channels", nc, nc)},
		{"exchanges", "#/exchanges", "#exchange-count", fmt.Sprintf("%d of %d exchanges", len(xs), len(xs))},
		{"admin", "#/admin", `#users-table tr[data-name="guest"] td`, "guest"},
	}
	const rounds = 3
	for _, p := range pages {
		var times []string
		for range rounds {
			e.pageLoad("#/policies", "#policy-table tbody td", "Nothing here yet.")
			times = append(times, ms(e.pageLoad(p.route, p.sel, p.want)))
		}
		t.Logf("%d queues, %d connections: %-11s page shown in %s", nq, nc, p.name, strings.Join(times, ", "))
	}
	// The API requests behind the slowest pages, timed alone (guest, over
	// loopback, the body read to its end).
	for _, path := range []string{"/api/queues?page=1&page_size=50&name=&sort=name&sort_reverse=false&use_regex=false",
		"/api/connections?page=1&page_size=50&name=&sort=name&sort_reverse=false&use_regex=false", "/api/overview", "/api/vhosts"} {
		var times []string
		for range rounds {
			req, _ := http.NewRequest("GET", e.base+strings.TrimPrefix(path, "/"), nil)
			req.SetBasicAuth("guest", "guest")
			start := time.Now()
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d", path, res.StatusCode)
			}
			times = append(times, ms(time.Since(start)))
		}
		t.Logf("%d queues, %d connections: GET %s in %s", nq, nc, path, strings.Join(times, ", "))
	}

	// The last queue by name is as reachable as the first.
	last := fmt.Sprintf("q%05d", nq-1)
	e.run("queues", chromedp.Evaluate[chromedp.Void](`location.hash = "#/queues"`))
	e.waitText("#queue-count", fmt.Sprintf("%s of %s queues", commas(nq), commas(nq)))
	// Sorted by name already: a click on its head reverses the order.
	e.click(`#queue-table th:nth-child(2)`)
	e.waitText(`#queue-table tbody tr:nth-child(1) td:nth-child(2)`, last)
}

// ms writes d in milliseconds, to a tenth.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", d.Seconds()*1000) }

// commas writes n as the console does in an English locale: 10,000.
func commas(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestBrowserScreenshots takes the screenshots in docs/ of a console
// with some traffic: WARREN_SCREENSHOTS=../docs go test -run
// TestBrowserScreenshots ./web/ (about three minutes). It checks nothing
// the other browser tests do not.
func TestBrowserScreenshots(t *testing.T) {
	dir := os.Getenv("WARREN_SCREENSHOTS")
	if dir == "" {
		t.Skip("set WARREN_SCREENSHOTS=<dir> to take the console's screenshots")
	}
	t.Setenv("WARREN_ARTIFACTS", dir)
	e := newBrowserEnv(t, 5*time.Minute)
	b := e.bs.Broker
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.PutUser("monitor", "monitor-pass", []string{"monitoring"}))
	must(b.PutUser("billing", "billing-pass", nil))
	must(b.SetPolicy("/", "email-ttl", "^emails$", "queues", 1, map[string]any{"message-ttl": int64(3600000)}, false))
	must(b.SetPolicy("/", "cap", ".*", "queues", 0, map[string]any{"max-length": int64(1000000)}, true))
	for _, q := range []broker.QueueSpec{
		{Name: "orders", Durable: true, Arguments: amqp.Table{"x-dead-letter-exchange": "amq.fanout"}},
		{Name: "payments", Durable: true, Arguments: amqp.Table{"x-queue-type": "quorum"}},
		{Name: "events", Durable: true, Arguments: amqp.Table{"x-queue-type": "stream"}},
		{Name: "emails", Durable: true},
	} {
		must(b.DeclareQueue("/", "", q))
	}

	// Traffic: order-service publishes to orders and emails, billing-worker
	// consumes orders and acks.
	pub, err := amqp091.DialConfig(e.bs.URL, amqp091.Config{Properties: amqp091.Table{"connection_name": "order-service"}})
	must(err)
	defer pub.Close()
	sub, err := amqp091.DialConfig(e.bs.URL, amqp091.Config{Properties: amqp091.Table{"connection_name": "billing-worker"}})
	must(err)
	defer sub.Close()
	pch, err := pub.Channel()
	must(err)
	must(pch.Confirm(false))
	sch, err := sub.Channel()
	must(err)
	must(sch.Qos(50, 0, false))
	deliveries, err := sch.Consume("orders", "billing-1", false, false, false, false, nil)
	must(err)
	go func() {
		for d := range deliveries {
			_ = d.Ack(false)
		}
	}()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			// A rate that swells and falls, so the charts show it.
			n := 1 + (i/300)%3
			for range n {
				_ = pch.Publish("", "orders", false, false, amqp091.Publishing{ContentType: "application/json", Body: fmt.Appendf(nil, `{"order":%d}`, i)})
			}
			if i%7 == 0 {
				_ = pch.Publish("", "emails", false, false, amqp091.Publishing{
					ContentType: "text/plain", DeliveryMode: 2, MessageId: fmt.Sprintf("mail-%d", i), CorrelationId: fmt.Sprintf("order-%d", i),
					Headers: amqp091.Table{"x-tenant": "acme", "x-attempt": int32(1)}, Body: fmt.Appendf(nil, "Your order %d has shipped.", i),
				})
			}
		}
	}()
	defer func() { close(stop); <-done }()

	e.run("refused login", chromedp.Navigate(e.base), chromedp.WaitVisible(chromedp.ID("login-user")))
	e.fill("#login-user", "billing")
	e.fill("#login-pass", "billing-pass")
	e.click("#login-submit")
	e.waitText("#login-error", "Login refused: Not management user")
	e.screenshot("console-login")
	e.set("#login-user", "guest")
	e.set("#login-pass", "guest")
	e.click("#login-submit")
	e.waitText("#whoami-name", "guest")

	// The pages shown below ask once for their objects' history, which
	// the server then keeps; the overview refreshes itself for a while.
	for _, c := range b.Connections() {
		if c.ClientProperties["connection_name"] == "order-service" {
			e.goTo("#/connection/"+url.PathEscape(c.Name), "#connection-name", "order-service")
			e.goTo("#/channel/"+url.PathEscape(c.Name+" (1)"), "#channel-name", c.Name+" (1)")
		}
	}
	e.goTo("#/queue/%2F/emails", "#queue-name", "emails")
	e.goTo("#/overview", "#total-queues", "4")
	time.Sleep(150 * time.Second)
	e.screenshot("console-overview")
	e.holdRefresh()

	e.goTo("#/queues", "#queue-count", "4 of 4 queues")
	e.screenshot("console-queues")
	e.goTo("#/queue/%2F/emails", "#queue-name", "emails")
	e.set("#get-count", "2")
	e.click("#get-submit")
	e.waitText("#msg-0-content_type", "text/plain")
	e.screenshot("console-queue")
	e.goTo("#/connections", "#connection-count", "2 of 2 connections")
	e.screenshot("console-connections")
	e.click(`#connections-table tr[data-name] td:nth-child(1) a`)
	e.waitEval("a connection page", `document.getElementById("connection-name") ? "shown" : ""`, "shown")
	e.screenshot("console-connection")
	e.click("#connection-channels-table tbody tr td:nth-child(1) a")
	e.waitEval("a channel page", `document.getElementById("channel-name") ? "shown" : ""`, "shown")
	e.screenshot("console-channel")
	e.goTo("#/exchanges", "#exchange-table tr[data-name=\"amq.topic\"] td:nth-child(3)", "topic")
	e.screenshot("console-exchanges")
	e.goTo("#/policies", `#policy-table tr[data-name="email-ttl"] td:nth-child(2)`, "email-ttl")
	e.screenshot("console-policies")
	e.goTo("#/admin", `#users-table tr[data-name="monitor"] td:nth-child(1)`, "monitor")
	e.screenshot("console-admin")
}

// TestBrowserUserLimits: the Admin page sets a user's limit through
// /api/user-limits and shows it in the users table; -1 clears it.
func TestBrowserUserLimits(t *testing.T) {
	e := newBrowserEnv(t, 60*time.Second)
	e.login("guest", "guest")
	e.goTo("#/admin", `#users-table tr[data-name="guest"] td:nth-child(3)`, "none")
	e.set("#user-limit-user", "guest")
	e.set("#user-limit-name", "max-channels")
	e.fill("#user-limit-value", "7")
	e.click("#user-limit-set")
	e.waitText(`#users-table tr[data-name="guest"] td:nth-child(3)`, "max-channels: 7")
	if got, err := e.bs.UserLimits("guest"); err != nil || got["max-channels"] != 7 {
		t.Fatalf("limits on the broker: %v %v", got, err)
	}
	e.set("#user-limit-value", "-1")
	e.click("#user-limit-set")
	e.waitText(`#users-table tr[data-name="guest"] td:nth-child(3)`, "none")
}

// TestBrowserVHostLimits: the Admin page sets a virtual host's limit
// through /api/vhost-limits and shows it in the virtual hosts table; -1
// clears it.
func TestBrowserVHostLimits(t *testing.T) {
	e := newBrowserEnv(t, 60*time.Second)
	e.login("guest", "guest")
	cell := `#vhosts-table tr[data-name="/"] td:nth-child(3)`
	e.goTo("#/admin", cell, "none")
	e.set("#vhost-limit-vhost", "/")
	e.set("#vhost-limit-name", "max-queues")
	e.fill("#vhost-limit-value", "12")
	e.click("#vhost-limit-set")
	e.waitText(cell, "max-queues: 12")
	if got, err := e.bs.VHostLimitsOf("/"); err != nil || got["max-queues"] != 12 {
		t.Fatalf("limits on the broker: %v %v", got, err)
	}
	e.set("#vhost-limit-value", "-1")
	e.click("#vhost-limit-set")
	e.waitText(cell, "none")
	if got, err := e.bs.VHostLimitsOf("/"); err != nil || len(got) != 0 {
		t.Fatalf("limits on the broker after clearing: %v %v", got, err)
	}
}
