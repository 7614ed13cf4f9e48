package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// delayedConfig is `warren bench delayed`: delayed messages (exchange type
// x-delayed-message, header x-delay) against a running broker. It
//
//  1. publishes Waiting persistent messages with random delays of up to
//     MaxDelay to a queue without consumers (the backlog), with confirms,
//     and reports their publish rate and, with PID, the broker's RSS
//     above its RSS before them (peak, and after Settle);
//  2. with Rate > 0, publishes Rate messages a second for Steady, each due
//     Lead after it is sent, to a queue with a consumer, and reports how
//     late each reached the consumer after its due time (firing accuracy
//     under a steady flow, behind the backlog, which keeps coming due too);
//  3. with Burst > 0, publishes Burst messages due at one moment and
//     reports their lateness and the rate at which they arrived.
//
// Every message's body starts with its due time (Unix milliseconds, as the
// broker counts x-delay from its arrival in whole milliseconds); a message
// consumed more than a millisecond before it is counted as early.
type delayedConfig struct {
	URI      string
	Waiting  int
	MaxDelay time.Duration
	Size     int
	Settle   time.Duration
	Rate     int
	Steady   time.Duration
	Lead     time.Duration
	Burst    int
	PID      int
	Out      io.Writer
	// Proc is the proc file system, "/proc".
	Proc string
}

func (cfg *delayedConfig) validate() error {
	switch {
	case cfg.Waiting < 0 || cfg.Rate < 0 || cfg.Burst < 0:
		return errors.New("--waiting, --rate and --burst: want 0 or more")
	case cfg.Waiting > 0 && cfg.MaxDelay < time.Minute:
		return fmt.Errorf("--max-delay %v: want at least a minute", cfg.MaxDelay)
	case cfg.Rate > 0 && (cfg.Steady <= 0 || cfg.Lead <= 0):
		return errors.New("--rate needs a positive --steady and --lead")
	case cfg.Size < 8:
		return fmt.Errorf("--size %d: want at least 8 (the due time)", cfg.Size)
	}
	return nil
}

// lateness summarises how late (ms after their due time) messages arrived.
type lateness struct {
	Count          int
	Early          int     // arrived more than 1 ms before their time
	P50, P99, Max  float64 // ms
	ReceivedPerSec float64 // from the first arrival to the last
}

func summarise(late []float64, first, last time.Time, early int) lateness {
	l := lateness{Count: len(late), Early: early}
	if len(late) == 0 {
		return l
	}
	slices.Sort(late)
	l.P50, l.P99, l.Max = late[len(late)/2], late[len(late)*99/100], late[len(late)-1]
	if d := last.Sub(first).Seconds(); d > 0 {
		l.ReceivedPerSec = float64(len(late)) / d
	}
	return l
}

type delayedResult struct {
	PublishRate             float64 // backlog, confirmed msg/s
	RSSIdle, RSSPeak, RSSAt uint64  // bytes: before the backlog, highest sample, after Settle
	Steady, Burst           lateness
}

