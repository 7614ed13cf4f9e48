package main

import (
	"fmt"
	"io"
	"time"
)

// benchReporter prints one line per second and accumulates the run's
// latency histogram. Its fields are owned by the goroutine running loop,
// and after loop returns by the caller of flush.
type benchReporter struct {
	r                          *benchRun
	out                        io.Writer
	interval, total            histSnapshot
	lastSent, lastConf, lastRx uint64
	last                       time.Time
}

func newBenchReporter(r *benchRun) *benchReporter {
	return &benchReporter{r: r, out: r.cfg.Out, last: r.start}
}

// loop ticks every second until stop is closed.
func (rep *benchReporter) loop(stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			rep.tick(now)
		}
	}
}

func (rep *benchReporter) counts() (sent, conf, rx uint64) {
	for _, p := range rep.r.producers {
		sent += p.sent.Load()
		conf += p.confirmed.Load()
	}
	for _, c := range rep.r.consumers {
		rx += c.received.Load()
	}
	return sent, conf, rx
}

func (rep *benchReporter) tick(now time.Time) {
	sent, conf, rx := rep.counts()
	dt := now.Sub(rep.last).Seconds()
	rate := func(cur, prev uint64) uint64 {
		if dt <= 0 {
			return 0
		}
		return uint64(float64(cur-prev)/dt + 0.5)
	}
	rep.interval.reset()
	for _, c := range rep.r.consumers {
		c.hist.drainInto(&rep.interval)
	}
	rep.total.merge(&rep.interval)

	h := &rep.interval
	confirmed := ""
	if rep.r.cfg.Confirm > 0 {
		confirmed = fmt.Sprintf(", confirmed: %d msg/s", rate(conf, rep.lastConf))
	}
	lat := "-"
	if h.n > 0 {
		lat = fmt.Sprintf("%d/%d/%d/%d/%d µs", h.min().Microseconds(), h.quantile(0.5).Microseconds(),
			h.quantile(0.75).Microseconds(), h.quantile(0.95).Microseconds(), h.quantile(0.99).Microseconds())
	}
	fmt.Fprintf(rep.out, "time: %ds, sent: %d msg/s%s, received: %d msg/s, min/median/75th/95th/99th consumer latency: %s\n",
		int(now.Sub(rep.r.start).Seconds()+0.5), rate(sent, rep.lastSent), confirmed, rate(rx, rep.lastRx), lat)
	rep.lastSent, rep.lastConf, rep.lastRx, rep.last = sent, conf, rx, now
}

// flush adds the latencies recorded since the last tick to the total. Call
// it once the consumers and loop have stopped.
func (rep *benchReporter) flush() {
	rep.interval.reset()
	for _, c := range rep.r.consumers {
		c.hist.drainInto(&rep.interval)
	}
	rep.total.merge(&rep.interval)
}
