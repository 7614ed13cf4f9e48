package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/urfave/cli/v2"
)

// benchCommand is `warren bench`, a load generator in the manner of
// RabbitMQ's PerfTest that works against any AMQP 0-9-1 broker.
func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "generate load against any AMQP 0-9-1 broker and report rates and latency",
		Description: "Producers publish bodies that carry their send time; consumers report the latency.\n" +
			"Runs until --duration, until every producer has sent --pmessages (and the\n" +
			"consumers have received them), or until interrupted. The subcommands measure a\n" +
			"cluster: declare, failover, forward and idle.",
		Flags:       benchFlags(),
		Action:      runBenchCommand,
		Subcommands: benchClusterCommands(),
	}
}

func benchFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "uri", Value: "amqp://guest:guest@localhost:5672", Usage: "broker URI"},
		&cli.StringFlag{Name: "client", Value: benchClientRaw, Usage: "AMQP client of the producers and consumers: raw (Warren's codec, batched writes, cheapest) or amqp091 (github.com/rabbitmq/amqp091-go); topology and --connect-only always use amqp091"},
		&cli.IntFlag{Name: "producers", Aliases: []string{"x"}, Value: 1, Usage: "producer count"},
		&cli.IntFlag{Name: "consumers", Aliases: []string{"y"}, Value: 1, Usage: "consumer count"},
		&cli.IntFlag{Name: "queues", Value: 1, Usage: "queue count; producer and consumer i use queue i mod queues"},
		&cli.StringFlag{Name: "queue-pattern", Value: "warren-bench-%d", Usage: "queue names, %d is the queue index (a plain name for one queue)"},
		&cli.IntFlag{Name: "size", Aliases: []string{"s"}, Value: benchMinSize, Usage: "message body size in bytes (min 16: send timestamp and sequence)"},
		&cli.StringFlag{Name: "exchange", Usage: "exchange to publish to (default warren-bench-<type>; amq.default for the default exchange)"},
		&cli.StringFlag{Name: "exchange-type", Value: amqp.ExchangeDirect, Usage: "direct, fanout, topic or headers"},
		&cli.StringFlag{Name: "routing-key", Usage: "routing and binding key for every queue (default: per queue)"},
		&cli.IntFlag{Name: "topic-bindings", Usage: "extra random non-matching topic bindings per queue"},
		&cli.IntFlag{Name: "confirm", Usage: "publisher confirms with this many outstanding per producer (0 = off)"},
		&cli.BoolFlag{Name: "autoack", Usage: "consume without acknowledgements"},
		&cli.IntFlag{Name: "multi-ack", Usage: "acknowledge with multiple=true every N deliveries"},
		&cli.IntFlag{Name: "prefetch", Aliases: []string{"q"}, Usage: "consumer prefetch count (0 = unlimited)"},
		&cli.BoolFlag{Name: "persistent", Usage: "publish persistent messages to durable queues"},
		&cli.Float64Flag{Name: "rate", Usage: "messages per second per producer (0 = unlimited)"},
		&cli.StringSliceFlag{Name: "queue-args", Usage: "queue argument key=value, repeatable; integers and true/false are typed (x-queue-type=quorum, x-max-length=1000)"},
		&cli.StringSliceFlag{Name: "consumer-args", Usage: "basic.consume argument key=value, repeatable, typed as --queue-args (x-stream-offset=first)"},
		&cli.IntFlag{Name: "connections", Usage: "spread producers and consumers over this many connections (0 = one each)"},
		&cli.DurationFlag{Name: "duration", Aliases: []string{"z"}, Usage: "run time (0 = until --pmessages are sent, or until interrupted)"},
		&cli.Int64Flag{Name: "pmessages", Usage: "messages per producer (0 = until --duration)"},
		&cli.BoolFlag{Name: "json", Usage: "print one JSON summary line on stdout (progress goes to stderr)"},
		&cli.StringFlag{Name: "output-file", Aliases: []string{"o"}, Usage: "write the per-second figures to this CSV file (as PerfTest's --output-file)"},
		&cli.BoolFlag{Name: "predeclared", Usage: "use existing exchange, queues and bindings; declare and delete nothing"},
		&cli.BoolFlag{Name: "auto-delete", Value: true, Usage: "declare queues auto-delete (--auto-delete=false: plain queues, deleted at the end)"},
		&cli.IntFlag{Name: "connect-only", Usage: "only open N connections with a channel each, report the time, hold them for --duration"},
		&cli.IntFlag{Name: "connect-parallelism", Value: 16, Usage: "connections opened at once with --connect-only"},
		&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the bench itself to this file"},
	}
}

