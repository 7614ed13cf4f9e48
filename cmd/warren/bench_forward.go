package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// forwardConfig is `warren bench forward`: confirmed publish throughput to
// a queue whose home is node A (declared through A, so client-local places
// it there; a consumer on A drains it), publishing through A itself
// ("local") and through node B ("forwarded"), alternating, Rounds of each.
type forwardConfig struct {
	Home, Via  string // URIs of node A and node B
	Client     string
	Producers  int
	Size       int
	Confirm    int
	Persistent bool
	Duration   time.Duration // of each run
	Rounds     int
	// Queue names the queue; default warren-bench-forward-<random>.
	Queue string
	Out   io.Writer
}

func (cfg *forwardConfig) validate() error {
	switch {
	case cfg.Home == "" || cfg.Via == "":
		return errors.New("forward needs --home (the queue's node) and --via (the node published through)")
	case cfg.Rounds < 1:
		return fmt.Errorf("--rounds %d: want at least 1", cfg.Rounds)
	case cfg.Confirm < 1:
		return fmt.Errorf("--confirm %d: the forwarded figure is of confirmed publishes, want at least 1", cfg.Confirm)
	case cfg.Duration <= 0:
		return errors.New("--duration: want a positive duration")
	}
	return nil
}

// forwardResult holds the confirmed publish rate of every run and their
// medians; Share = Forwarded / Local.
type forwardResult struct {
	LocalRates, ForwardedRates []float64
	Local, Forwarded, Share    float64
	Failures                   uint64
	// Reached is, over the forwarded runs, the lowest share of confirmed
	// messages that reached the queue on A (consumed there, or still in it
	// at the end): below 1, a broker confirmed publishes it did not route
	// to the queue's node (each node kept a queue of its own).
	Reached float64
}

// bench returns the load of one run: the topology and a consumer on Home,
// the producers on publish.
func (cfg *forwardConfig) bench(publish string) benchConfig {
	return benchConfig{
		URI: cfg.Home, PublishURI: publish, Client: cfg.Client,
		Producers: cfg.Producers, Consumers: 1, Queues: 1, QueuePattern: cfg.Queue,
		Size: cfg.Size, ExchangeType: amqp.ExchangeDirect, Confirm: cfg.Confirm, AutoAck: true,
		Persistent: cfg.Persistent, Duration: cfg.Duration, AutoDelete: true,
	}
}

// runForward runs the local and the forwarded load Rounds times each,
// flipping which goes first every round.
func runForward(ctx context.Context, cfg forwardConfig) (forwardResult, error) {
	if err := cfg.validate(); err != nil {
		return forwardResult{}, err
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Queue == "" {
		cfg.Queue = "warren-bench-forward-" + benchRunID()
	}
	res := forwardResult{Reached: 1}
	for round := range cfg.Rounds {
		order := []bool{false, true} // forwarded?
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, fwd := range order {
			via, label := cfg.Home, "local"
			if fwd {
				via, label = cfg.Via, "forwarded"
			}
			r, err := runBench(ctx, cfg.bench(via))
			if err != nil {
				return res, fmt.Errorf("%s run: %w", label, err)
			}
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			res.Failures += r.Failures
			if r.FirstFailure != nil {
				fmt.Fprintf(cfg.Out, "%s run: first failure: %v\n", label, r.FirstFailure)
			}
			// SendRate is over the producers' time, which ends once their
			// last confirms are in: confirmed/sent of it is the confirm rate.
			rate := 0.0
			if r.Sent > 0 {
				rate = r.SendRate * float64(r.Confirmed) / float64(r.Sent)
			}
			fmt.Fprintf(cfg.Out, "round %d/%d %s: %.0f confirmed msg/s (%d sent, %d confirmed, %d nacked)\n",
				round+1, cfg.Rounds, label, rate, r.Sent, r.Confirmed, r.Nacked)
			if fwd {
				if r.Confirmed > 0 {
					res.Reached = min(res.Reached, float64(r.Received+uint64(max(r.QueueDepth, 0)))/float64(r.Confirmed))
				}
				res.ForwardedRates = append(res.ForwardedRates, rate)
			} else {
				res.LocalRates = append(res.LocalRates, rate)
			}
		}
	}
	res.Local, res.Forwarded = medianFloat(res.LocalRates), medianFloat(res.ForwardedRates)
	if res.Local > 0 {
		res.Share = res.Forwarded / res.Local
	}
	return res, nil
}

// medianFloat returns the median of vs (the mean of the middle two for an
// even count), 0 for none.
func medianFloat(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	return (s[(n-1)/2] + s[n/2]) / 2
}