// runDelayed runs the three phases against cfg.URI and deletes what it
// declared.
func runDelayed(ctx context.Context, cfg delayedConfig) (res delayedResult, err error) {
	if err := cfg.validate(); err != nil {
		return res, err
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Proc == "" {
		cfg.Proc = "/proc"
	}
	conn, err := amqp.Dial(cfg.URI)
	if err != nil {
		return res, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return res, err
	}
	ex := "warren-bench-delayed-" + benchRunID()
	if err := ch.ExchangeDeclare(ex, "x-delayed-message", true, false, false, false, amqp.Table{"x-delayed-type": "direct"}); err != nil {
		return res, fmt.Errorf("declare %s: %w", ex, err)
	}
	waitingQ, dueQ := ex+"-waiting", ex+"-due"
	for _, q := range []string{waitingQ, dueQ} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			return res, err
		}
		if err := ch.QueueBind(q, q, ex, false, nil); err != nil {
			return res, err
		}
	}
	defer func() {
		// Fresh channel: the run's may be closed by an error.
		if c, err := conn.Channel(); err == nil {
			_ = c.ExchangeDelete(ex, false, false)
			_, _ = c.QueueDelete(waitingQ, false, false, false)
			_, _ = c.QueueDelete(dueQ, false, false, false)
		}
	}()
	pub, err := newDelayedPublisher(conn, ex, cfg.Size)
	if err != nil {
		return res, err
	}

	// 1. The backlog.
	rss := func() uint64 {
		if cfg.PID == 0 {
			return 0
		}
		status, err := os.ReadFile(fmt.Sprintf("%s/%d/status", cfg.Proc, cfg.PID))
		if err != nil {
			return 0
		}
		v, _ := procRSS(status)
		return v
	}
	res.RSSIdle = rss()
	var peak atomic.Uint64
	peak.Store(res.RSSIdle)
	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	if cfg.PID != 0 {
		sampling.Add(1)
		go func() {
			defer sampling.Done()
			t := time.NewTicker(250 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stopSampling:
					return
				case <-t.C:
				}
				if v := rss(); v > peak.Load() {
					peak.Store(v)
				}
			}
		}()
	}
	if cfg.Waiting > 0 {
		fmt.Fprintf(cfg.Out, "publishing %d delayed messages (delays up to %v)\n", cfg.Waiting, cfg.MaxDelay)
		start := time.Now()
		maxMs := cfg.MaxDelay.Milliseconds()
		err := pub.publishN(ctx, cfg.Waiting, func(int) (string, int64) {
			// At least a minute: none of them comes due before the steady
			// phase has started.
			return waitingQ, 60_000 + rand.Int64N(maxMs-60_000+1)
		})
		if err != nil {
			return res, fmt.Errorf("backlog: %w", err)
		}
		res.PublishRate = float64(cfg.Waiting) / time.Since(start).Seconds()
		fmt.Fprintf(cfg.Out, "backlog confirmed at %.0f msg/s; settling %v\n", res.PublishRate, cfg.Settle)
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(cfg.Settle):
		}
	}
	res.RSSAt = rss()
	close(stopSampling)
	sampling.Wait()
	res.RSSPeak = max(peak.Load(), res.RSSAt)

	// 2 and 3 consume from the due queue.
	cch, err := conn.Channel()
	if err != nil {
		return res, err
	}
	deliveries, err := cch.Consume(dueQ, "", true, false, false, false, nil)
	if err != nil {
		return res, err
	}
	if cfg.Rate > 0 {
		n := int(float64(cfg.Rate) * cfg.Steady.Seconds())
		fmt.Fprintf(cfg.Out, "steady: %d msg/s for %v, each due %v after it is sent\n", cfg.Rate, cfg.Steady, cfg.Lead)
		got := make(chan lateness, 1)
		go func() { got <- collectLateness(ctx, deliveries, n, cfg.Lead+cfg.Steady+30*time.Second, cfg.Out) }()
		interval := time.Second / time.Duration(cfg.Rate)
		start := time.Now()
		if err := pub.publishN(ctx, n, func(i int) (string, int64) {
			// Paced: message i is sent at start + i × interval.
			if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
				time.Sleep(d)
			}
			return dueQ, cfg.Lead.Milliseconds()
		}); err != nil {
			return res, fmt.Errorf("steady: %w", err)
		}
		res.Steady = <-got
	}
	if cfg.Burst > 0 {
		// Due once all are published, at the backlog's rate, with room.
		rate := res.PublishRate
		if rate <= 0 {
			rate = 10_000
		}
		lead := time.Duration(float64(cfg.Burst)/rate*1.5*float64(time.Second)) + 2*time.Second
		due := time.Now().Add(lead).UnixMilli()
		fmt.Fprintf(cfg.Out, "burst: %d messages due at one moment, %v ahead\n", cfg.Burst, lead.Round(time.Millisecond))
		got := make(chan lateness, 1)
		go func() { got <- collectLateness(ctx, deliveries, cfg.Burst, lead+60*time.Second, nil) }()
		if err := pub.publishN(ctx, cfg.Burst, func(int) (string, int64) {
			return dueQ, max(due-time.Now().UnixMilli(), 1)
		}); err != nil {
			return res, fmt.Errorf("burst: %w", err)
		}
		res.Burst = <-got
	}
	if res.Steady.Count < int(float64(cfg.Rate)*cfg.Steady.Seconds()) || res.Burst.Count < cfg.Burst {
		return res, fmt.Errorf("received %d of the steady and %d of the burst messages", res.Steady.Count, res.Burst.Count)
	}
	return res, nil
}

