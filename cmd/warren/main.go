// Command warren runs the Warren AMQP 0-9-1 broker.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/store"
)

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "warren:", err)
		os.Exit(1)
	}
}

func newApp() *cli.App {
	server := &cli.Command{
		Name:   "server",
		Usage:  "run the broker (the default)",
		Flags:  serverFlags(),
		Action: runServer,
	}
	return &cli.App{
		Name:     "warren",
		Usage:    "an AMQP 0-9-1 message broker",
		Version:  broker.Version,
		Flags:    serverFlags(),
		Action:   runServer,
		Commands: []*cli.Command{server, benchCommand(), ctlCommand()},
	}
}

func serverFlags() []cli.Flag {
	return append(webFlags(), append([]cli.Flag{
		&cli.StringFlag{Name: "amqp-addr", Value: ":5672", EnvVars: []string{"WARREN_AMQP_ADDR"}, Usage: "AMQP listen address"},
		&cli.StringFlag{Name: "data-dir", Value: "./data", EnvVars: []string{"WARREN_DATA_DIR"}, Usage: "directory for the broker's data"},
		&cli.BoolFlag{Name: "repair-data-dir", EnvVars: []string{"WARREN_REPAIR_DATA_DIR"}, Usage: "let Badger truncate a damaged MANIFEST or log at the damage, losing what follows it (otherwise the broker refuses to start)"},
		&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"WARREN_LOG_LEVEL"}, Usage: "debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", Value: "console", EnvVars: []string{"WARREN_LOG_FORMAT"}, Usage: "console or json"},
		&cli.UintFlag{Name: "frame-max", Value: 131072, EnvVars: []string{"WARREN_FRAME_MAX"}, Usage: "largest frame offered to clients, in bytes"},
		&cli.UintFlag{Name: "channel-max", Value: 2047, EnvVars: []string{"WARREN_CHANNEL_MAX"}, Usage: "highest channel number offered to clients"},
		&cli.DurationFlag{Name: "heartbeat", Value: 60 * time.Second, EnvVars: []string{"WARREN_HEARTBEAT"}, Usage: "heartbeat interval offered to clients (0 disables)"},
		&cli.Uint64Flag{Name: "max-message-size", Value: 128 << 20, EnvVars: []string{"WARREN_MAX_MESSAGE_SIZE"}, Usage: "largest message body accepted, in bytes"},
		&cli.StringFlag{Name: "default-user", Value: "guest", EnvVars: []string{"WARREN_DEFAULT_USER"}, Usage: "user created at first start"},
		&cli.StringFlag{Name: "default-pass", Value: "guest", EnvVars: []string{"WARREN_DEFAULT_PASS"}, Usage: "password of the default user"},
		&cli.StringFlag{Name: "pprof-addr", EnvVars: []string{"WARREN_PPROF_ADDR"}, Usage: "serve net/http/pprof on this address (empty = off)"},
		&cli.StringFlag{Name: "config", EnvVars: []string{"WARREN_CONFIG"}, Usage: "configuration file of key = value lines, named as the flags"},
		&cli.StringFlag{Name: "default-vhost", Value: "/", EnvVars: []string{"WARREN_DEFAULT_VHOST"}, Usage: "vhost created at first start"},
		&cli.StringFlag{Name: "loopback-users", Value: "guest", EnvVars: []string{"WARREN_LOOPBACK_USERS"}, Usage: "comma-separated users who may connect only from loopback addresses (empty = none)"},
		&cli.DurationFlag{Name: "handshake-timeout", Value: 10 * time.Second, EnvVars: []string{"WARREN_HANDSHAKE_TIMEOUT"}, Usage: "time allowed from accept to connection.open-ok"},
		&cli.IntFlag{Name: "outbound-cap", Value: 1 << 20, EnvVars: []string{"WARREN_OUTBOUND_CAP"}, Usage: "bytes a connection may have waiting to be written before its consumers pause"},
		&cli.StringFlag{Name: "amqps-addr", EnvVars: []string{"WARREN_AMQPS_ADDR"}, Usage: "AMQP over TLS listen address, e.g. :5671 (empty = off)"},
		&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"WARREN_TLS_CERT"}, Usage: "PEM file of the server certificate (chain)"},
		&cli.StringFlag{Name: "tls-key", EnvVars: []string{"WARREN_TLS_KEY"}, Usage: "PEM file of the server's private key"},
		&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"WARREN_TLS_CA"}, Usage: "PEM file of the CA certificates that sign client certificates"},
		&cli.StringFlag{Name: "tls-verify", Value: "none", EnvVars: []string{"WARREN_TLS_VERIFY"}, Usage: "client certificates: none, optional or required"},
		&cli.IntFlag{Name: "max-connections", EnvVars: []string{"WARREN_MAX_CONNECTIONS"}, Usage: "open connections allowed on the node (0 = no limit)"},
		&cli.IntFlag{Name: "max-connections-per-vhost", EnvVars: []string{"WARREN_MAX_CONNECTIONS_PER_VHOST"}, Usage: "open connections allowed per vhost (0 = no limit)"},
		&cli.IntFlag{Name: "max-connections-per-user", EnvVars: []string{"WARREN_MAX_CONNECTIONS_PER_USER"}, Usage: "open connections allowed per user (0 = no limit)"},
		&cli.IntFlag{Name: "max-queues-per-vhost", EnvVars: []string{"WARREN_MAX_QUEUES_PER_VHOST"}, Usage: "queues allowed per vhost (0 = no limit)"},
		&cli.Float64Flag{Name: "memory-high-watermark", Value: 0.4, EnvVars: []string{"WARREN_MEMORY_HIGH_WATERMARK"}, Usage: "fraction of RAM above which publishers are blocked (negative = off)"},
		&cli.Uint64Flag{Name: "memory-high-watermark-bytes", EnvVars: []string{"WARREN_MEMORY_HIGH_WATERMARK_BYTES"}, Usage: "absolute memory limit in bytes, instead of the fraction (0 = use the fraction)"},
		&cli.Float64Flag{Name: "memory-high-watermark-paging-ratio", Value: 0.5, EnvVars: []string{"WARREN_MEMORY_HIGH_WATERMARK_PAGING_RATIO"}, Usage: "fraction of the memory high watermark above which transient messages are paged out to disk too"},
		&cli.IntFlag{Name: "queue-memory-messages", Value: 16384, EnvVars: []string{"WARREN_QUEUE_MEMORY_MESSAGES"}, Usage: "ready messages whose bodies a queue keeps in RAM; beyond them bodies are paged out to disk"},
		&cli.Int64Flag{Name: "queue-memory-bytes", Value: 16 << 20, EnvVars: []string{"WARREN_QUEUE_MEMORY_BYTES"}, Usage: "body bytes a queue keeps in RAM; beyond them bodies are paged out to disk"},
		&cli.Uint64Flag{Name: "disk-free-limit", Value: 50_000_000, EnvVars: []string{"WARREN_DISK_FREE_LIMIT"}, Usage: "free bytes on the data dir's disk below which publishers are blocked"},
		&cli.IntFlag{Name: "max-table-depth", Value: amqp.MaxTableDepth, EnvVars: []string{"WARREN_MAX_TABLE_DEPTH"}, Usage: fmt.Sprintf("deepest nesting of field tables and arrays accepted from clients (1-%d)", amqp.MaxTableDepth)},
	}, append(clusterFlags(), quorumFlags()...)...)...)
}

