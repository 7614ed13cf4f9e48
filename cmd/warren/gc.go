package main

import (
	"os"
	"runtime/debug"
	"strconv"
)

// serverGCPercent is the Go GC target of `warren server` unless GOGC is set
// in its environment. A broker's live heap is mostly long-lived (queue
// indexes, Badger's memtable and pooled table builders) and its hot path
// allocates little, so collecting at 1.5× the live heap rather than Go's 2×
// costs little CPU and keeps the resident set near the live heap: with a
// million messages in a quorum queue, the default let each node's heap
// grow ~70 MiB past what was live (docs/performance.md).
const serverGCPercent = 50

// tuneGC sets the GC target of the server process unless GOGC is set
// (the runtime has read it already), and reports the value it set, or the
// GOGC it left alone.
func tuneGC() string {
	if v := os.Getenv("GOGC"); v != "" {
		return v
	}
	debug.SetGCPercent(serverGCPercent)
	return strconv.Itoa(serverGCPercent)
}
