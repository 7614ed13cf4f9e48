package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
)

// benchClusterCommands are the subcommands of `warren bench` that measure
// a cluster (or any broker): declare, failover, forward and idle. Each
// prints a summary, or one JSON line with --json (progress on stderr).
func benchClusterCommands() []*cli.Command {
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print one JSON summary line on stdout (progress goes to stderr)"}
	return []*cli.Command{
		{
			Name:  "declare",
			Usage: "queue declarations per second through one broker or node",
			Description: "Each client (a connection with a channel) declares a queue of a new name and deletes it,\n" +
				"in a loop; with --keep it only declares, and every queue is deleted after the timed phase.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "uri", Value: "amqp://guest:guest@localhost:5672", Usage: "broker (node) URI"},
				&cli.IntFlag{Name: "clients", Aliases: []string{"c"}, Value: 8, Usage: "concurrent clients"},
				&cli.DurationFlag{Name: "duration", Aliases: []string{"z"}, Value: 10 * time.Second, Usage: "timed phase"},
				&cli.BoolFlag{Name: "durable", Value: true, Usage: "declare durable queues"},
				&cli.BoolFlag{Name: "keep", Usage: "declare only; delete the queues after the timed phase"},
				jsonFlag,
			},
			Action: runDeclareCommand,
		},
		{
			Name:  "failover",
			Usage: "time from a node's SIGKILL to the next successful declare on another node",
			Description: "Clients declare and delete queues in a loop through every node given with --uri. Another\n" +
				"process kills nodes and writes one line per kill to --events (a file appended to, or stdin):\n" +
				"  kill NODE [UNIX_NANOS]\n" +
				"and \"end\" after the last. NODE is the node's position among the --uri flags, from 1;\n" +
				"UNIX_NANOS the time of the kill (date +%s%N just before it). For each kill the run reports the\n" +
				"time to the first declare-ok, on another node, of a declare sent after the kill. It ends\n" +
				"--settle after \"end\" (or the end of stdin).",
			Flags: []cli.Flag{
				&cli.StringSliceFlag{Name: "uri", Usage: "node URI, repeated, in node order"},
				&cli.IntFlag{Name: "clients", Aliases: []string{"c"}, Value: 2, Usage: "clients per node"},
				&cli.DurationFlag{Name: "duration", Aliases: []string{"z"}, Usage: "cap on the run (0 = until stdin ends)"},
				&cli.StringFlag{Name: "events", Value: "-", Usage: "file the kill events are appended to, followed as by tail -f (- = stdin)"},
				&cli.DurationFlag{Name: "settle", Value: 10 * time.Second, Usage: "run on for this long after the events end"},
				jsonFlag,
			},
			Action: runFailoverCommand,
		},
		{
			Name:  "forward",
			Usage: "confirmed publish rate to a queue on node A through node B, as a share of through A",
			Description: "Declares a queue through --home (its node, client-local) with a consumer there, and publishes\n" +
				"with confirms through --home (local) and through --via (forwarded), alternating, --rounds\n" +
				"runs of each; reports the medians and forwarded / local.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "home", Usage: "URI of node A, the queue's node"},
				&cli.StringFlag{Name: "via", Usage: "URI of node B, published through"},
				&cli.StringFlag{Name: "client", Value: benchClientRaw, Usage: "raw or amqp091 (as bench --client)"},
				&cli.IntFlag{Name: "producers", Aliases: []string{"x"}, Value: 1, Usage: "producer count"},
				&cli.IntFlag{Name: "size", Aliases: []string{"s"}, Value: benchMinSize, Usage: "message body size in bytes"},
				&cli.IntFlag{Name: "confirm", Value: 1000, Usage: "outstanding confirms per producer"},
				&cli.BoolFlag{Name: "persistent", Usage: "persistent messages to a durable queue"},
				&cli.DurationFlag{Name: "duration", Aliases: []string{"z"}, Value: 10 * time.Second, Usage: "length of each run"},
				&cli.IntFlag{Name: "rounds", Value: 3, Usage: "runs of each kind"},
				jsonFlag,
			},
			Action: runForwardCommand,
		},
		{
			Name:  "queues",
			Usage: "declare many queues (each through one of the nodes), use each once, and report the time",
			Description: "Declares --count durable queues named PREFIX-0 .. PREFIX-(count-1) with --queue-args from\n" +
				"--clients clients spread over the --uri nodes; with --use then publishes a persistent message to\n" +
				"each with a confirm and fetches it back (basic.get, ack). The queues are left in place;\n" +
				"--delete deletes them instead.",
			Flags: []cli.Flag{
				&cli.StringSliceFlag{Name: "uri", Usage: "node URI, repeated; client i uses the (i mod n)th"},
				&cli.IntFlag{Name: "count", Aliases: []string{"n"}, Value: 1000, Usage: "queues"},
				&cli.IntFlag{Name: "clients", Aliases: []string{"c"}, Value: 12, Usage: "concurrent clients"},
				&cli.StringFlag{Name: "prefix", Value: "warren-bench-q", Usage: "queue name prefix"},
				&cli.StringSliceFlag{Name: "queue-args", Usage: "queue argument key=value, repeatable (as bench --queue-args)"},
				&cli.BoolFlag{Name: "use", Usage: "use each queue once after declaring them all"},
				&cli.BoolFlag{Name: "delete", Usage: "delete the queues instead of declaring them"},
				jsonFlag,
			},
			Action: runQueuesCommand,
		},
		{
			Name:  "delayed",
			Usage: "delayed messages: memory of a backlog, firing accuracy under a steady flow and in a burst",
			Description: "Declares an x-delayed-message exchange (direct) and two durable queues; publishes --waiting\n" +
				"persistent messages with random delays of one minute to --max-delay (with confirms), and\n" +
				"reports the broker's RSS (--pid) before, at its peak and --settle after; then --rate messages\n" +
				"a second for --steady, each due --lead after it is sent, and --burst messages due at one\n" +
				"moment, consumed as they come due: how late each arrived after its due time. Deletes what it\n" +
				"declared at the end.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "uri", Value: "amqp://guest:guest@localhost:5672", Usage: "broker URI"},
				&cli.IntFlag{Name: "waiting", Value: 1_000_000, Usage: "messages in the backlog"},
				&cli.DurationFlag{Name: "max-delay", Value: time.Hour, Usage: "longest delay of the backlog"},
				&cli.IntFlag{Name: "size", Aliases: []string{"s"}, Value: 100, Usage: "body size in bytes (min 8)"},
				&cli.DurationFlag{Name: "settle", Value: 10 * time.Second, Usage: "wait after the backlog before reading the RSS"},
				&cli.IntFlag{Name: "rate", Value: 1000, Usage: "steady phase: messages per second (0 = none)"},
				&cli.DurationFlag{Name: "steady", Value: 20 * time.Second, Usage: "length of the steady phase"},
				&cli.DurationFlag{Name: "lead", Value: time.Second, Usage: "delay of the steady phase's messages"},
				&cli.IntFlag{Name: "burst", Value: 10_000, Usage: "messages due at one moment (0 = none)"},
				&cli.IntFlag{Name: "pid", Usage: "the broker's process id, for its RSS (0 = not measured)"},
				jsonFlag,
			},
			Action: runDelayedCommand,
		},
		{
			Name:  "jitter",
			Usage: "how late a timer fires on this machine (not the broker): run it beside a latency benchmark",
			Description: "Sleeps --interval over and over for --duration in a process that does nothing else and\n" +
				"reports how late the wake-ups were (p50, p99, p99.9, max) and, of those over 3 ms, how many\n" +
				"came at one phase of each 100 ms of the wall clock (a CPU quota's period shows there).",
			Flags: []cli.Flag{
				&cli.DurationFlag{Name: "duration", Aliases: []string{"z"}, Value: 10 * time.Second, Usage: "how long to measure"},
				&cli.DurationFlag{Name: "interval", Value: time.Millisecond, Usage: "the timer's interval"},
				jsonFlag,
			},
			Action: runJitterCommand,
		},
		{
			Name:  "idle",
			Usage: "CPU (% of a core) and RSS of running processes over a time, from /proc",
			Flags: []cli.Flag{
				&cli.IntSliceFlag{Name: "pid", Usage: "process id, repeated"},
				&cli.StringSliceFlag{Name: "name", Usage: "a name per --pid, for the report"},
				&cli.DurationFlag{Name: "duration", Aliases: []string{"z"}, Value: 60 * time.Second, Usage: "how long to watch"},
				jsonFlag,
			},
			Action: runIdleCommand,
		},
	}
}

