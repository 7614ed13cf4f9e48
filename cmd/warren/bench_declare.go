package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// declareConfig is `warren bench declare`: queue declarations per second
// through one broker (with a cluster, one node), from Clients connections
// with a channel each.
type declareConfig struct {
	URI      string
	Clients  int
	Duration time.Duration
	// Durable declares durable queues (the default; a cluster replicates
	// either kind of definition).
	Durable bool
	// Keep declares a new name each time and deletes them all after the
	// timed phase; otherwise every declare is followed by the delete of the
	// same queue, and both are timed.
	Keep bool
	Out  io.Writer
}

func (cfg *declareConfig) validate() error {
	switch {
	case cfg.Clients < 1:
		return fmt.Errorf("--clients %d: want at least 1", cfg.Clients)
	case cfg.Duration <= 0:
		return errors.New("--duration: want a positive duration")
	}
	return nil
}

// declareResult is what a declare run measured. Declared counts
// queue.declare-ok replies within the timed phase, Deleted the queue.delete-ok
// replies (in it, or after it with Keep).
type declareResult struct {
	Declared uint64
	Deleted  uint64
	Failures uint64
	// Rate is declarations per second over the timed phase; OpRate counts
	// the deletes too (without Keep).
	Rate, OpRate  float64
	Duration      time.Duration
	P50, P99, Max time.Duration // of a queue.declare round trip
	FirstFailure  error
}

// benchRunID is a random token that keeps the names of one run apart from
// any other run's on the same broker.
func benchRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// declareClient is one connection and channel of a declare run, used by
// its goroutine only, but for abort.
type declareClient struct {
	uri  string
	name string
	ch   *amqp.Channel
	mu   sync.Mutex // guards conn's writes by the client and its read by abort
	conn *amqp.Connection
}

// abort closes the client's connection at once, from any goroutine: a
// call blocked on it returns with an error.
func (c *declareClient) abort() {
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn != nil {
		_ = conn.CloseDeadline(time.Now())
	}
}

func (c *declareClient) setConn(conn *amqp.Connection) {
	c.mu.Lock()
	c.conn = conn
	c.mu.Unlock()
}

// channel returns the client's open channel, reconnecting if the broker
// closed it or the connection.
func (c *declareClient) channel() (*amqp.Channel, error) {
	if c.ch != nil && !c.ch.IsClosed() {
		return c.ch, nil
	}
	if c.conn == nil || c.conn.IsClosed() {
		if c.conn != nil {
			_ = c.conn.Close()
		}
		c.setConn(nil)
		c.ch = nil
		conn, err := amqp.DialConfig(c.uri, amqp.Config{
			Properties: benchProps(c.name), Locale: "en_US", Dial: amqp.DefaultDial(2 * time.Second),
		})
		if err != nil {
			return nil, err
		}
		c.setConn(conn)
	}
	ch, err := c.conn.Channel()
	if err != nil {
		return nil, err
	}
	c.ch = ch
	return ch, nil
}

func (c *declareClient) close() {
	if c.conn != nil {
		_ = c.conn.Close()
	}
	c.setConn(nil)
	c.ch = nil
}

func benchProps(name string) amqp.Table {
	p := amqp.NewConnectionProperties()
	p.SetClientConnectionName(name)
	return p
}

// runDeclare runs cfg.Clients loops of queue declarations (each followed by
// its delete, or, with Keep, all deleted at the end) for cfg.Duration or
// until ctx is done.
func runDeclare(ctx context.Context, cfg declareConfig) (declareResult, error) {
	if err := cfg.validate(); err != nil {
		return declareResult{}, err
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	prefix := "warren-bench-declare-" + benchRunID()
	clients := make([]*declareClient, cfg.Clients)
	for i := range clients {
		clients[i] = &declareClient{uri: cfg.URI, name: fmt.Sprintf("warren-bench-declare-%d", i)}
		if _, err := clients[i].channel(); err != nil {
			for _, c := range clients[:i] {
				c.close()
			}
			return declareResult{}, fmt.Errorf("connect: %w", err)
		}
	}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()

	var (
		declared, deleted, failures atomic.Uint64
		errMu                       sync.Mutex
		firstErr                    error
		hist                        latencyHist
	)
	fail := func(err error) {
		failures.Add(1)
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	kept := make([][]string, cfg.Clients)
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			for n := 0; runCtx.Err() == nil; n++ {
				ch, err := c.channel()
				if err != nil {
					fail(err)
					sleepCtx(runCtx, 50*time.Millisecond)
					continue
				}
				name := fmt.Sprintf("%s-%d-%d", prefix, i, n)
				t0 := time.Now()
				if _, err := ch.QueueDeclare(name, cfg.Durable, false, false, false, nil); err != nil {
					fail(fmt.Errorf("declare %s: %w", name, err))
					continue
				}
				hist.record(int64(time.Since(t0)))
				declared.Add(1)
				if cfg.Keep {
					kept[i] = append(kept[i], name)
					continue
				}
				if _, err := ch.QueueDelete(name, false, false, false); err != nil {
					fail(fmt.Errorf("delete %s: %w", name, err))
					continue
				}
				deleted.Add(1)
			}
		})
	}
	rep := time.NewTicker(time.Second)
	repDone := make(chan struct{})
	go func() {
		defer close(repDone)
		var last uint64
		for {
			select {
			case <-runCtx.Done():
				return
			case <-rep.C:
				d := declared.Load()
				fmt.Fprintf(cfg.Out, "time %.0fs, declared %d/s, failures %d\n", time.Since(start).Seconds(), d-last, failures.Load())
				last = d
			}
		}
	}()
	wg.Wait()
	elapsed := time.Since(start)
	rep.Stop()
	<-repDone // runCtx is done: its deadline passed or ctx was cancelled
	res := declareResult{Declared: declared.Load(), Duration: elapsed}
	res.Rate = float64(res.Declared) / elapsed.Seconds()
	res.OpRate = float64(res.Declared+deleted.Load()) / elapsed.Seconds()
	if cfg.Keep {
		// Not timed: the run's queues go, each client deleting its own.
		for i, c := range clients {
			wg.Go(func() {
				for _, name := range kept[i] {
					ch, err := c.channel()
					if err == nil {
						_, err = ch.QueueDelete(name, false, false, false)
					}
					if err != nil {
						fail(fmt.Errorf("delete %s: %w", name, err))
						continue
					}
					deleted.Add(1)
				}
			})
		}
		wg.Wait()
	}
	var s histSnapshot
	hist.drainInto(&s)
	res.P50, res.P99, res.Max = s.quantile(0.5), s.quantile(0.99), s.max()
	res.Deleted = deleted.Load()
	res.Failures = failures.Load()
	res.FirstFailure = firstErr
	return res, nil
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
