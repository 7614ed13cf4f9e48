package main

import (
	"runtime/debug"
	"testing"
)

// gcPercent reads the GC target in force.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func TestTuneGCSetsServerTarget(t *testing.T) {
	t.Setenv("GOGC", "")
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	if got := tuneGC(); got != "50" {
		t.Fatalf("tuneGC() = %q, want 50", got)
	}
	if p := gcPercent(); p != serverGCPercent {
		t.Fatalf("GC target %d, want %d", p, serverGCPercent)
	}
}

func TestTuneGCLeavesGOGC(t *testing.T) {
	t.Setenv("GOGC", "200")
	defer debug.SetGCPercent(debug.SetGCPercent(200))
	if got := tuneGC(); got != "200" {
		t.Fatalf("tuneGC() = %q, want 200 (GOGC)", got)
	}
	if p := gcPercent(); p != 200 {
		t.Fatalf("GC target %d, want GOGC's 200 left alone", p)
	}
}
