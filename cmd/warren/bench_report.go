package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"time"
)

// benchReporter prints one line per second (and a CSV row, with
// --output-file) and accumulates the run's consumer and confirm latency
// histograms. Its fields are owned by the goroutine running loop, and
// after loop returns by the caller of flush.
type benchReporter struct {
	r                                    *benchRun
	out                                  io.Writer
	csv                                  *csv.Writer
	interval, total                      histSnapshot
	confirmInterval, confirmTotal        histSnapshot
	lastSent, lastConf, lastNack, lastRx uint64
	last                                 time.Time
}

// benchCSVHeader names the columns of --output-file, one row a second, as
// PerfTest's: rates in msg/s, latencies in µs.
var benchCSVHeader = []string{
	"time (s)", "sent (msg/s)", "confirmed (msg/s)", "nacked (msg/s)", "received (msg/s)",
	"min consumer latency (µs)", "median consumer latency (µs)", "75th p. consumer latency (µs)",
	"95th p. consumer latency (µs)", "99th p. consumer latency (µs)",
	"min confirm latency (µs)", "median confirm latency (µs)", "75th p. confirm latency (µs)",
	"95th p. confirm latency (µs)", "99th p. confirm latency (µs)",
}

func newBenchReporter(r *benchRun) *benchReporter {
	rep := &benchReporter{r: r, out: r.cfg.Out, last: r.start}
	if r.cfg.CSV != nil {
		rep.csv = csv.NewWriter(r.cfg.CSV)
		_ = rep.csv.Write(benchCSVHeader)
		rep.csv.Flush()
	}
	return rep
}

// quantiles returns min, median, 75th, 95th and 99th percentile in µs;
// empty strings when h is empty.
func quantiles(h *histSnapshot) []string {
	if h.n == 0 {
		return []string{"", "", "", "", ""}
	}
	us := func(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
	return []string{us(h.min()), us(h.quantile(0.5)), us(h.quantile(0.75)), us(h.quantile(0.95)), us(h.quantile(0.99))}
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

func (rep *benchReporter) counts() (sent, conf, nack, rx uint64) {
	for _, p := range rep.r.producers {
		sent += p.sent.Load()
		conf += p.confirmed.Load()
		nack += p.nacked.Load()
	}
	for _, c := range rep.r.consumers {
		rx += c.received.Load()
	}
	return sent, conf, nack, rx
}

// drain moves the latencies recorded since the last call into the
// interval histograms and adds them to the totals.
func (rep *benchReporter) drain() {
	rep.interval.reset()
	for _, c := range rep.r.consumers {
		c.hist.drainInto(&rep.interval)
	}
	rep.total.merge(&rep.interval)
	rep.confirmInterval.reset()
	for _, p := range rep.r.producers {
		p.confirmHist.drainInto(&rep.confirmInterval)
	}
	rep.confirmTotal.merge(&rep.confirmInterval)
}

func (rep *benchReporter) tick(now time.Time) {
	sent, conf, nack, rx := rep.counts()
	dt := now.Sub(rep.last).Seconds()
	rate := func(cur, prev uint64) uint64 {
		if dt <= 0 {
			return 0
		}
		return uint64(float64(cur-prev)/dt + 0.5)
	}
	rep.drain()

	h := &rep.interval
	confirmed := ""
	if rep.r.cfg.Confirm > 0 {
		confirmed = fmt.Sprintf(", confirmed: %d msg/s", rate(conf, rep.lastConf))
		if c := &rep.confirmInterval; c.n > 0 {
			confirmed += fmt.Sprintf(" (latency min/median/75th/95th/99th: %d/%d/%d/%d/%d µs)", c.min().Microseconds(),
				c.quantile(0.5).Microseconds(), c.quantile(0.75).Microseconds(), c.quantile(0.95).Microseconds(), c.quantile(0.99).Microseconds())
		}
	}
	lat := "-"
	if h.n > 0 {
		lat = fmt.Sprintf("%d/%d/%d/%d/%d µs", h.min().Microseconds(), h.quantile(0.5).Microseconds(),
			h.quantile(0.75).Microseconds(), h.quantile(0.95).Microseconds(), h.quantile(0.99).Microseconds())
	}
	secs := int(now.Sub(rep.r.start).Seconds() + 0.5)
	fmt.Fprintf(rep.out, "time: %ds, sent: %d msg/s%s, received: %d msg/s, min/median/75th/95th/99th consumer latency: %s\n",
		secs, rate(sent, rep.lastSent), confirmed, rate(rx, rep.lastRx), lat)
	if rep.csv != nil {
		row := []string{strconv.Itoa(secs), strconv.FormatUint(rate(sent, rep.lastSent), 10), strconv.FormatUint(rate(conf, rep.lastConf), 10),
			strconv.FormatUint(rate(nack, rep.lastNack), 10), strconv.FormatUint(rate(rx, rep.lastRx), 10)}
		row = append(append(row, quantiles(h)...), quantiles(&rep.confirmInterval)...)
		_ = rep.csv.Write(row)
		rep.csv.Flush()
	}
	rep.lastSent, rep.lastConf, rep.lastNack, rep.lastRx, rep.last = sent, conf, nack, rx, now
}

// flush adds the latencies recorded since the last tick to the total. Call
// it once the consumers and loop have stopped.
func (rep *benchReporter) flush() {
	rep.drain()
}
