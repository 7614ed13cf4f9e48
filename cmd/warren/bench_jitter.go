package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
)

// `warren bench jitter` measures the machine, not the broker: how late a
// timer of one interval fires in a process that does nothing else. On a
// shared or throttled machine (a VM whose host caps its CPU per period, a
// container with a CPU quota) every process stalls now and then, the
// broker too; a latency figure of the broker is only as good as the
// machine's, and running this beside a benchmark tells the two apart.
// Late wake-ups are also counted by their phase within each 100 ms of the
// wall clock: a CPU quota's period shows there as one phase.

type jitterConfig struct {
	Duration, Interval time.Duration
	Out                io.Writer
}

type jitterResult struct {
	Wakes             int
	P50, P99, P999    time.Duration // how late, beyond the interval
	Max               time.Duration
	Over3ms           int
	PhaseMs, PhaseHit int // the 1 ms phase of 100 ms with most of the late ones, and how many
}

// runJitter sleeps cfg.Interval over and over for cfg.Duration (or until
// ctx ends) and reports how late each wake-up was.
func runJitter(ctx context.Context, cfg jitterConfig) (jitterResult, error) {
	var res jitterResult
	if cfg.Duration <= 0 || cfg.Interval <= 0 || cfg.Interval > cfg.Duration {
		return res, fmt.Errorf("--duration %v, --interval %v: want 0 < interval <= duration", cfg.Duration, cfg.Interval)
	}
	late := make([]time.Duration, 0, int(cfg.Duration/cfg.Interval)+1)
	var phases [100]int
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	end := time.Now().Add(cfg.Duration)
loop:
	for {
		start := time.Now()
		if !start.Before(end) {
			break
		}
		t.Reset(cfg.Interval)
		select {
		case <-ctx.Done():
			break loop
		case <-t.C:
			// Not the time the channel carries: the timer's, not ours.
			now := time.Now()
			l := now.Sub(start) - cfg.Interval
			late = append(late, l)
			if l > 3*time.Millisecond {
				res.Over3ms++
				phases[now.Nanosecond()/int(time.Millisecond)%100]++
			}
		}
	}
	if len(late) == 0 {
		return res, fmt.Errorf("no wake-up measured")
	}
	slices.Sort(late)
	n := len(late)
	res.Wakes, res.P50, res.P99, res.P999, res.Max = n, late[n/2], late[n*99/100], late[n*999/1000], late[n-1]
	for ms, c := range phases {
		if c > res.PhaseHit {
			res.PhaseMs, res.PhaseHit = ms, c
		}
	}
	return res, nil
}

func runJitterCommand(cc *cli.Context) error {
	ctx, stop := signal.NotifyContext(cc.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := runJitter(ctx, jitterConfig{Duration: cc.Duration("duration"), Interval: cc.Duration("interval")})
	if err != nil {
		return err
	}
	ms := func(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 3) }
	if cc.Bool("json") {
		return printJSONLine(map[string]any{
			"wakes": res.Wakes, "p50_ms": ms(res.P50), "p99_ms": ms(res.P99), "p999_ms": ms(res.P999), "max_ms": ms(res.Max),
			"over_3ms": res.Over3ms, "phase_ms": res.PhaseMs, "phase_hits": res.PhaseHit,
		})
	}
	fmt.Printf("machine: %d timer wake-ups of %v, late p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, max %.3f ms; %d over 3 ms",
		res.Wakes, cc.Duration("interval"), ms(res.P50), ms(res.P99), ms(res.P999), ms(res.Max), res.Over3ms)
	if res.Over3ms > 0 {
		fmt.Printf(", %d of them at %d ms of a 100 ms period", res.PhaseHit, res.PhaseMs)
	}
	fmt.Println()
	return nil
}
