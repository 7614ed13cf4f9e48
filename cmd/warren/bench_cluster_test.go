package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker/brokertest"
)

func TestBenchDeclare(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			s := startBenchBroker(t)
			res, err := runDeclare(t.Context(), declareConfig{
				URI: s.URL, Clients: 3, Duration: 300 * time.Millisecond, Durable: true, Keep: keep,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Failures != 0 || res.FirstFailure != nil {
				t.Fatalf("%d failures, first %v", res.Failures, res.FirstFailure)
			}
			if res.Declared == 0 || res.Deleted != res.Declared || res.Rate <= 0 {
				t.Fatalf("declared %d deleted %d rate %v: want some, each deleted", res.Declared, res.Deleted, res.Rate)
			}
			if !(res.P50 > 0 && res.P50 <= res.P99 && res.P99 <= res.Max) {
				t.Errorf("declare latencies p50 %v p99 %v max %v", res.P50, res.P99, res.Max)
			}
			// Every queue the run declared is gone.
			qs, err := s.Queues("/")
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range qs {
				if strings.HasPrefix(q.Name, "warren-bench-declare-") {
					t.Errorf("queue %q left behind", q.Name)
				}
			}
		})
	}
}

// TestBenchPublishURI: with PublishURI the producers publish through that
// broker while the topology and consumers stay on URI. Two unrelated
// brokers, each with a queue of the same name: the messages land in the
// publish broker's.
func TestBenchPublishURI(t *testing.T) {
	for _, client := range []string{benchClientRaw, benchClientAMQP091} {
		t.Run(client, func(t *testing.T) {
			// One leak check, registered first so that it runs after both
			// brokers are closed.
			a := startBenchBroker(t)
			b := brokertest.Start(t, nil)
			const queue = "warren-bench-publish-uri"
			conn, err := amqp.Dial(b.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			cfg := benchDefaults(a.URL)
			cfg.Client, cfg.PublishURI = client, b.URL
			cfg.QueuePattern, cfg.Exchange = queue, "amq.default"
			cfg.PMessages, cfg.Confirm = 100, 10
			cfg.Duration = 30 * time.Second // a cap
			r, err := runBench(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Sent != 100 || r.Confirmed != 100 || r.Received != 0 {
				t.Fatalf("sent %d confirmed %d received on A %d: want 100, 100, 0", r.Sent, r.Confirmed, r.Received)
			}
			q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			if q.Messages != 100 {
				t.Fatalf("queue on the publish broker holds %d messages, want 100", q.Messages)
			}
		})
	}
}

func TestBenchPublishURINeedsOwnConnections(t *testing.T) {
	cfg := benchDefaults("amqp://a")
	cfg.PublishURI, cfg.Connections = "amqp://b", 1
	if err := cfg.validate(); err == nil {
		t.Fatal("a publish URI with shared connections: no error")
	}
}

func TestBenchForward(t *testing.T) {
	s := startBenchBroker(t)
	res, err := runForward(t.Context(), forwardConfig{
		Home: s.URL, Via: s.URL, Producers: 1, Size: benchMinSize, Confirm: 100,
		Duration: 200 * time.Millisecond, Rounds: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.LocalRates) != 2 || len(res.ForwardedRates) != 2 || res.Failures != 0 {
		t.Fatalf("local %v forwarded %v failures %d: want two rates each, no failures", res.LocalRates, res.ForwardedRates, res.Failures)
	}
	if res.Local <= 0 || res.Forwarded <= 0 || res.Share <= 0 || res.Reached != 1 {
		t.Fatalf("local %v forwarded %v share %v reached %v", res.Local, res.Forwarded, res.Share, res.Reached)
	}
}

// TestBenchForwardNotReached: through a broker that is not the queue's
// (two unrelated brokers, each with the exchange and a queue of the same
// name), the confirmed publishes never reach the home queue, and the run
// says so.
func TestBenchForwardNotReached(t *testing.T) {
	a := startBenchBroker(t)
	b := brokertest.Start(t, nil)
	cfg := forwardConfig{Home: a.URL, Via: b.URL, Producers: 1, Size: benchMinSize, Confirm: 100, Duration: 200 * time.Millisecond, Rounds: 1, Queue: "warren-bench-forward-test"}
	// B routes the bench's exchange and key to a queue of its own.
	conn, err := amqp.Dial(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("warren-bench-direct", amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("elsewhere", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("elsewhere", cfg.Queue, "warren-bench-direct", false, nil); err != nil {
		t.Fatal(err)
	}
	res, err := runForward(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reached != 0 {
		t.Fatalf("reached %v, want 0: nothing published through B reaches A", res.Reached)
	}
}

func TestMedianFloat(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := medianFloat(c.in); got != c.want {
			t.Errorf("medianFloat(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestParseFailoverEvent(t *testing.T) {
	now := time.Unix(100, 0)
	for _, c := range []struct {
		line    string
		ok, err bool
		node    int
		at      time.Time
	}{
		{line: "kill 2 1500000000123456789", ok: true, node: 2, at: time.Unix(0, 1500000000123456789)},
		{line: "  kill 3  ", ok: true, node: 3, at: now},
		{line: ""},
		{line: "# restarted 2"},
		{line: " end ", err: true},
		{line: "kill 0", err: true},
		{line: "kill 4", err: true},
		{line: "kill x", err: true},
		{line: "kill 1 -5", err: true},
		{line: "stop 1", err: true},
		{line: "kill 1 2 3", err: true},
	} {
		k, ok, err := parseFailoverEvent(c.line, 3, now)
		if (err != nil) != c.err || ok != c.ok {
			t.Errorf("%q: ok %v err %v, want ok %v err %v", c.line, ok, err, c.ok, c.err)
			continue
		}
		if ok && (k.Node != c.node || !k.At.Equal(c.at)) {
			t.Errorf("%q: node %d at %v, want %d at %v", c.line, k.Node, k.At, c.node, c.at)
		}
	}
}

// TestMatchFailover: a kill is answered by the first declare-ok on another
// node of a declare sent after it; declares sent before the kill, and those
// on the killed node, do not count.
func TestMatchFailover(t *testing.T) {
	ms := func(v int64) int64 { return v * int64(time.Millisecond) }
	at := func(v int64) time.Time { return time.Unix(0, ms(v)) }
	clients := []*failoverClient{
		// Node 1 (killed first): answers at once, but it is the killed one.
		{node: 0, ops: []failoverOp{{ms(0), ms(5)}, {ms(1001), ms(1002)}}, fails: []int64{ms(1010)}},
		// Node 2: a declare sent before the kill, answered after it;
		// then the first post-kill one at 1300.
		{node: 1, ops: []failoverOp{{ms(900), ms(1200)}, {ms(1250), ms(1300)}, {ms(5100), ms(5900)}}, fails: []int64{ms(1100)}},
		// Node 3: its first post-kill answer at 1400.
		{node: 2, ops: []failoverOp{{ms(1000), ms(1400)}, {ms(5050), ms(5500)}}},
	}
	kills := []failoverKill{
		{Node: 2, At: at(5000)}, // out of order: sorted by time
		{Node: 1, At: at(1000)},
		{Node: 3, At: at(9000)}, // nothing after it
	}
	res := matchFailover(kills, clients, 3, at(10000))
	if len(res.Kills) != 3 {
		t.Fatalf("%d kills", len(res.Kills))
	}
	k1, k2, k3 := res.Kills[0], res.Kills[1], res.Kills[2]
	if !k1.OK || k1.Node != 1 || k1.By != 2 || k1.Recovered != 300*time.Millisecond || k1.Failures != 2 {
		t.Errorf("first kill: %+v, want node 1 recovered by node 2 in 300ms after 2 failures", k1)
	}
	if !k2.OK || k2.Node != 2 || k2.By != 3 || k2.Recovered != 500*time.Millisecond || k2.Failures != 0 {
		t.Errorf("second kill: %+v, want node 2 recovered by node 3 in 500ms", k2)
	}
	if k3.OK || k3.Node != 3 {
		t.Errorf("third kill: %+v, want not recovered", k3)
	}
	if res.Median != 400*time.Millisecond {
		t.Errorf("median %v, want 400ms (of 300 and 500)", res.Median)
	}
	if fmt.Sprint(res.Declared) != "[2 3 2]" || res.Failures != 2 {
		t.Errorf("declared %v failures %d", res.Declared, res.Failures)
	}
}

// TestBenchFailover runs the failover clients against two real warren
// processes (not a cluster: each has its own definitions) and SIGKILLs
// the first; the run finds the next declare-ok, on the second.
func TestBenchFailover(t *testing.T) {
	bin := buildWarren(t)
	n1 := startWarren(t, bin, filepath.Join(t.TempDir(), "n1"))
	n2 := startWarren(t, bin, filepath.Join(t.TempDir(), "n2"))
	// The events go to a file that the run follows, as the script's do.
	path := filepath.Join(t.TempDir(), "events")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	events, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = events.Close() }()
	type outcome struct {
		res failoverResult
		err error
	}
	done := make(chan outcome, 1)
	// Declares flow on both nodes before the kill.
	var seen [2]sync.Once
	flowing := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	go func() {
		r, err := runFailover(t.Context(), failoverConfig{
			URIs:           []string{"amqp://guest:guest@" + n1.addr, "amqp://guest:guest@" + n2.addr},
			ClientsPerNode: 2, Settle: 500 * time.Millisecond, Duration: 2 * time.Minute, Events: events,
			onDeclare: func(node int) { seen[node].Do(func() { close(flowing[node]) }) },
		})
		done <- outcome{r, err}
	}()
	for _, f := range flowing {
		select {
		case <-f:
		case o := <-done:
			t.Fatalf("the run ended before declares flowed on both nodes: %+v, %v", o.res, o.err)
		}
	}
	killedAt := time.Now()
	n1.kill()
	w, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Two writes, as two `echo >>`.
	if _, err := fmt.Fprintf(w, "kill 1 %d\n", killedAt.UnixNano()); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintln(w, "end"); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if len(o.res.Kills) != 1 {
		t.Fatalf("kills %+v, want 1", o.res.Kills)
	}
	k := o.res.Kills[0]
	if !k.OK || k.Node != 1 || k.By != 2 || k.Recovered <= 0 || o.res.Median != k.Recovered {
		t.Fatalf("kill %+v median %v: want node 1 killed and node 2 answering", k, o.res.Median)
	}
	if o.res.Declared[0] == 0 || o.res.Declared[1] == 0 || o.res.Failures == 0 {
		t.Errorf("declared %v failures %d: want declares on both and failures on the killed one", o.res.Declared, o.res.Failures)
	}
}

func TestProcCPUTicks(t *testing.T) {
	for _, c := range []struct {
		stat string
		want uint64
		err  bool
	}{
		{stat: "42 (beam.smp) S 1 42 42 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 30 0 100 200 300", want: 1801},
		// A command name with spaces and parentheses.
		{stat: "7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 10 5 0 0 20 0 1 0 1 2 3", want: 15},
		{stat: "7 (x) R 1 2", err: true},
		{stat: "no name here", err: true},
		{stat: "7 (x) R 1 7 7 0 -1 0 0 0 0 0 ten 5 0 0 20 0 1 0 1 2 3", err: true},
	} {
		got, err := procCPUTicks([]byte(c.stat))
		if (err != nil) != c.err || got != c.want {
			t.Errorf("%q: %d, %v; want %d, error %v", c.stat, got, err, c.want, c.err)
		}
	}
}

func TestProcRSS(t *testing.T) {
	got, err := procRSS([]byte("Name:\twarren\nVmPeak:\t  9000 kB\nVmRSS:\t   20480 kB\nRssAnon:\t 100 kB\n"))
	if err != nil || got != 20<<20 {
		t.Errorf("VmRSS 20480 kB: %d, %v", got, err)
	}
	if _, err := procRSS([]byte("Name:\tkthreadd\nState:\tS\n")); err == nil {
		t.Error("no VmRSS: no error")
	}
}

// TestBenchIdle watches this test process and a process that has exited.
func TestBenchIdle(t *testing.T) {
	procs, err := runIdle(t.Context(), idleConfig{
		PIDs: []int{os.Getpid()}, Names: []string{"self"}, Duration: 300 * time.Millisecond, Interval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	p := procs[0]
	if p.Name != "self" || p.PID != os.Getpid() || p.RSS == 0 || p.RSSMax < p.RSS || p.RSSMean <= 0 || p.CPU < 0 {
		t.Fatalf("%+v", p)
	}
	bin := buildWarren(t)
	w := startWarren(t, bin, filepath.Join(t.TempDir(), "data"))
	pid := w.cmd.Process.Pid
	w.kill()
	if _, err := runIdle(t.Context(), idleConfig{PIDs: []int{pid}, Duration: 100 * time.Millisecond}); err == nil {
		t.Fatal("an exited process: no error")
	}
}
