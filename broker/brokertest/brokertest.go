// Package brokertest starts an in-process Warren broker on 127.0.0.1:0 for
// tests, in the manner of net/http/httptest.
package brokertest

import (
	"context"
	"fmt"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/store"
)

// Server is a running broker.
type Server struct {
	*broker.Broker
	// URL is the amqp:// URL of the server with the default credentials and
	// vhost (no path: some clients read "/" as the empty vhost name).
	URL string
	// Addr is host:port of the AMQP listener.
	Addr string
	// TLSAddr is host:port of the amqps listener, when cfg has TLS.
	TLSAddr string
	done    chan error
}

// Start runs a broker for the duration of the test; cfg may be nil. The
// broker is closed by t.Cleanup. Unless cfg names a Store, the broker gets
// a store of its own in a temporary directory, closed after the broker.
func Start(t testing.TB, cfg *broker.Config) *Server {
	t.Helper()
	var c broker.Config
	if cfg != nil {
		c = *cfg
	}
	c.AMQPAddr = "127.0.0.1:0"
	if c.TLS != nil {
		c.AMQPSAddr = "127.0.0.1:0"
	}
	if c.Logger == nil {
		c.Logger = zaptest.NewLogger(t)
	}
	if c.Store == nil {
		st, err := store.Open(store.Config{Dir: t.TempDir(), Logger: c.Logger})
		if err != nil {
			t.Fatalf("brokertest: opening store: %v", err)
		}
		// Registered first, so it runs after the broker's cleanup.
		t.Cleanup(func() { _ = st.Close() })
		c.Store = st
	}
	b, err := broker.New(c)
	if err != nil {
		t.Fatalf("brokertest: %v", err)
	}
	if err := b.Listen(); err != nil {
		t.Fatalf("brokertest: %v", err)
	}
	s := &Server{Broker: b, Addr: b.Addr().String(), done: make(chan error, 1)}
	if a := b.AMQPSAddr(); a != nil {
		s.TLSAddr = a.String()
	}
	s.URL = fmt.Sprintf("amqp://guest:guest@%s", s.Addr)
	go func() { s.done <- b.Serve(context.Background()) }()
	t.Cleanup(func() {
		_ = b.Close()
		<-s.done
	})
	return s
}
