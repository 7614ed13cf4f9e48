package main

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// The GC policy of `warren server` (unless GOGC is set in its environment).
//
// Go's default target (GOGC=100) lets the heap grow to twice the live heap
// before collecting. A broker's live heap is small under most traffic (10-25
// MiB while publishing and consuming at full speed) and there the default
// costs least CPU; but a deep queue's index and the store's buffers make it
// large and long-lived (65-80 MiB with a million messages queued), and then
// doubling it is tens of MiB of resident set holding nothing. So the server
// allows the heap to grow by at most gcHeadroom past the live heap, but never
// by less than half of it: the GC percent is 100 while the live heap is below
// gcHeadroom, 100·gcHeadroom/live above it, and gcMinPercent from twice
// gcHeadroom up. A goroutine reads the live heap (as marked by the last
// collection) every gcPollInterval and sets the percent when it changes.
const (
	gcHeadroom     = 32 << 20
	gcMaxPercent   = 100
	gcMinPercent   = 50
	gcPollInterval = time.Second
)

// gcPercentFor is the GC percent the policy sets for a live heap of live
// bytes, with the given headroom: gcMaxPercent up to headroom, then the
// percent that lets the heap grow by headroom, down to gcMinPercent. Values
// are rounded down to a multiple of 5 so that small swings of the live heap
// do not change the target every poll.
func gcPercentFor(live, headroom uint64) int {
	if live <= headroom {
		return gcMaxPercent
	}
	p := int(headroom * 100 / live)
	p -= p % 5
	return max(p, gcMinPercent)
}

// gcTuner applies the policy: it polls the live heap and sets the GC percent.
type gcTuner struct {
	headroom uint64
	sample   []metrics.Sample
	percent  int // the percent last set

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

func newGCTuner(headroom uint64) *gcTuner {
	t := &gcTuner{
		headroom: headroom,
		sample:   []metrics.Sample{{Name: "/gc/heap/live:bytes"}},
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	t.percent = gcMaxPercent
	debug.SetGCPercent(t.percent)
	return t
}

// step reads the live heap and sets the GC percent the policy gives for it,
// if that differs from the one in force; it returns the percent in force.
func (t *gcTuner) step() int {
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return t.percent // not supported by this runtime: leave Go's default
	}
	if p := gcPercentFor(t.sample[0].Value.Uint64(), t.headroom); p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
	return t.percent
}

func (t *gcTuner) run(every time.Duration) {
	defer close(t.done)
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tk.C:
			t.step()
		}
	}
}

// close stops the polling goroutine and waits for it. The GC percent stays
// as last set.
func (t *gcTuner) close() {
	t.stopOnce.Do(func() { close(t.stop) })
	<-t.done
}

// tuneGC starts the server's GC policy unless GOGC is set (the runtime has
// read it already, and it wins). It reports the policy in force and returns
// a func that stops the policy's goroutine.
func tuneGC() (string, func()) {
	if v := os.Getenv("GOGC"); v != "" {
		return "GOGC=" + v, func() {}
	}
	t := newGCTuner(gcHeadroom)
	t.step()
	go t.run(gcPollInterval)
	return "adaptive: 100 below 32 MiB live, down to 50 from 64 MiB", t.close
}