// collectLateness reads n deliveries (or until timeout) and returns their
// lateness after the due time in their bodies. With out, it prints each
// second's count and highest lateness there.
func collectLateness(ctx context.Context, deliveries <-chan amqp.Delivery, n int, timeout time.Duration, out io.Writer) lateness {
	late := make([]float64, 0, n)
	early := 0
	var first, last time.Time
	var secStart time.Time
	secCount, secMax := 0, 0.0
	defer func() {
		if out != nil && secCount > 0 {
			fmt.Fprintf(out, "  %s: %d arrived, latest %.2f ms late\n", secStart.Format("15:04:05"), secCount, secMax)
		}
	}()
	end := time.NewTimer(timeout)
	defer end.Stop()
	for len(late) < n {
		select {
		case <-ctx.Done():
			return summarise(late, first, last, early)
		case <-end.C:
			return summarise(late, first, last, early)
		case d, ok := <-deliveries:
			if !ok {
				return summarise(late, first, last, early)
			}
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			last = now
			if len(d.Body) < 8 {
				continue
			}
			due := time.UnixMilli(int64(binary.BigEndian.Uint64(d.Body)))
			l := float64(now.Sub(due).Microseconds()) / 1000
			if l < -1 {
				early++
			}
			late = append(late, l)
			if out != nil {
				if now.Sub(secStart) >= time.Second {
					if secCount > 0 {
						fmt.Fprintf(out, "  %s: %d arrived, latest %.2f ms late\n", secStart.Format("15:04:05"), secCount, secMax)
					}
					secStart, secCount, secMax = now, 0, 0
				}
				secCount, secMax = secCount+1, max(secMax, l)
			}
		}
	}
	return summarise(late, first, last, early)
}

// delayedPublisher publishes persistent delayed messages with confirms,
// at most 2,000 unconfirmed.
type delayedPublisher struct {
	ch       *amqp.Channel
	ex       string
	size     int
	confirms chan amqp.Confirmation
}

func newDelayedPublisher(conn *amqp.Connection, ex string, size int) (*delayedPublisher, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		return nil, err
	}
	return &delayedPublisher{ch: ch, ex: ex, size: size, confirms: ch.NotifyPublish(make(chan amqp.Confirmation, 4096))}, nil
}

// publishN publishes n messages; next(i) gives message i's routing key
// and delay in ms. Its body starts with its due time: now + delay.
func (p *delayedPublisher) publishN(ctx context.Context, n int, next func(i int) (key string, delay int64)) error {
	const window = 2000
	var acked, nacked atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range p.confirms {
			if !c.Ack {
				nacked.Add(1)
			}
			if acked.Add(1) == int64(n) {
				return
			}
		}
	}()
	body := make([]byte, p.size)
	for i := range n {
		for int64(i)-acked.Load() >= window {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-done:
				return errors.New("the channel closed")
			case <-time.After(50 * time.Microsecond):
			}
		}
		key, delay := next(i)
		binary.BigEndian.PutUint64(body, uint64(time.Now().UnixMilli()+delay))
		if err := p.ch.PublishWithContext(ctx, p.ex, key, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, Headers: amqp.Table{"x-delay": delay}, Body: body,
		}); err != nil {
			return err
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if k := nacked.Load(); k > 0 {
		return fmt.Errorf("%d of %d nacked", k, n)
	}
	return nil
}
