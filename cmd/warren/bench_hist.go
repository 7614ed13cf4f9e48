package main

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Latency histogram: log-linear buckets over nanoseconds in the manner of
// HdrHistogram. Values below histSub have a bucket each; above, every power of
// two is split into histSub equal buckets, so a bucket's width is at most
// 1/histSub (3.1%) of its lower bound. The whole uint64 range fits in
// histBuckets counters, so nothing is ever clamped or allocated while
// recording.
const (
	histSubBits = 5
	histSub     = 1 << histSubBits
	histBuckets = (64 - histSubBits + 1) * histSub
)

// histIndex returns the bucket of v.
func histIndex(v uint64) int {
	if v < histSub {
		return int(v)
	}
	e := bits.Len64(v) - 1 // e >= histSubBits
	return (e-histSubBits+1)<<histSubBits | int(v>>(e-histSubBits))&(histSub-1)
}

// histBounds returns the smallest value of bucket i and the bucket's width.
func histBounds(i int) (low, width uint64) {
	if i < histSub {
		return uint64(i), 1
	}
	shift := i>>histSubBits - 1
	return uint64(histSub+i&(histSub-1)) << shift, 1 << shift
}

// latencyHist is recorded into by one consumer goroutine and drained by the
// reporter; every counter is atomic, so neither side takes a lock.
type latencyHist struct {
	counts [histBuckets]atomic.Uint64
}

// record adds one latency; negative values (clock skew between hosts) count
// as zero.
func (h *latencyHist) record(ns int64) {
	if ns < 0 {
		ns = 0
	}
	h.counts[histIndex(uint64(ns))].Add(1)
}

// drainInto moves every count recorded so far into s and zeroes h.
func (h *latencyHist) drainInto(s *histSnapshot) {
	for i := range h.counts {
		if h.counts[i].Load() == 0 {
			continue
		}
		n := h.counts[i].Swap(0)
		s.counts[i] += n
		s.n += n
	}
}

// histSnapshot is a plain histogram owned by one goroutine.
type histSnapshot struct {
	counts [histBuckets]uint64
	n      uint64
}

func (s *histSnapshot) reset() { *s = histSnapshot{} }

func (s *histSnapshot) merge(o *histSnapshot) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		s.counts[i] += c
	}
	s.n += o.n
}

// quantile returns the value at quantile q (0 < q <= 1): the middle of the
// bucket holding the ceil(q*n)-th smallest sample; 0 when empty.
func (s *histSnapshot) quantile(q float64) time.Duration {
	if s.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(s.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range s.counts {
		seen += c
		if seen >= rank {
			low, width := histBounds(i)
			return time.Duration(low + width/2)
		}
	}
	return s.max()
}

// min returns the lower bound of the lowest non-empty bucket.
func (s *histSnapshot) min() time.Duration {
	for i, c := range s.counts {
		if c > 0 {
			low, _ := histBounds(i)
			return time.Duration(low)
		}
	}
	return 0
}

// max returns the upper bound of the highest non-empty bucket.
func (s *histSnapshot) max() time.Duration {
	for i := len(s.counts) - 1; i >= 0; i-- {
		if s.counts[i] > 0 {
			low, width := histBounds(i)
			return time.Duration(min(low+(width-1), math.MaxInt64))
		}
	}
	return 0
}
