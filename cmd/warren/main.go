// Command warren runs the Warren AMQP 0-9-1 broker.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

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
		Commands: []*cli.Command{server, benchCommand()},
	}
}

func serverFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "amqp-addr", Value: ":5672", EnvVars: []string{"WARREN_AMQP_ADDR"}, Usage: "AMQP listen address"},
		&cli.StringFlag{Name: "data-dir", Value: "./data", EnvVars: []string{"WARREN_DATA_DIR"}, Usage: "directory for the broker's data"},
		&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"WARREN_LOG_LEVEL"}, Usage: "debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", Value: "console", EnvVars: []string{"WARREN_LOG_FORMAT"}, Usage: "console or json"},
		&cli.UintFlag{Name: "frame-max", Value: 131072, EnvVars: []string{"WARREN_FRAME_MAX"}, Usage: "largest frame offered to clients, in bytes"},
		&cli.UintFlag{Name: "channel-max", Value: 2047, EnvVars: []string{"WARREN_CHANNEL_MAX"}, Usage: "highest channel number offered to clients"},
		&cli.DurationFlag{Name: "heartbeat", Value: 60 * time.Second, EnvVars: []string{"WARREN_HEARTBEAT"}, Usage: "heartbeat interval offered to clients (0 disables)"},
		&cli.Uint64Flag{Name: "max-message-size", Value: 128 << 20, EnvVars: []string{"WARREN_MAX_MESSAGE_SIZE"}, Usage: "largest message body accepted, in bytes"},
		&cli.StringFlag{Name: "default-user", Value: "guest", EnvVars: []string{"WARREN_DEFAULT_USER"}, Usage: "user created at first start"},
		&cli.StringFlag{Name: "default-pass", Value: "guest", EnvVars: []string{"WARREN_DEFAULT_PASS"}, Usage: "password of the default user"},
		&cli.StringFlag{Name: "pprof-addr", EnvVars: []string{"WARREN_PPROF_ADDR"}, Usage: "serve net/http/pprof on this address (empty = off)"},
	}
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
	log, err := newLogger(cc.String("log-level"), cc.String("log-format"))
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	hb := cc.Duration("heartbeat")
	if hb == 0 {
		hb = -1
	}
	st, err := store.Open(store.Config{Dir: cc.String("data-dir"), Logger: log})
	if err != nil {
		return fmt.Errorf("opening data dir: %w", err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Error("closing store", zap.Error(err))
		}
	}()
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
	})
	if err != nil {
		return err
	}
	if addr := cc.String("pprof-addr"); addr != "" {
		stopPprof, err := startPprof(addr, log)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	ctx, stop := signal.NotifyContext(cc.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("starting warren", zap.String("version", broker.Version), zap.String("data-dir", cc.String("data-dir")))
	err = b.Serve(ctx)
	if errors.Is(err, broker.ErrClosed) || errors.Is(err, context.Canceled) {
		log.Info("warren stopped")
		return nil
	}
	return err
}