// loopbackUsers splits the --loopback-users list; empty means none.
func loopbackUsers(s string) []string {
	out := []string{}
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

func newLogger(level, format string) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	var cfg zap.Config
	switch format {
	case "json":
		cfg = zap.NewProductionConfig()
	case "console":
		cfg = zap.NewDevelopmentConfig()
		cfg.DisableStacktrace = true
	default:
		return nil, fmt.Errorf("log format %q: want console or json", format)
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	return cfg.Build()
}

func runServer(cc *cli.Context) error {
	if cc.NArg() > 0 {
		return fmt.Errorf("unknown command %q: the commands are server, bench and ctl (warren --help)", cc.Args().First())
	}
	if err := applyConfigFile(cc); err != nil {
		return err
	}
	log, err := newLogger(cc.String("log-level"), cc.String("log-format"))
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	gcPolicy, stopGC := tuneGC()
	defer stopGC()
	log.Debug("go gc target", zap.String("gogc", gcPolicy))
	hb := cc.Duration("heartbeat")
	if hb == 0 {
		hb = -1
	}
	var tlsCfg *tls.Config
	if cc.String("amqps-addr") != "" {
		if tlsCfg, err = loadTLS(cc.String("tls-cert"), cc.String("tls-key"), cc.String("tls-ca"), cc.String("tls-verify")); err != nil {
			return err
		}
	}
	st, err := store.Open(store.Config{Dir: cc.String("data-dir"), Logger: log, Repair: cc.Bool("repair-data-dir")})
	if err != nil {
		return err
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Error("closing store", zap.Error(err))
		}
	}()
	cl, err := newClustered(cc, log)
	if err != nil {
		return err
	}
	var defLog func(broker.DefinitionMachine) broker.DefinitionLog
	var defLogErr error
	var view broker.ClusterView
	var groups broker.QuorumGroups
	if cl != nil {
		defer cl.close()
		defLog = cl.definitionLog(cc, st, &defLogErr)
		view = cl
		if groups, err = cl.quorumGroups(cc); err != nil {
			return err
		}
	}
	b, err := broker.New(broker.Config{
		Store:          st,
		AMQPAddr:       cc.String("amqp-addr"),
		FrameMax:       uint32(cc.Uint("frame-max")),
		ChannelMax:     uint16(cc.Uint("channel-max")),
		Heartbeat:      hb,
		MaxMessageSize: cc.Uint64("max-message-size"),
		DefaultUser:    cc.String("default-user"),
		DefaultPass:    cc.String("default-pass"),
		Logger:         log,

		DefaultVHost:             cc.String("default-vhost"),
		LoopbackUsers:            loopbackUsers(cc.String("loopback-users")),
		HandshakeTimeout:         cc.Duration("handshake-timeout"),
		OutboundCap:              cc.Int("outbound-cap"),
		AMQPSAddr:                cc.String("amqps-addr"),
		TLS:                      tlsCfg,
		MaxConnections:           cc.Int("max-connections"),
		MaxConnectionsPerVHost:   cc.Int("max-connections-per-vhost"),
		MaxConnectionsPerUser:    cc.Int("max-connections-per-user"),
		MaxQueuesPerVHost:        cc.Int("max-queues-per-vhost"),
		MemoryHighWatermark:      cc.Float64("memory-high-watermark"),
		MemoryHighWatermarkBytes: cc.Uint64("memory-high-watermark-bytes"),
		PagingRatio:              cc.Float64("memory-high-watermark-paging-ratio"),
		QueueMemoryMessages:      cc.Int("queue-memory-messages"),
		QueueMemoryBytes:         cc.Int64("queue-memory-bytes"),
		DiskFreeLimit:            cc.Uint64("disk-free-limit"),
		DataDir:                  cc.String("data-dir"),
		MaxTableDepth:            cc.Int("max-table-depth"),
		DefinitionLog:            defLog,
		Cluster:                  view,
		NodeName:                 cl.nodeName(),
		Link:                     cl.brokerLink(),
		QuorumGroups:             groups,
		BeforeAccept:             cl.catchUp,
	})
	if err == nil {
		err = defLogErr
	}
	if err != nil {
		return err
	}
	cl.serveLink(b)
	if addr := cc.String("pprof-addr"); addr != "" {
		stopPprof, err := startPprof(addr, log)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	if err := b.Listen(); err != nil {
		return err
	}
	ws, stopWeb, err := startWeb(cc, b, log)
	if err != nil {
		return err
	}
	defer stopWeb()
	ctx, stop := signal.NotifyContext(cc.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if cl != nil {
		if err := cl.run(ctx); err != nil {
			return err
		}
		cl.followMembers()
		if cl.groups != nil {
			if err := cl.groups.start(ctx, cc, st, b); err != nil {
				return err
			}
		}
	}
	logBanner(log, cc.String("data-dir"), b, ws)
	err = b.Serve(ctx)
	if errors.Is(err, broker.ErrClosed) || errors.Is(err, context.Canceled) {
		log.Info("warren stopped")
		return nil
	}
	return err
}
