package main

import (
	"context"
	"errors"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/web"
)

// webFlags are the flags of the management API and metrics listeners.
func webFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "http-addr", Value: ":15672", EnvVars: []string{"WARREN_HTTP_ADDR"}, Usage: "management API and console listen address (\"-\" = off)"},
		&cli.StringFlag{Name: "metrics-addr", Value: ":15692", EnvVars: []string{"WARREN_METRICS_ADDR"}, Usage: "Prometheus /metrics listen address (\"-\" = off)"},
	}
}

// startWeb binds the management and metrics listeners and serves them
// beside the broker; s is nil when they are off. The returned stop closes
// them and waits.
func startWeb(cc *cli.Context, b *broker.Broker, log *zap.Logger) (s *web.Server, stop func(), err error) {
	addr := cc.String("http-addr")
	if addr == "-" {
		return nil, func() {}, nil
	}
	s, err = web.New(web.Config{Addr: addr, MetricsAddr: cc.String("metrics-addr"), Logger: log}, b)
	if err != nil {
		return nil, nil, err
	}
	if err := s.Listen(); err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Serve(context.Background()); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("http server stopped", zap.Error(err))
		}
	}()
	return s, func() {
		_ = s.Close()
		<-done
	}, nil
}
