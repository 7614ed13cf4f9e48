package store

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// residentLogKiB sums the resident size (Rss in /proc/self/smaps) of this process's
// mappings of the value-log and memtable-log files under dir, in KiB.
func residentLogKiB(t *testing.T, dir string) int {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prefix := abs + string(filepath.Separator)
	in, total := false, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			path := fields[len(fields)-1]
			in = strings.HasPrefix(path, prefix) && (strings.HasSuffix(path, ".vlog") || strings.HasSuffix(path, ".mem"))
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			kb, err := strconv.Atoi(strings.Fields(line)[1])
			if err != nil {
				t.Fatalf("smaps line %q: %v", line, err)
			}
			total += kb
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}

// A stream of 4 KiB persistent messages, each removed once durable (a queue consumed
// at once), must not leave what was written resident in the process: the value log
// is memory-mapped, and every page written to it used to stay mapped, so RSS grew with
// every byte ever written. The bodies must still read back intact after their pages
// were trimmed.
func TestTrimReleasesWrittenLogPages(t *testing.T) {
	// MADV_PAGEOUT needs Linux 5.4; older kernels refuse it and nothing is trimmed.
	probe, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	err = unix.Madvise(probe, unix.MADV_PAGEOUT)
	_ = unix.Munmap(probe)
	if errors.Is(err, unix.EINVAL) {
		t.Skip("kernel without MADV_PAGEOUT")
	}

	dir := t.TempDir()
	s := openTest(t, dir)
	const (
		n    = 24000 // ~96 MiB: more than one 64 MiB value-log file
		size = 4096
	)
	body := func(i int) []byte {
		b := bytes.Repeat([]byte{byte(i), byte(i >> 8), 0x5a, byte(i >> 16)}, size/4)
		return b
	}
	for i := range n {
		s.Append(1, uint64(i), &Message{Exchange: "x", RoutingKey: "k", Body: body(i)}, nil)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}

	// Everything is written: the trimmer's next passes must leave only the tails of
	// the newest value-log and memtable-log files resident (trimKeepTail each), not
	// the ~96 MiB written.
	const bound = 4*trimKeepTail>>10 + 1024 // KiB
	waitResident := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		kb := residentLogKiB(t, dir)
		for kb > bound {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d KiB of value-log and memtable-log pages still resident after 20 s, want ≤ %d KiB", what, kb, bound)
			}
			time.Sleep(50 * time.Millisecond)
			kb = residentLogKiB(t, dir)
		}
		t.Logf("%s: %d KiB resident", what, kb)
	}
	waitResident("after writing")

	for i := range n {
		m, err := s.ReadMessage(1, uint64(i))
		if err != nil {
			t.Fatalf("ReadMessage %d: %v", i, err)
		}
		if !bytes.Equal(m.Body, body(i)) {
			t.Fatalf("message %d: body differs after its pages were trimmed", i)
		}
	}
	for i := range n {
		s.Remove(1, uint64(i))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// Reading every body back mapped the files again; they go again.
	waitResident("after reading back and removing")
}

// trimmerWaitsOnLifeMu reports whether the trimmer goroutine is blocked
// taking lifeMu.
func trimmerWaitsOnLifeMu() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("store.(*Store).trimLoop")) && bytes.Contains(g, []byte("[sync.RWMutex.RLock")) {
			return true
		}
	}
	return false
}

// TestCloseWhileTrimmerWaits: Close must not wait for the trimmer while
// holding lifeMu, which the trimmer takes after each tick. Here the trimmer
// is made to wait for lifeMu behind a Close that waits for a reader; once
// the reader is done, Close returns (it used to hold lifeMu while waiting
// for the trimmer: a deadlock).
func TestCloseWhileTrimmerWaits(t *testing.T) {
	s := openTest(t, t.TempDir())
	s.lifeMu.RLock() // a reader in progress
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// Close now waits for lifeMu, and so does the trimmer after its next
	// tick (a waiting writer holds new readers back).
	// (A trimmer that only tries lifeMu never waits: give it a few ticks.)
	for deadline := time.Now().Add(5 * trimLogInterval); !trimmerWaitsOnLifeMu() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	s.lifeMu.RUnlock()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Close deadlocked with the trimmer")
	}
}
