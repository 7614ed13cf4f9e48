package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"

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
		&cli.StringFlag{Name: "https-addr", EnvVars: []string{"WARREN_HTTPS_ADDR"}, Usage: "management API and console over TLS listen address (RabbitMQ uses :15671); needs https-cert and https-key, or tls-cert and tls-key"},
		&cli.StringFlag{Name: "https-cert", EnvVars: []string{"WARREN_HTTPS_CERT"}, Usage: "PEM file of the HTTPS listener's certificate (chain) (default: tls-cert)"},
		&cli.StringFlag{Name: "https-key", EnvVars: []string{"WARREN_HTTPS_KEY"}, Usage: "PEM file of the HTTPS listener's private key (default: tls-key)"},
	}
}

// httpsTLS loads the HTTPS listener's certificate, as RabbitMQ's
// management.ssl.certfile and keyfile; nil without --https-addr.
func httpsTLS(cc *cli.Context) (*tls.Config, error) {
	if cc.String("https-addr") == "" {
		return nil, nil
	}
	cert, key := cc.String("https-cert"), cc.String("https-key")
	if cert == "" && key == "" {
		cert, key = cc.String("tls-cert"), cc.String("tls-key")
	}
	if cert == "" || key == "" {
		return nil, errors.New("--https-addr needs --https-cert and --https-key (or --tls-cert and --tls-key)")
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("HTTPS certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// startWeb binds the management and metrics listeners and serves them
// beside the broker; s is nil when they are off. The returned stop closes
// them and waits.
func startWeb(cc *cli.Context, b *broker.Broker, log *zap.Logger) (s *web.Server, stop func(), err error) {
	addr := cc.String("http-addr")
	if addr == "-" {
		return nil, func() {}, nil
	}
	tlsCfg, err := httpsTLS(cc)
	if err != nil {
		return nil, nil, err
	}
	s, err = web.New(web.Config{Addr: addr, MetricsAddr: cc.String("metrics-addr"), HTTPSAddr: cc.String("https-addr"), TLS: tlsCfg, Logger: log}, b)
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
