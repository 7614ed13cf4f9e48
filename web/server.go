// Package web is Warren's HTTP side: RabbitMQ's management API (the same
// /api paths, methods, status codes and JSON), definitions import and
// export, Prometheus metrics on a listener of their own, and the
// embedded console.
//
// Handlers are thin: they read broker snapshots (broker/snapshot.go) and
// call the broker's management and admin methods. Message rates and their
// history come from one sampler goroutine that reads the broker's
// counters once per tick (rates.go); the broker keeps no history.
//
// The management API and console are served over HTTP on Addr and, with
// HTTPSAddr and a TLS configuration, over HTTPS too, as RabbitMQ's
// management.tcp and management.ssl listeners.
package web

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/broker"
)

// Config is what a Server needs. Zero values take the defaults listed.
type Config struct {
	// Addr is the management API and console address (default ":15672").
	Addr string
	// MetricsAddr is the Prometheus address (default ":15692"); "-"
	// disables the metrics listener.
	MetricsAddr string
	// HTTPSAddr is the address of the management API and console over
	// TLS ("" = none; RabbitMQ uses ":15671"). It needs TLS.
	HTTPSAddr string
	// TLS is the HTTPS listener's configuration, with its certificate.
	TLS *tls.Config
	// SampleInterval is how often message rates are sampled (default 5 s).
	SampleInterval time.Duration
	// Logger receives the server's logs (default: none).
	Logger *zap.Logger
}

func (c *Config) setDefaults() {
	if c.Addr == "" {
		c.Addr = ":15672"
	}
	if c.MetricsAddr == "" {
		c.MetricsAddr = ":15692"
	}
	if c.SampleInterval <= 0 {
		c.SampleInterval = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// Server serves the management API, the console and the metrics.
type Server struct {
	cfg   Config
	b     *broker.Broker
	log   *zap.Logger
	rates *rates
	// globals are the global parameters (api_policies.go).
	globals globalParams

	mu           sync.Mutex
	ln, mln, sln net.Listener
	srv          *http.Server
	msrv         *http.Server
	ssrv         *http.Server
	stop         chan struct{}
	wg           sync.WaitGroup
	closed       bool
}

// New returns a server for b. It does no I/O.
func New(cfg Config, b *broker.Broker) (*Server, error) {
	if b == nil {
		return nil, errors.New("web: nil broker")
	}
	if cfg.HTTPSAddr != "" && (cfg.TLS == nil || len(cfg.TLS.Certificates) == 0 && cfg.TLS.GetCertificate == nil) {
		return nil, errors.New("web: HTTPSAddr needs a TLS configuration with a certificate")
	}
	cfg.setDefaults()
	s := &Server{cfg: cfg, b: b, log: cfg.Logger, stop: make(chan struct{}), globals: globalParams{b}}
	s.rates = newRates(cfg.SampleInterval)
	return s, nil
}

// Handler is the management API and console handler (without metrics).
func (s *Server) Handler() http.Handler { return s.routes() }

// MetricsHandler serves /metrics.
func (s *Server) MetricsHandler() http.Handler { return s.metricsHandler() }

// Listen binds the listeners; Serve calls it when it was not called.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return http.ErrServerClosed
	}
	if s.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return err
	}
	if s.cfg.MetricsAddr != "-" {
		mln, err := net.Listen("tcp", s.cfg.MetricsAddr)
		if err != nil {
			_ = ln.Close()
			return err
		}
		s.mln = mln
	}
	if s.cfg.HTTPSAddr != "" {
		sln, err := net.Listen("tcp", s.cfg.HTTPSAddr)
		if err != nil {
			_ = ln.Close()
			if s.mln != nil {
				_ = s.mln.Close()
				s.mln = nil
			}
			return err
		}
		s.sln = sln
	}
	s.ln = ln
	return nil
}

// HTTPSAddr is the bound HTTPS address, or nil.
func (s *Server) HTTPSAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sln == nil {
		return nil
	}
	return s.sln.Addr()
}

// Addr is the bound management address, or nil before Listen.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// MetricsAddr is the bound metrics address, or nil.
func (s *Server) MetricsAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mln == nil {
		return nil
	}
	return s.mln.Addr()
}

// Serve serves until ctx is done or Close is called, then returns nil.
func (s *Server) Serve(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.srv = &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	srv, ln := s.srv, s.ln
	var msrv *http.Server
	if s.mln != nil {
		s.msrv = &http.Server{Handler: s.metricsHandler(), ReadHeaderTimeout: 10 * time.Second}
		msrv = s.msrv
	}
	mln := s.mln
	var ssrv *http.Server
	sln := s.sln
	if sln != nil {
		cfg := s.cfg.TLS.Clone()
		if cfg.MinVersion == 0 {
			cfg.MinVersion = tls.VersionTLS12
		}
		s.ssrv = &http.Server{Handler: s.srv.Handler, ReadHeaderTimeout: 10 * time.Second, TLSConfig: cfg}
		ssrv = s.ssrv
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.sampleLoop()
	}()
	stop := context.AfterFunc(ctx, func() { _ = s.Close() })
	defer stop()
	errc := make(chan error, 2)
	if msrv != nil {
		go func() { errc <- msrv.Serve(mln) }()
		s.log.Info("metrics listener started", zap.Stringer("addr", mln.Addr()))
	}
	if ssrv != nil {
		go func() { errc <- ssrv.ServeTLS(sln, "", "") }()
		s.log.Info("https listener started", zap.Stringer("addr", sln.Addr()))
	}
	s.log.Info("http listener started", zap.Stringer("addr", ln.Addr()))
	err := srv.Serve(ln)
	for _, other := range []*http.Server{msrv, ssrv} {
		if other == nil {
			continue
		}
		if e := <-errc; err == nil || errors.Is(err, http.ErrServerClosed) {
			err = e
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	_ = s.Close()
	return err
}

// Close stops the listeners and the sampler, giving requests in flight
// a few seconds to finish.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	close(s.stop)
	srv, msrv, ssrv, ln, mln, sln := s.srv, s.msrv, s.ssrv, s.ln, s.mln, s.sln
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, h := range []*http.Server{srv, msrv, ssrv} {
		if h != nil {
			if err := h.Shutdown(ctx); err != nil {
				_ = h.Close()
			}
		}
	}
	if srv == nil && ln != nil {
		_ = ln.Close()
	}
	if msrv == nil && mln != nil {
		_ = mln.Close()
	}
	if ssrv == nil && sln != nil {
		_ = sln.Close()
	}
	s.wg.Wait()
	return nil
}

// sampleLoop samples the broker's counters every SampleInterval until
// Close. It is the server's only background goroutine.
func (s *Server) sampleLoop() {
	t := time.NewTicker(s.cfg.SampleInterval)
	defer t.Stop()
	s.sample(time.Now())
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.sample(now)
		}
	}
}
