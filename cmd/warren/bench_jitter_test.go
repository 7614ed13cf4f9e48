package main

import (
	"testing"
	"time"
)

// TestBenchJitter: the machine's timer measure counts its wake-ups and
// orders its figures; a bad interval is refused.
func TestBenchJitter(t *testing.T) {
	res, err := runJitter(t.Context(), jitterConfig{Duration: 300 * time.Millisecond, Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// 300 wake-ups at most; under -race on a loaded machine, far fewer.
	if res.Wakes < 10 || res.Wakes > 300 || res.P50 < 0 || res.P50 > res.P99 || res.P99 > res.P999 || res.P999 > res.Max {
		t.Errorf("result %+v", res)
	}
	if res.PhaseHit > res.Over3ms || (res.Over3ms > 0) != (res.PhaseHit > 0) {
		t.Errorf("phases: %d of %d over 3 ms", res.PhaseHit, res.Over3ms)
	}
	if _, err := runJitter(t.Context(), jitterConfig{Duration: time.Millisecond, Interval: time.Second}); err == nil {
		t.Error("an interval longer than the run was accepted")
	}
}
