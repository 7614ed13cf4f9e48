package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// queuesConfig is `warren bench queues`: Count queues named Prefix-0 ..
// Prefix-(Count-1) declared (durable, with Args) by Clients clients spread
// over URIs (client i on URIs[i mod len]), each queue through the node its
// client is on; with Use, every queue is then used once: a persistent
// message published with a confirm and fetched back with basic.get and an
// ack. With Delete the queues are deleted instead (nothing declared).
type queuesConfig struct {
	URIs    []string
	Count   int
	Clients int
	Prefix  string
	Args    amqp.Table
	Use     bool
	Delete  bool
	Out     io.Writer
}

func (cfg *queuesConfig) validate() error {
	switch {
	case len(cfg.URIs) == 0:
		return errors.New("--uri: want at least one")
	case cfg.Count < 1 || cfg.Clients < 1:
		return errors.New("--count and --clients: want at least 1")
	case cfg.Prefix == "":
		return errors.New("--prefix: want a name")
	}
	return nil
}

// queuesResult: declarations (or deletions) and their time, then the uses.
type queuesResult struct {
	Done         uint64 // declared (or deleted)
	Used         uint64
	Failures     uint64
	Elapsed      time.Duration // of the declarations (or deletions)
	UseElapsed   time.Duration
	FirstFailure error
}

func runQueues(ctx context.Context, cfg queuesConfig) (queuesResult, error) {
	if err := cfg.validate(); err != nil {
		return queuesResult{}, err
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	clients := make([]*declareClient, cfg.Clients)
	for i := range clients {
		clients[i] = &declareClient{uri: cfg.URIs[i%len(cfg.URIs)], name: fmt.Sprintf("warren-bench-queues-%d", i)}
	}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	var (
		res      queuesResult
		done     atomic.Uint64
		used     atomic.Uint64
		failures atomic.Uint64
		errMu    sync.Mutex
	)
	fail := func(err error) {
		failures.Add(1)
		errMu.Lock()
		if res.FirstFailure == nil {
			res.FirstFailure = err
		}
		errMu.Unlock()
	}
	// each runs f on every queue of client i (queues i, i+Clients, ...),
	// with one retry on a new channel after a failure.
	each := func(f func(ch *amqp.Channel, name string) error) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() {
				for q := i; q < cfg.Count && ctx.Err() == nil; q += cfg.Clients {
					name := fmt.Sprintf("%s-%d", cfg.Prefix, q)
					var err error
					for range 2 {
						var ch *amqp.Channel
						if ch, err = c.channel(); err == nil {
							if err = f(ch, name); err == nil {
								break
							}
						}
					}
					if err != nil {
						fail(fmt.Errorf("%s: %w", name, err))
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	if cfg.Delete {
		res.Elapsed = each(func(ch *amqp.Channel, name string) error {
			_, err := ch.QueueDelete(name, false, false, false)
			if err == nil {
				done.Add(1)
			}
			return err
		})
	} else {
		res.Elapsed = each(func(ch *amqp.Channel, name string) error {
			_, err := ch.QueueDeclare(name, true, false, false, false, cfg.Args)
			if err == nil {
				if n := done.Add(1); n%1000 == 0 {
					fmt.Fprintf(cfg.Out, "declared %d queues\n", n)
				}
			}
			return err
		})
	}
	if cfg.Use && !cfg.Delete {
		res.UseElapsed = each(func(ch *amqp.Channel, name string) error {
			if err := useQueue(ctx, ch, name); err != nil {
				return err
			}
			used.Add(1)
			return nil
		})
	}
	res.Done, res.Used, res.Failures = done.Load(), used.Load(), failures.Load()
	return res, ctx.Err()
}

// useQueue publishes one persistent message to queue name, waits for its
// confirm, and fetches it back (basic.get, acked).
func useQueue(ctx context.Context, ch *amqp.Channel, name string) error {
	if err := ch.Confirm(false); err != nil {
		return err
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", name, false, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("warren-bench")})
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("publish nacked")
	}
	for {
		m, got, err := ch.Get(name, false)
		if err != nil {
			return err
		}
		if got {
			return m.Ack(false)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}