// parseQueueArgs turns key=value pairs into a queue.declare arguments table:
// integers become int64, true/false booleans, anything else a string.
func parseQueueArgs(kvs []string) (amqp.Table, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	t := amqp.Table{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--queue-args %q: want key=value", kv)
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			t[k] = n
		} else if b, err := strconv.ParseBool(v); err == nil && (v == "true" || v == "false") {
			t[k] = b
		} else {
			t[k] = v
		}
	}
	return t, nil
}

func runBenchCommand(cc *cli.Context) error {
	args, err := parseQueueArgs(cc.StringSlice("queue-args"))
	if err != nil {
		return err
	}
	consArgs, err := parseQueueArgs(cc.StringSlice("consumer-args"))
	if err != nil {
		return err
	}
	progress := io.Writer(os.Stdout)
	if cc.Bool("json") {
		progress = os.Stderr
	}
	cfg := benchConfig{
		URI:                cc.String("uri"),
		Client:             cc.String("client"),
		Producers:          cc.Int("producers"),
		Consumers:          cc.Int("consumers"),
		Queues:             cc.Int("queues"),
		QueuePattern:       cc.String("queue-pattern"),
		Size:               cc.Int("size"),
		Exchange:           cc.String("exchange"),
		ExchangeType:       cc.String("exchange-type"),
		RoutingKey:         cc.String("routing-key"),
		TopicBindings:      cc.Int("topic-bindings"),
		Confirm:            cc.Int("confirm"),
		AutoAck:            cc.Bool("autoack"),
		MultiAck:           cc.Int("multi-ack"),
		Prefetch:           cc.Int("prefetch"),
		Persistent:         cc.Bool("persistent"),
		Rate:               cc.Float64("rate"),
		QueueArgs:          args,
		ConsumerArgs:       consArgs,
		Connections:        cc.Int("connections"),
		Duration:           cc.Duration("duration"),
		PMessages:          cc.Int64("pmessages"),
		Predeclared:        cc.Bool("predeclared"),
		AutoDelete:         cc.Bool("auto-delete"),
		ConnectOnly:        cc.Int("connect-only"),
		ConnectParallelism: cc.Int("connect-parallelism"),
		Out:                progress,
	}
	if path := cc.String("output-file"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		cfg.CSV = f
	}
	if path := cc.String("cpuprofile"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(cc.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := runBench(ctx, cfg)
	if err != nil {
		return err
	}
	if res.FirstFailure != nil {
		fmt.Fprintf(progress, "first failure: %v\n", res.FirstFailure)
	}
	if cc.Bool("json") {
		return json.NewEncoder(os.Stdout).Encode(benchJSON(res))
	}
	printBenchSummary(os.Stdout, &cfg, res)
	return nil
}

// benchSummaryJSON is the --json line. The first eleven fields are the
// stable interface scripts rely on.
type benchSummaryJSON struct {
	Sent        uint64  `json:"sent"`
	Received    uint64  `json:"received"`
	SendRate    float64 `json:"send_rate"`
	ReceiveRate float64 `json:"receive_rate"`
	P50         float64 `json:"p50_us"`
	P95         float64 `json:"p95_us"`
	P99         float64 `json:"p99_us"`
	P999        float64 `json:"p999_us"`
	Duration    float64 `json:"duration_s"`
	Connect     float64 `json:"connect_ms"`
	Failures    uint64  `json:"failures"`
	Confirmed   uint64  `json:"confirmed"`
	Nacked      uint64  `json:"nacked"`
	Min         float64 `json:"min_us"`
	Max         float64 `json:"max_us"`
	QueueDepth  int64   `json:"queue_depth"`
	Connections int     `json:"connections"`
	// Publish-to-confirm latencies (with --confirm).
	ConfirmMin  float64 `json:"confirm_min_us"`
	ConfirmP50  float64 `json:"confirm_p50_us"`
	ConfirmP95  float64 `json:"confirm_p95_us"`
	ConfirmP99  float64 `json:"confirm_p99_us"`
	ConfirmP999 float64 `json:"confirm_p999_us"`
	ConfirmMax  float64 `json:"confirm_max_us"`
}

func round(v float64, places int) float64 {
	p := math.Pow10(places)
	return math.Round(v*p) / p
}

func micros(d time.Duration) float64 { return round(float64(d)/1e3, 1) }

func benchJSON(r benchResult) benchSummaryJSON {
	return benchSummaryJSON{
		Sent: r.Sent, Received: r.Received,
		SendRate: round(r.SendRate, 1), ReceiveRate: round(r.ReceiveRate, 1),
		P50: micros(r.P50), P95: micros(r.P95), P99: micros(r.P99), P999: micros(r.P999),
		Duration: round(r.Duration.Seconds(), 3), Connect: round(float64(r.Connect)/1e6, 1),
		Failures: r.Failures, Confirmed: r.Confirmed, Nacked: r.Nacked,
		Min: micros(r.Min), Max: micros(r.Max), QueueDepth: r.QueueDepth, Connections: r.Connections,
		ConfirmMin: micros(r.ConfirmMin), ConfirmP50: micros(r.ConfirmP50), ConfirmP95: micros(r.ConfirmP95),
		ConfirmP99: micros(r.ConfirmP99), ConfirmP999: micros(r.ConfirmP999), ConfirmMax: micros(r.ConfirmMax),
	}
}

func printBenchSummary(w io.Writer, cfg *benchConfig, r benchResult) {
	if cfg.ConnectOnly > 0 {
		fmt.Fprintf(w, "summary: %d connections opened in %.1f ms, held %.1fs, failures: %d\n",
			r.Connections, float64(r.Connect)/1e6, r.Duration.Seconds(), r.Failures)
		return
	}
	fmt.Fprintf(w, "summary: %.1fs, sent: %d msg (%.0f msg/s), received: %d msg (%.0f msg/s)",
		r.Duration.Seconds(), r.Sent, r.SendRate, r.Received, r.ReceiveRate)
	if cfg.Confirm > 0 {
		fmt.Fprintf(w, ", confirmed: %d, nacked: %d", r.Confirmed, r.Nacked)
	}
	if r.QueueDepth >= 0 {
		fmt.Fprintf(w, ", queue depth at stop: %d", r.QueueDepth)
	}
	fmt.Fprintln(w)
	if r.Samples > 0 {
		fmt.Fprintf(w, "consumer latency min/p50/p95/p99/p99.9/max: %.1f/%.1f/%.1f/%.1f/%.1f/%.1f µs\n",
			micros(r.Min), micros(r.P50), micros(r.P95), micros(r.P99), micros(r.P999), micros(r.Max))
	}
	if r.ConfirmSamples > 0 {
		fmt.Fprintf(w, "confirm latency min/p50/p95/p99/p99.9/max: %.1f/%.1f/%.1f/%.1f/%.1f/%.1f µs\n",
			micros(r.ConfirmMin), micros(r.ConfirmP50), micros(r.ConfirmP95), micros(r.ConfirmP99), micros(r.ConfirmP999), micros(r.ConfirmMax))
	}
	fmt.Fprintf(w, "connections: %d opened in %.1f ms, failures: %d\n", r.Connections, float64(r.Connect)/1e6, r.Failures)
}