// benchProgress returns where progress goes: stderr with --json.
func benchProgress(cc *cli.Context) io.Writer {
	if cc.Bool("json") {
		return os.Stderr
	}
	return os.Stdout
}

func printJSONLine(v any) error { return json.NewEncoder(os.Stdout).Encode(v) }

func ms(d time.Duration) float64 { return round(float64(d)/1e6, 1) }

func runDeclareCommand(cc *cli.Context) error {
	ctx, stop := signal.NotifyContext(cc.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := runDeclare(ctx, declareConfig{
		URI: cc.String("uri"), Clients: cc.Int("clients"), Duration: cc.Duration("duration"),
		Durable: cc.Bool("durable"), Keep: cc.Bool("keep"), Out: benchProgress(cc),
	})
	if err != nil {
		return err
	}
	if res.FirstFailure != nil {
		fmt.Fprintf(benchProgress(cc), "first failure: %v\n", res.FirstFailure)
	}
	if cc.Bool("json") {
		return printJSONLine(map[string]any{
			"declared": res.Declared, "deleted": res.Deleted, "failures": res.Failures,
			"declare_rate": round(res.Rate, 1), "op_rate": round(res.OpRate, 1), "duration_s": round(res.Duration.Seconds(), 3),
			"p50_ms": ms(res.P50), "p99_ms": ms(res.P99), "max_ms": ms(res.Max),
		})
	}
	fmt.Printf("summary: %.1fs, %d clients: %d declared (%.0f/s), %d deleted, %.0f ops/s, failures %d\n",
		res.Duration.Seconds(), cc.Int("clients"), res.Declared, res.Rate, res.Deleted, res.OpRate, res.Failures)
	fmt.Printf("queue.declare round trip p50/p99/max: %.1f/%.1f/%.1f ms\n", ms(res.P50), ms(res.P99), ms(res.Max))
	return nil
}

func runFailoverCommand(cc *cli.Context) error {
	ctx, stop := signal.NotifyContext(cc.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	events := os.Stdin
	if p := cc.String("events"); p != "-" {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		events = f
	}
	res, err := runFailover(ctx, failoverConfig{
		URIs: cc.StringSlice("uri"), ClientsPerNode: cc.Int("clients"), Duration: cc.Duration("duration"),
		Settle: cc.Duration("settle"), Events: events, Out: benchProgress(cc),
	})
	if err != nil {
		return err
	}
	// The JSON line: flat fields first, then one array entry per kill.
	var out struct {
		Kills      int       `json:"kill_count"`
		Recovered  int       `json:"recovered_count"`
		Median     float64   `json:"median_ms"`
		Failures   uint64    `json:"failures"`
		Duration   float64   `json:"duration_s"`
		Nodes      []int     `json:"kill_node"`
		Recovery   []float64 `json:"recovery_ms"` // -1: not recovered
		By         []int     `json:"recovered_by"`
		KillFailed []uint64  `json:"kill_failures"`
		Declared   []uint64  `json:"declared"` // per node
	}
	out.Kills, out.Median, out.Failures = len(res.Kills), ms(res.Median), res.Failures
	out.Duration, out.Declared = round(res.Duration.Seconds(), 3), res.Declared
	for _, k := range res.Kills {
		rec := -1.0
		if k.OK {
			out.Recovered++
			rec = ms(k.Recovered)
		}
		out.Nodes, out.Recovery = append(out.Nodes, k.Node), append(out.Recovery, rec)
		out.By, out.KillFailed = append(out.By, k.By), append(out.KillFailed, k.Failures)
	}
	if cc.Bool("json") {
		return printJSONLine(out)
	}
	for i, k := range res.Kills {
		if k.OK {
			fmt.Printf("kill %d of node %d: next declare-ok after %.1f ms (node %d), %d failed operations meanwhile\n", i+1, k.Node, ms(k.Recovered), k.By, k.Failures)
		} else {
			fmt.Printf("kill %d of node %d: no declare-ok on another node before the next kill or the end\n", i+1, k.Node)
		}
	}
	fmt.Printf("summary: %d kills, %d recovered, median %.1f ms; declare-ok per node %v, failures %d\n",
		len(res.Kills), out.Recovered, ms(res.Median), res.Declared, res.Failures)
	return nil
}

func runForwardCommand(cc *cli.Context) error {
	ctx, stop := signal.NotifyContext(cc.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := runForward(ctx, forwardConfig{
		Home: cc.String("home"), Via: cc.String("via"), Client: cc.String("client"),
		Producers: cc.Int("producers"), Size: cc.Int("size"), Confirm: cc.Int("confirm"),
		Persistent: cc.Bool("persistent"), Duration: cc.Duration("duration"), Rounds: cc.Int("rounds"),
		Out: benchProgress(cc),
	})
	if err != nil {
		return err
	}
	if cc.Bool("json") {
		return printJSONLine(map[string]any{
			"local_rate": round(res.Local, 1), "forwarded_rate": round(res.Forwarded, 1), "share": round(res.Share, 3),
			"reached": round(res.Reached, 3), "local_rates": res.LocalRates, "forwarded_rates": res.ForwardedRates, "failures": res.Failures,
		})
	}
	if res.Reached < 0.99 {
		fmt.Printf("warning: only %.1f%% of the forwarded publishes reached the queue on --home: the figure is not of forwarding\n", res.Reached*100)
	}
	fmt.Printf("summary: confirmed msg/s local %.0f, forwarded %.0f (medians of %d): forwarded = %.1f%% of local, failures %d\n",
		res.Local, res.Forwarded, cc.Int("rounds"), res.Share*100, res.Failures)
	return nil
}

func runQueuesCommand(cc *cli.Context) error {
	ctx, stop := signal.NotifyContext(cc.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	args, err := parseQueueArgs(cc.StringSlice("queue-args"))
	if err != nil {
		return err
	}
	res, err := runQueues(ctx, queuesConfig{
		URIs: cc.StringSlice("uri"), Count: cc.Int("count"), Clients: cc.Int("clients"), Prefix: cc.String("prefix"),
		Args: args, Use: cc.Bool("use"), Delete: cc.Bool("delete"), Out: benchProgress(cc),
	})
	if err != nil {
		return err
	}
	if res.FirstFailure != nil {
		fmt.Fprintf(benchProgress(cc), "first failure: %v\n", res.FirstFailure)
	}
	rate := float64(res.Done) / max(res.Elapsed.Seconds(), 1e-9)
	if cc.Bool("json") {
		return printJSONLine(map[string]any{
			"done": res.Done, "seconds": round(res.Elapsed.Seconds(), 2), "rate": round(rate, 1),
			"used": res.Used, "use_seconds": round(res.UseElapsed.Seconds(), 2), "failures": res.Failures,
		})
	}
	verb := "declared"
	if cc.Bool("delete") {
		verb = "deleted"
	}
	fmt.Printf("summary: %d queues %s in %.1fs (%.0f/s); %d used in %.1fs; failures %d\n",
		res.Done, verb, res.Elapsed.Seconds(), rate, res.Used, res.UseElapsed.Seconds(), res.Failures)
	return nil
}

func runIdleCommand(cc *cli.Context) error {
	ctx, stop := signal.NotifyContext(cc.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	procs, err := runIdle(ctx, idleConfig{
		PIDs: cc.IntSlice("pid"), Names: cc.StringSlice("name"), Duration: cc.Duration("duration"), Out: benchProgress(cc),
	})
	if err != nil {
		return err
	}
	const mib = 1 << 20
	if cc.Bool("json") {
		// One array entry per --pid, in order.
		var out struct {
			Names   []string  `json:"names"`
			PIDs    []int     `json:"pids"`
			CPU     []float64 `json:"cpu_pct"`
			RSS     []float64 `json:"rss_mib"`
			RSSMax  []float64 `json:"rss_max_mib"`
			RSSMean []float64 `json:"rss_mean_mib"`
		}
		for _, p := range procs {
			out.Names, out.PIDs, out.CPU = append(out.Names, p.Name), append(out.PIDs, p.PID), append(out.CPU, round(p.CPU, 2))
			out.RSS = append(out.RSS, round(float64(p.RSS)/mib, 1))
			out.RSSMax = append(out.RSSMax, round(float64(p.RSSMax)/mib, 1))
			out.RSSMean = append(out.RSSMean, round(p.RSSMean/mib, 1))
		}
		return printJSONLine(out)
	}
	for _, p := range procs {
		fmt.Printf("%s (pid %d): CPU %.2f%% of a core, RSS %.1f MiB at the end (max %.1f, mean %.1f)\n",
			p.Name, p.PID, p.CPU, float64(p.RSS)/mib, float64(p.RSSMax)/mib, p.RSSMean/mib)
	}
	return nil
}

func runDelayedCommand(cc *cli.Context) error {
	ctx, stop := signal.NotifyContext(cc.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := runDelayed(ctx, delayedConfig{
		URI: cc.String("uri"), Waiting: cc.Int("waiting"), MaxDelay: cc.Duration("max-delay"), Size: cc.Int("size"),
		Settle: cc.Duration("settle"), Rate: cc.Int("rate"), Steady: cc.Duration("steady"), Lead: cc.Duration("lead"),
		Burst: cc.Int("burst"), PID: cc.Int("pid"), Out: benchProgress(cc),
	})
	if err != nil {
		return err
	}
	const mib = 1 << 20
	lat := func(l lateness) map[string]any {
		return map[string]any{"count": l.Count, "early": l.Early, "p50_ms": round(l.P50, 2), "p99_ms": round(l.P99, 2),
			"max_ms": round(l.Max, 2), "received_rate": round(l.ReceivedPerSec, 1)}
	}
	if cc.Bool("json") {
		return printJSONLine(map[string]any{
			"publish_rate": round(res.PublishRate, 1), "rss_idle_mib": round(float64(res.RSSIdle)/mib, 1),
			"rss_peak_mib": round(float64(res.RSSPeak)/mib, 1), "rss_settled_mib": round(float64(res.RSSAt)/mib, 1),
			"steady": lat(res.Steady), "burst": lat(res.Burst),
		})
	}
	if cc.Int("pid") != 0 {
		fmt.Printf("backlog of %d: %.0f msg/s confirmed; broker RSS %.1f MiB before, peak %.1f, %.1f after settling: %.1f MiB above idle\n",
			cc.Int("waiting"), res.PublishRate, float64(res.RSSIdle)/mib, float64(res.RSSPeak)/mib, float64(res.RSSAt)/mib,
			float64(res.RSSAt-min(res.RSSAt, res.RSSIdle))/mib)
	}
	for _, p := range []struct {
		name string
		l    lateness
	}{{"steady", res.Steady}, {"burst", res.Burst}} {
		if p.l.Count > 0 {
			fmt.Printf("%s: %d messages, lateness p50 %.2f ms, p99 %.2f ms, max %.2f ms; %d early; received at %.0f msg/s\n",
				p.name, p.l.Count, p.l.P50, p.l.P99, p.l.Max, p.l.Early, p.l.ReceivedPerSec)
		}
	}
	return nil
}
