package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

// gcPercent reads the GC target in force.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 100},
		{8 * mib, 100},
		{32 * mib, 100},
		{40 * mib, 80},
		{48 * mib, 65}, // 66.6, rounded down to a multiple of 5
		{64 * mib, 50},
		{80 * mib, 50},
		{4 << 30, 50},
	} {
		if got := gcPercentFor(c.live, 32*mib); got != c.want {
			t.Errorf("gcPercentFor(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
	}
	// The heap may grow by at most the headroom past the live heap, and by at
	// least half of it.
	for live := uint64(mib); live < 256*mib; live += mib / 2 {
		p := uint64(gcPercentFor(live, 32*mib))
		if g := live * p / 100; g > 32*mib && p > gcMinPercent {
			t.Fatalf("live %d B: percent %d lets the heap grow %d B, past the headroom", live, p, g)
		}
		if p < gcMinPercent || p > gcMaxPercent {
			t.Fatalf("live %d B: percent %d outside [%d, %d]", live, p, gcMinPercent, gcMaxPercent)
		}
	}
}

// TestGCTunerFollowsLiveHeap runs the policy on this test process, with a
// headroom 8 MiB above the process's own live heap: with four times the
// headroom allocated and kept the percent drops to the minimum, and once
// that is freed it goes back to 100.
func TestGCTunerFollowsLiveHeap(t *testing.T) {
	t.Setenv("GOGC", "")
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	headroom := s[0].Value.Uint64() + 8<<20
	tu := newGCTuner(headroom)
	if p := gcPercent(); p != gcMaxPercent {
		t.Fatalf("GC target %d after start, want %d", p, gcMaxPercent)
	}
	live := make([][]byte, 4*headroom>>20)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	runtime.GC()
	if p := tu.step(); p != gcMinPercent {
		t.Fatalf("step() with %d MiB kept (headroom %d MiB) = %d, want %d", len(live), headroom>>20, p, gcMinPercent)
	}
	if p := gcPercent(); p != gcMinPercent {
		t.Fatalf("GC target %d with %d MiB kept, want %d", p, len(live), gcMinPercent)
	}
	runtime.KeepAlive(live)
	live = nil
	runtime.GC()
	if p := tu.step(); p != gcMaxPercent {
		t.Fatalf("step() after freeing the heap = %d, want %d", p, gcMaxPercent)
	}
	if p := gcPercent(); p != gcMaxPercent {
		t.Fatalf("GC target %d after freeing the heap, want %d", p, gcMaxPercent)
	}
}

func TestTuneGCStartsPolicy(t *testing.T) {
	t.Setenv("GOGC", "")
	defer debug.SetGCPercent(debug.SetGCPercent(50))
	policy, stop := tuneGC()
	defer stop()
	if policy == "" || policy[:5] == "GOGC=" {
		t.Fatalf("tuneGC() = %q, want the adaptive policy", policy)
	}
	// The test binary's live heap is far below the headroom.
	if p := gcPercent(); p != gcMaxPercent {
		t.Fatalf("GC target %d, want %d", p, gcMaxPercent)
	}
	stop()
	stop() // idempotent
}

func TestTuneGCLeavesGOGC(t *testing.T) {
	t.Setenv("GOGC", "200")
	defer debug.SetGCPercent(debug.SetGCPercent(200))
	policy, stop := tuneGC()
	defer stop()
	if policy != "GOGC=200" {
		t.Fatalf("tuneGC() = %q, want GOGC=200", policy)
	}
	if p := gcPercent(); p != 200 {
		t.Fatalf("GC target %d, want GOGC's 200 left alone", p)
	}
}
