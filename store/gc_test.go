package store

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// Value-log GC must not wait a whole GCInterval while the value log grows: a steady
// stream of large bodies consumed at once writes a 64 MiB file every few seconds, and
// a minute of it left gigabytes on disk. Past gcEarlyFiles files, GC runs early.
func TestValueLogGCRunsEarlyWhenTheLogGrows(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, func(c *Config) { c.GCInterval = time.Hour })
	body := bytes.Repeat([]byte("v"), 1<<20)
	seq := uint64(0)
	for vlogFiles(t, dir) <= 4 {
		for range 32 {
			s.Append(1, seq, &Message{Body: body}, nil)
			seq++
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		for i := seq - 32; i < seq; i++ {
			s.Remove(1, i)
		}
	}
	const wait = 15 * time.Second
	deadline := time.Now().Add(wait)
	for s.gcRuns.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d value-log files (%d MiB written), no GC round after %v; GCInterval is an hour",
				vlogFiles(t, dir), seq, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// vlogFiles counts the value-log files in dir.
func vlogFiles(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".vlog") {
			n++
		}
	}
	return n
}
