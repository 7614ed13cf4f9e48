package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// runConnectOnly opens cfg.ConnectOnly connections with one channel each,
// ConnectParallelism at a time, reports how long that took, holds them for
// cfg.Duration (or until ctx is done) and closes them. Failures counts
// connections that could not be opened or that the broker closed while held.
func runConnectOnly(ctx context.Context, cfg *benchConfig) (benchResult, error) {
	n := cfg.ConnectOnly
	par := min(max(cfg.ConnectParallelism, 1), n)
	conns := make([]*amqp.Connection, n)
	closed := make([]chan *amqp.Error, n)
	// With the raw client the tool's own cost per handshake is small, so
	// the time measured is the broker's; with amqp091-go it is mostly the
	// client's.
	raw := cfg.Client == "" || cfg.Client == benchClientRaw
	rawConns := make([]*rawConn, n)
	var (
		next     atomic.Int64
		failures atomic.Uint64
		errMu    sync.Mutex
		firstErr error
	)
	failed := func(err error) {
		failures.Add(1)
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}

	start := time.Now()
	var wg sync.WaitGroup
	for range par {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if raw {
					rc, err := rawDial(cfg.URI, fmt.Sprintf("warren-bench-c%d", i), 4096)
					if err != nil {
						failed(fmt.Errorf("connect: %w", err))
						continue
					}
					if _, err := rc.openChannel(); err != nil {
						failed(fmt.Errorf("open channel: %w", err))
						rc.shutdown()
						rc.bg.Wait()
						continue
					}
					rawConns[i] = rc
					continue
				}
				c, err := benchDial(cfg.URI, fmt.Sprintf("warren-bench-c%d", i))
				if err != nil {
					failed(fmt.Errorf("connect: %w", err))
					continue
				}
				if _, err := c.Channel(); err != nil {
					failed(fmt.Errorf("open channel: %w", err))
					_ = c.Close()
					continue
				}
				conns[i] = c
				closed[i] = c.NotifyClose(make(chan *amqp.Error, 1))
			}
		})
	}
	wg.Wait()
	res := benchResult{Connect: time.Since(start), QueueDepth: -1}
	opened := 0
	for i, c := range conns {
		if c != nil || rawConns[i] != nil {
			opened++
		}
	}
	res.Connections = opened
	fmt.Fprintf(cfg.Out, "connections open: %d of %d with a channel each in %d ms, failures: %d\n",
		opened, n, res.Connect.Milliseconds(), failures.Load())

	held := time.Now()
	if cfg.Duration > 0 {
		t := time.NewTimer(cfg.Duration)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	res.Duration = time.Since(held)

	for i, c := range conns {
		if c == nil {
			continue
		}
		select {
		case err := <-closed[i]:
			failed(fmt.Errorf("connection closed while held: %v", err))
			conns[i] = nil
		default:
		}
	}
	// Close in parallel too: a thousand sequential close handshakes take a
	// while.
	next.Store(0)
	for range par {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if conns[i] != nil {
					_ = conns[i].Close()
				}
				if rc := rawConns[i]; rc != nil {
					rc.shutdown()
					rc.bg.Wait()
				}
			}
		})
	}
	wg.Wait()
	res.Failures = failures.Load()
	res.FirstFailure = firstErr
	return res, nil
}
