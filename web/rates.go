package web

import (
	"math"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Rates and rate history. One sampler goroutine (server.go) reads the
// broker's cumulative counters and queue depths every SampleInterval and
// hands them to sample. From each object's last two samples come the
// "rate" fields of the API; history is kept, as RabbitMQ keeps it, for
//
//   - the whole broker and the node: the last 10 minutes at the sample
//     interval and the last day at one minute; each vhost: the last 10
//     minutes;
//   - a queue, exchange, connection or channel: the last 10 minutes at the
//     sample interval, once a request asked for its history (with the
//     msg_rates_age, lengths_age or data_rates_age parameters), for as
//     long as requests keep asking (watchFor). Recording every object's
//     history would cost megabytes per thousand queues.
//
// A request's *_age and *_incr parameters (seconds) select the samples
// returned in the "_details" objects, as RabbitMQ returns them.

// field is one sampled value.
type field uint8

const (
	fPublish field = iota
	fConfirm
	fReturnUnroutable
	fDropUnroutable
	fDeliver
	fDeliverNoAck
	fGet
	fGetNoAck
	fGetEmpty
	fDeliverGet
	fRedeliver
	fAck
	fPublishIn
	fPublishOut
	fMessages
	fReady
	fUnacked
	fRecvOct
	fSendOct
	fConnectionCreated
	fConnectionClosed
	fChannelCreated
	fChannelClosed
	fQueueDeclared
	fQueueCreated
	fQueueDeleted
	fMemUsed
	fDiskFree
	fFDUsed
	fSocketsUsed
	fProcUsed
	nFields
)

// values are one object's sampled values.
type values [nFields]float64

// point is a sample: unix milliseconds and values.
type point struct {
	t int64
	v values
}

// ring is a bounded history of points, oldest first once full.
type ring struct {
	pts  []point
	next int
	full bool
	// every is the least spacing of its points (ms): a point closer than
	// that to the previous one is not kept.
	every int64
}

func newRing(n int, every time.Duration) *ring {
	return &ring{pts: make([]point, n), every: every.Milliseconds()}
}

func (r *ring) len() int {
	if r.full {
		return len(r.pts)
	}
	return r.next
}

// at returns the i-th point, oldest first.
func (r *ring) at(i int) point {
	if r.full {
		return r.pts[(r.next+i)%len(r.pts)]
	}
	return r.pts[i]
}

func (r *ring) add(p point) {
	if n := r.len(); n > 0 && p.t-r.at(n-1).t < r.every {
		return
	}
	r.pts[r.next] = p
	r.next++
	if r.next == len(r.pts) {
		r.next, r.full = 0, true
	}
}

// valueAt is the value of f at time t: that of the last point at or
// before t; ok is false when the history starts after t.
func (r *ring) valueAt(t int64, f field) (float64, bool) {
	n := r.len()
	lo, hi := 0, n // first point after t
	for lo < hi {
		m := (lo + hi) / 2
		if r.at(m).t <= t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return 0, false
	}
	return r.at(lo - 1).v[f], true
}

func (r *ring) span() int64 {
	n := r.len()
	if n == 0 {
		return 0
	}
	return r.at(n-1).t - r.at(0).t
}

// seriesKind tells what a series describes.
type seriesKind uint8

const (
	kindOverall seriesKind = iota
	kindNode
	kindVHost
	kindQueue
	kindExchange
	kindConnection
	kindChannel
)

// seriesKey names a sampled object: a channel by its connection's name
// and its number.
type seriesKey struct {
	kind        seriesKind
	vhost, name string
	num         uint16
}

// series is one object's samples.
type series struct {
	kind seriesKind
	// t are the times of the last two samples (unix ms), the older first;
	// vals their values of the kind's fields (kindFields), the older
	// sample's first. A connection's series holds two fields, not all:
	// thousands of connections and channels are sampled.
	t    [2]int64
	vals []float64
	n    int    // samples taken, up to 2
	gen  uint32 // of the last tick that put it
	// changed is when a sample last differed from the one before it (the
	// first sample counts as a change; unix ms): the object has been idle
	// since then when the last sample is later (RabbitMQ's idle_since).
	changed int64
	// fine is the history at the sample interval, coarse at one minute
	// (nil when not kept).
	fine, coarse *ring
	// watched is when a request last asked for the history (unix ms).
	watched int64
}

// kindFields are the fields sampled for objects of each kind (nil: all).
// The values functions of api_stats.go set no others
// (TestKindFieldsCoverValues).
var kindFields = [...][]field{
	kindQueue: {fPublish, fDeliver, fDeliverNoAck, fGet, fGetNoAck, fGetEmpty, fDeliverGet, fAck, fRedeliver,
		fMessages, fReady, fUnacked},
	kindExchange:   {fPublishIn, fPublishOut},
	kindConnection: {fRecvOct, fSendOct},
	kindChannel: {fConfirm, fReturnUnroutable, fDropUnroutable, fPublish, fDeliver, fDeliverNoAck, fGet, fGetNoAck,
		fGetEmpty, fAck, fRedeliver, fDeliverGet},
}

// kindIndex is each kind's position of each field in its series' vals
// (-1: not sampled).
var kindIndex = func() (ix [len(kindFields)][nFields]int8) {
	for k, fs := range kindFields {
		if fs == nil {
			for f := range nFields {
				ix[k][f] = int8(f)
			}
			continue
		}
		for f := range nFields {
			ix[k][f] = -1
		}
		for i, f := range fs {
			ix[k][f] = int8(i)
		}
	}
	return ix
}()

// width is the number of fields a series of kind k keeps.
func width(k seriesKind) int {
	if fs := kindFields[k]; fs != nil {
		return len(fs)
	}
	return int(nFields)
}

// record makes v, taken at ms, the last sample and the last one the
// previous.
func (s *series) record(ms int64, v *values) {
	w := width(s.kind)
	if s.vals == nil {
		s.vals = make([]float64, 2*w)
	}
	copy(s.vals[:w], s.vals[w:])
	if fs := kindFields[s.kind]; fs != nil {
		for i, f := range fs {
			s.vals[w+i] = v[f]
		}
	} else {
		copy(s.vals[w:], v[:])
	}
	s.t[0], s.t[1] = s.t[1], ms
	if s.n == 0 || !slices.Equal(s.vals[:w], s.vals[w:]) {
		s.changed = ms
	}
	if s.n < 2 {
		s.n++
	}
}

// at is the value of f in sample i (0: the previous, 1: the last).
func (s *series) at(i int, f field) float64 {
	j := kindIndex[s.kind][f]
	if j < 0 || s.vals == nil {
		return 0
	}
	return s.vals[i*width(s.kind)+int(j)]
}

// point is sample i (0: the previous, 1: the last) with every field.
func (s *series) point(i int) point {
	p := point{t: s.t[i]}
	for f := range nFields {
		p.v[f] = s.at(i, f)
	}
	return p
}

const (
	fineSpan   = 10 * time.Minute
	coarseSpan = 24 * time.Hour
	coarseStep = time.Minute
	// watchFor is how long an object's history is kept after a request
	// asked for it.
	watchFor = 10 * time.Minute
	// maxWatched bounds the objects whose history is kept.
	maxWatched = 1000
	// maxSamples bounds the samples of one "_details" object.
	maxSamples = 1500
)

// rates holds the samples of every object. Its mu is a leaf lock; the
// sampler takes it once per tick, requests once per object shown.
type rates struct {
	interval time.Duration

	mu      sync.Mutex
	objs    map[seriesKey]*series
	watched int
	gen     uint32 // of the last tick (sampling)
}

func newRates(interval time.Duration) *rates {
	return &rates{interval: interval, objs: make(map[seriesKey]*series)}
}

// sampling is one tick of the sampler: begin, put the values of every
// object that exists now, end. It holds r.mu from begin to end.
type sampling struct {
	r   *rates
	ms  int64
	gen uint32
}

// begin starts a tick taken at now.
func (r *rates) begin(now time.Time) *sampling {
	r.mu.Lock()
	r.gen++
	return &sampling{r: r, ms: now.UnixMilli(), gen: r.gen}
}

// put records v as k's sample of the tick.
func (sp *sampling) put(k seriesKey, v *values) {
	r := sp.r
	s := r.objs[k]
	if s == nil {
		s = &series{kind: k.kind}
		r.objs[k] = s
		switch k.kind {
		case kindOverall, kindNode:
			s.fine = newRing(r.fineLen(), r.interval/2)
			s.coarse = newRing(int(coarseSpan/coarseStep)+1, coarseStep-r.interval/2)
		case kindVHost:
			s.fine = newRing(r.fineLen(), r.interval/2)
		}
	}
	s.gen = sp.gen
	s.record(sp.ms, v)
	if s.watched != 0 && sp.ms-s.watched > watchFor.Milliseconds() {
		s.watched, s.fine = 0, nil
		r.watched--
	}
	if s.fine != nil {
		s.fine.add(s.point(1))
	}
	if s.coarse != nil {
		s.coarse.add(s.point(1))
	}
}

// end forgets the objects the tick did not put, and releases r.mu.
func (sp *sampling) end() {
	r := sp.r
	for k, s := range r.objs {
		if s.gen != sp.gen {
			if s.watched != 0 {
				r.watched--
			}
			delete(r.objs, k)
		}
	}
	r.mu.Unlock()
}

func (r *rates) fineLen() int { return int(fineSpan/r.interval) + 1 }

// rateRange is a request's choice of samples: age and incr in seconds.
type rateRange struct{ age, incr int64 }

// rangeClass names the three groups of parameters RabbitMQ takes.
type rangeClass uint8

const (
	classMsg rangeClass = iota
	classLengths
	classData
)

var rangeParams = [...][2]string{
	classMsg:     {"msg_rates_age", "msg_rates_incr"},
	classLengths: {"lengths_age", "lengths_incr"},
	classData:    {"data_rates_age", "data_rates_incr"},
}

// ranges are the sample ranges a request asked for, by class (nil: none).
type ranges [3]*rateRange

// parseRanges reads the *_age and *_incr parameters. It returns an
// error text for a 400 when they are malformed.
func parseRanges(q url.Values) (ranges, string) {
	var rs ranges
	for c, p := range rangeParams {
		a, i := q.Get(p[0]), q.Get(p[1])
		if a == "" && i == "" {
			continue
		}
		age, err1 := strconv.ParseInt(a, 10, 64)
		incr, err2 := strconv.ParseInt(i, 10, 64)
		if err1 != nil || err2 != nil || age <= 0 || incr <= 0 {
			return rs, "both " + p[0] + " and " + p[1] + " must be positive integers"
		}
		if age/incr > maxSamples {
			return rs, "too many samples requested: " + p[0] + "/" + p[1] + " must be at most " + strconv.Itoa(maxSamples)
		}
		rs[c] = &rateRange{age: age, incr: incr}
	}
	return rs, ""
}

func (rs ranges) any() bool { return rs[0] != nil || rs[1] != nil || rs[2] != nil }

// view is what a request reads of one object's samples: a copy of its
// last two, and with ranges asked for, the live series, whose history
// details reads under r.mu.
type view struct {
	r    *rates
	s    *series
	live *series
	rs   ranges
	now  int64
}

// view returns the samples of k for a request, marking the history as
// wanted when the request asked for it.
func (r *rates) view(k seriesKey, rs ranges) view {
	now := time.Now().UnixMilli()
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.objs[k]
	if s == nil {
		return view{r: r, rs: rs, now: now}
	}
	if rs.any() && !kept(k.kind) {
		if s.watched == 0 && r.watched < maxWatched {
			r.watched++
			s.fine = newRing(r.fineLen(), r.interval/2)
			if s.n > 1 {
				s.fine.add(s.point(0))
			}
			s.fine.add(s.point(1))
			s.watched = now
		} else if s.watched != 0 {
			s.watched = now
		}
	}
	// Copy the last samples: the sampler goes on meanwhile.
	v := view{r: r, s: &series{kind: s.kind, t: s.t, vals: slices.Clone(s.vals), n: s.n, changed: s.changed}, rs: rs, now: now}
	if rs.any() {
		v.live = s
	}
	return v
}

// idleSince is when the object's sampled values last changed, and whether
// they have stayed the same since (its last two samples are equal).
func (v view) idleSince() (int64, bool) {
	if v.s == nil || v.s.n < 2 || v.s.changed >= v.s.t[1] {
		return 0, false
	}
	return v.s.changed, true
}

// rate is the per-second change of f between the last two samples.
func (v view) rate(f field) float64 {
	if v.s == nil || v.s.n < 2 {
		return 0
	}
	secs := float64(v.s.t[1]-v.s.t[0]) / 1000
	if secs <= 0 {
		return 0
	}
	d := v.s.at(1, f) - v.s.at(0, f)
	if d < 0 && isCounter(f) {
		return 0
	}
	return d / secs
}

func isCounter(f field) bool {
	switch f {
	case fMessages, fReady, fUnacked, fMemUsed, fDiskFree, fFDUsed, fSocketsUsed, fProcUsed:
		return false
	}
	return true
}

// details is RabbitMQ's "_details" object of f: the rate, and with a
// requested range the samples (newest first), their average and the
// average rate over them.
func (v view) details(f field, c rangeClass) map[string]any {
	d := map[string]any{"rate": round1(v.rate(f))}
	rr := v.rs[c]
	if rr == nil {
		return d
	}
	samples := []map[string]any{}
	var h *ring
	if v.live != nil {
		v.r.mu.Lock()
		defer v.r.mu.Unlock()
		h = v.live.fine
		coarse := v.live.coarse
		if coarse != nil && coarse.len() > 0 && (h == nil || rr.age*1000 > fineSpan.Milliseconds() || rr.incr*1000 >= coarseStep.Milliseconds()) {
			h = coarse
		}
	}
	var sum, first, last float64
	var firstT, lastT int64
	if h != nil {
		incr := rr.incr * 1000
		end := v.now - v.now%incr
		for t := end; t >= end-rr.age*1000; t -= incr {
			val, ok := h.valueAt(t, f)
			if !ok {
				break
			}
			samples = append(samples, map[string]any{"sample": jsonNumber(val), "timestamp": t})
			sum += val
			if lastT == 0 {
				last, lastT = val, t
			}
			first, firstT = val, t
		}
	}
	d["samples"] = samples
	avg, avgRate := 0.0, 0.0
	if n := len(samples); n > 0 {
		avg = sum / float64(n)
		if lastT > firstT {
			avgRate = (last - first) / (float64(lastT-firstT) / 1000)
		}
	}
	d["avg"] = avg
	d["avg_rate"] = round1(avgRate)
	return d
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

// jsonNumber shows whole numbers as integers.
func jsonNumber(x float64) any {
	if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
		return int64(x)
	}
	return x
}

// kept reports whether the history of objects of kind k is always kept.
func kept(k seriesKind) bool { return k == kindOverall || k == kindNode || k == kindVHost }
