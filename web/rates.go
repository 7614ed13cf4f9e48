package web

import (
	"sync"
	"time"

	"github.com/warrenmq/warren/broker"
)

// rates turns the broker's cumulative counters into per-second rates:
// each sample is compared with the previous one. Queues are keyed by vhost
// and name; a queue that disappears is forgotten at the next sample.
type rates struct {
	interval time.Duration

	mu      sync.Mutex
	last    time.Time
	prev    sample
	overall rateSet
	queues  map[queueKey]*queueRates
}

type queueKey struct{ vhost, name string }

// sample is the counters and depths read at one tick.
type sample struct {
	stats          broker.MessageStats
	ready, unacked int
}

// rateSet holds per-second rates.
type rateSet struct {
	Publish, Deliver, Get, DeliverGet, Ack, Redeliver float64
	Messages, Ready, Unacked                          float64
}

type queueRates struct {
	prev  sample
	rates rateSet
	seen  time.Time
}

func newRates(interval time.Duration) *rates {
	return &rates{interval: interval, queues: make(map[queueKey]*queueRates)}
}

func perSecond(cur, prev uint64, secs float64) float64 {
	if cur < prev || secs <= 0 {
		return 0
	}
	return float64(cur-prev) / secs
}

func depthRate(cur, prev int, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(cur-prev) / secs
}

func diff(cur, prev sample, secs float64) rateSet {
	return rateSet{
		Publish:    perSecond(cur.stats.Publish, prev.stats.Publish, secs),
		Deliver:    perSecond(cur.stats.Deliver, prev.stats.Deliver, secs),
		Get:        perSecond(cur.stats.Get, prev.stats.Get, secs),
		DeliverGet: perSecond(cur.stats.Deliver+cur.stats.Get, prev.stats.Deliver+prev.stats.Get, secs),
		Ack:        perSecond(cur.stats.Ack, prev.stats.Ack, secs),
		Redeliver:  perSecond(cur.stats.Redeliver, prev.stats.Redeliver, secs),
		Messages:   depthRate(cur.ready+cur.unacked, prev.ready+prev.unacked, secs),
		Ready:      depthRate(cur.ready, prev.ready, secs),
		Unacked:    depthRate(cur.unacked, prev.unacked, secs),
	}
}

// sample records one tick.
func (r *rates) sample(now time.Time, o broker.Overview, qs []broker.QueueInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	secs := now.Sub(r.last).Seconds()
	first := r.last.IsZero()
	cur := sample{stats: o.Totals, ready: o.Ready, unacked: o.Unacked}
	if !first {
		r.overall = diff(cur, r.prev, secs)
	}
	r.prev = cur
	for _, q := range qs {
		k := queueKey{q.VHost, q.Name}
		s := sample{stats: q.Stats, ready: q.Ready, unacked: q.Unacked}
		qr := r.queues[k]
		if qr == nil {
			r.queues[k] = &queueRates{prev: s, seen: now}
			continue
		}
		qr.rates = diff(s, qr.prev, now.Sub(qr.seen).Seconds())
		qr.prev, qr.seen = s, now
	}
	for k, qr := range r.queues {
		if qr.seen != now {
			delete(r.queues, k)
		}
	}
	r.last = now
}

// queue returns the rates of a queue (zero when not sampled yet).
func (r *rates) queue(vhost, name string) rateSet {
	r.mu.Lock()
	defer r.mu.Unlock()
	if qr := r.queues[queueKey{vhost, name}]; qr != nil {
		return qr.rates
	}
	return rateSet{}
}

// totals returns the broker-wide rates.
func (r *rates) totals() rateSet {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.overall
}
