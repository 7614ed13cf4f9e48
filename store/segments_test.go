package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func segEntry(i, term uint64) LogEntry {
	e := LogEntry{Index: i, Term: term, Type: uint8(i % 3), AppendedAt: int64(i) * 1000,
		Data: bytes.Repeat([]byte{byte(i), byte(term)}, int(i%50)+1)}
	if i%4 == 0 {
		e.Extensions = []byte(fmt.Sprintf("ext-%d", i))
	}
	if i%7 == 0 {
		e.Data = nil
	}
	return e
}

func segAppend(t *testing.T, l *SegmentLog, from, to, term uint64) {
	t.Helper()
	var es []LogEntry
	for i := from; i <= to; i++ {
		es = append(es, segEntry(i, term))
	}
	if err := l.Append(es); err != nil {
		t.Fatalf("append %d–%d: %v", from, to, err)
	}
}

// segCheck checks that the log holds exactly the entries of want (index →
// term) between lo and hi, and nothing else there.
func segCheck(t *testing.T, l *SegmentLog, first, last uint64, want map[uint64]uint64, lo, hi uint64) {
	t.Helper()
	f, la := l.Bounds()
	if f != first || la != last {
		t.Fatalf("bounds %d–%d, want %d–%d", f, la, first, last)
	}
	for i := lo; i <= hi; i++ {
		e, err := l.Entry(i)
		term, ok := want[i]
		if !ok {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("entry %d: %v %+v, want not found", i, err, e)
			}
			continue
		}
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		w := segEntry(i, term)
		if e.Index != w.Index || e.Term != w.Term || e.Type != w.Type || e.AppendedAt != w.AppendedAt ||
			!bytes.Equal(e.Data, w.Data) || !bytes.Equal(e.Extensions, w.Extensions) {
			t.Fatalf("entry %d: %+v, want %+v", i, e, w)
		}
	}
}

func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSegmentLog(t *testing.T) {
	dir := t.TempDir()
	open := func() *SegmentLog {
		l, err := OpenSegmentLog(dir, SegmentLogOptions{SegmentSize: 1024})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l := open()
	segCheck(t, l, 0, 0, nil, 1, 3)
	want := map[uint64]uint64{}
	for i := uint64(1); i <= 100; i += 10 {
		segAppend(t, l, i, i+9, 1)
		for j := i; j <= i+9; j++ {
			want[j] = 1
		}
	}
	segCheck(t, l, 1, 100, want, 0, 102)
	if n := len(segFiles(t, dir)); n < 3 {
		t.Fatalf("%d segments of 1 KiB for 100 entries", n)
	}
	l.Close()
	if err := l.Append([]LogEntry{segEntry(101, 1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	l = open()
	segCheck(t, l, 1, 100, want, 0, 102)

	// A conflict: the suffix from 57 replaced by term 2's entries.
	if err := l.DeleteRange(57, 100); err != nil {
		t.Fatal(err)
	}
	for i := uint64(57); i <= 100; i++ {
		delete(want, i)
	}
	segCheck(t, l, 1, 56, want, 0, 102)
	segAppend(t, l, 57, 70, 2)
	for i := uint64(57); i <= 70; i++ {
		want[i] = 2
	}
	// An append at or below the last index replaces from there on.
	segAppend(t, l, 65, 72, 3)
	for i := uint64(71); i <= 72; i++ {
		want[i] = 3
	}
	for i := uint64(65); i <= 70; i++ {
		want[i] = 3
	}
	segCheck(t, l, 1, 72, want, 0, 102)
	l.Close()
	l = open()
	segCheck(t, l, 1, 72, want, 0, 102)

	// A snapshot: the prefix to 33 goes, inside a segment.
	before := len(segFiles(t, dir))
	if err := l.DeleteRange(1, 33); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 33; i++ {
		delete(want, i)
	}
	segCheck(t, l, 34, 72, want, 0, 102)
	if after := len(segFiles(t, dir)); after >= before {
		t.Fatalf("segments %d before the prefix deletion, %d after", before, after)
	}
	l.Close()
	l = open()
	segCheck(t, l, 34, 72, want, 0, 102)

	// A snapshot install: the next entry far past the last.
	segAppend(t, l, 200, 205, 4)
	for i := uint64(200); i <= 205; i++ {
		want[i] = 4
	}
	segCheck(t, l, 34, 205, want, 0, 210)
	l.Close()
	l = open()
	segCheck(t, l, 34, 205, want, 0, 210)
	// A prefix deletion ending in the gap.
	if err := l.DeleteRange(34, 150); err != nil {
		t.Fatal(err)
	}
	for i := uint64(34); i <= 150; i++ {
		delete(want, i)
	}
	segCheck(t, l, 200, 205, want, 0, 210)
	// A deletion strictly inside is refused.
	if err := l.DeleteRange(202, 203); err == nil {
		t.Fatal("a deletion inside the log was accepted")
	}
	l.Close()
	l = open()
	segCheck(t, l, 200, 205, want, 0, 210)

	// Everything goes, and the log starts again anywhere.
	if err := l.DeleteRange(1, 1000); err != nil {
		t.Fatal(err)
	}
	segCheck(t, l, 0, 0, nil, 0, 210)
	if n := len(segFiles(t, dir)); n != 0 {
		t.Fatalf("%d segments left in an empty log", n)
	}
	segAppend(t, l, 500, 520, 5)
	want = map[uint64]uint64{}
	for i := uint64(500); i <= 520; i++ {
		want[i] = 5
	}
	l.Close()
	l = open()
	segCheck(t, l, 500, 520, want, 490, 530)
	l.Close()
}

// TestSegmentLogTornTail: bytes of a write a crash cut short, at the end of
// the last segment, are cut off on open; the same anywhere else is an
// error.
func TestSegmentLogTornTail(t *testing.T) {
	for _, tail := range [][]byte{
		{0, 0, 0},                      // a header cut short
		{0, 0, 1, 0, 1, 2, 3, 4, 9, 9}, // a record cut short
		append([]byte{0, 0, 0, 60, 1, 2, 3, 4}, make([]byte, 60)...), // a bad checksum
	} {
		dir := t.TempDir()
		l, err := OpenSegmentLog(dir, SegmentLogOptions{SegmentSize: 512})
		if err != nil {
			t.Fatal(err)
		}
		want := map[uint64]uint64{}
		for i := uint64(1); i <= 40; i += 5 {
			segAppend(t, l, i, i+4, 1)
			for j := i; j <= i+4; j++ {
				want[j] = 1
			}
		}
		l.Close()
		segs := segFiles(t, dir)
		last := segs[len(segs)-1]
		f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write(tail)
		f.Close()
		l, err = OpenSegmentLog(dir, SegmentLogOptions{SegmentSize: 512})
		if err != nil {
			t.Fatalf("open with a torn tail %v: %v", tail, err)
		}
		segCheck(t, l, 1, 40, want, 0, 42)
		segAppend(t, l, 41, 45, 1)
		for j := uint64(41); j <= 45; j++ {
			want[j] = 1
		}
		l.Close()
		l, err = OpenSegmentLog(dir, SegmentLogOptions{SegmentSize: 512})
		if err != nil {
			t.Fatal(err)
		}
		segCheck(t, l, 1, 45, want, 0, 47)
		l.Close()

		// The same bytes in a segment that is not the last.
		f, err = os.OpenFile(segs[0], os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write(tail)
		f.Close()
		if _, err := OpenSegmentLog(dir, SegmentLogOptions{SegmentSize: 512}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("open with damage inside: %v, want ErrCorrupt", err)
		}
	}
}

// TestSegmentLogConcurrentReads: readers of entries already appended never
// see anything else while appends and prefix deletions go on.
func TestSegmentLogConcurrentReads(t *testing.T) {
	l, err := OpenSegmentLog(t.TempDir(), SegmentLogOptions{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	segAppend(t, l, 1, 10, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				first, last := l.Bounds()
				for i := first; i <= last && i != 0; i++ {
					e, err := l.Entry(i)
					if errors.Is(err, ErrNotFound) {
						continue // deleted by a prefix deletion meanwhile
					}
					w := segEntry(i, 1)
					if err != nil || !bytes.Equal(e.Data, w.Data) || e.Term != 1 {
						errs <- fmt.Errorf("entry %d: %v %+v", i, err, e)
						return
					}
				}
			}
		}()
	}
	for i := uint64(11); i <= 2000; i += 10 {
		segAppend(t, l, i, i+9, 1)
		if i%200 == 1 {
			if err := l.DeleteRange(0, i-100); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// TestSegmentLogCrashKeepsAcknowledged runs TestSegmentLogCrashChild as a
// child process appending to a segment log (small segments, prefix
// deletions and suffix replacements among the appends) with real syncs,
// SIGKILLs it, and checks that the reopened log holds every entry the child
// saw acknowledged, contiguous, as last written.
func TestSegmentLogCrashKeepsAcknowledged(t *testing.T) {
	if os.Getenv("WARREN_SEGLOG_CRASH_DIR") != "" {
		t.Skip("in the child")
	}
	for round := range 3 {
		dir := t.TempDir()
		cmd, sc := startChild(t, "TestSegmentLogCrashChild", "WARREN_SEGLOG_CRASH_DIR", dir)
		var batch, acked, term, floor uint64
		n := 0
		for sc.Scan() {
			var bt, a, tm, f uint64
			if _, err := fmt.Sscanf(sc.Text(), "ack %d %d %d %d", &bt, &a, &tm, &f); err == nil {
				batch, acked, term, floor = bt, a, tm, f
				if n++; n == 300+200*round {
					cmd.Process.Kill()
				}
			}
		}
		cmd.Wait()
		if acked == 0 {
			t.Fatal("the child acknowledged nothing")
		}
		// What the last acknowledged state guarantees: every entry up to
		// acked, unless the batch after it (which may have been written,
		// or begun, unacknowledged) replaces the last 3 with a new term's.
		kept, replace := acked, (batch+1)%7 == 0
		if replace {
			kept = acked - 3
		}
		l, err := OpenSegmentLog(dir, SegmentLogOptions{SegmentSize: 16 << 10})
		if err != nil {
			t.Fatal(err)
		}
		first, last := l.Bounds()
		if first == 0 || first > floor+1 || last < kept {
			t.Fatalf("round %d: bounds %d–%d, acknowledged up to %d (kept %d, prefix deleted to %d)", round, first, last, acked, kept, floor)
		}
		for i := first; i <= last; i++ {
			e, err := l.Entry(i)
			if err != nil {
				t.Fatalf("round %d: entry %d of %d–%d: %v", round, i, first, last, err)
			}
			w := segEntry(i, e.Term)
			if (i <= kept && e.Term > term) || !bytes.Equal(e.Data, w.Data) || e.AppendedAt != w.AppendedAt {
				t.Fatalf("round %d: entry %d: %+v (acknowledged %d of term %d)", round, i, e, acked, term)
			}
		}
		if e, err := l.Entry(kept); err != nil || (!replace && e.Term != term) {
			t.Fatalf("round %d: last acknowledged entry %d: %+v %v, want term %d", round, kept, e, err, term)
		}
		l.Close()
	}
}

// TestSegmentLogCrashChild is the child of
// TestSegmentLogCrashKeepsAcknowledged: it appends batches until killed,
// printing "ack batch last term floor" after each append returns (floor: the
// prefix deleted so far); every 7th batch replaces the last 3 entries with
// a new term's, every 50th deletes a prefix.
func TestSegmentLogCrashChild(t *testing.T) {
	dir := os.Getenv("WARREN_SEGLOG_CRASH_DIR")
	if dir == "" {
		t.Skip("run by TestSegmentLogCrashKeepsAcknowledged")
	}
	l, err := OpenSegmentLog(dir, SegmentLogOptions{SegmentSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	next, term, floor := uint64(1), uint64(1), uint64(0)
	for b := 1; ; b++ {
		if b%7 == 0 && next > floor+4 {
			next -= 3
			term++
		}
		if b%50 == 0 && next > 20 {
			floor = next - 10
			if err := l.DeleteRange(0, floor); err != nil {
				t.Fatal(err)
			}
		}
		var es []LogEntry
		for i := range uint64(1 + b%5) {
			es = append(es, segEntry(next+i, term))
		}
		if err := l.Append(es); err != nil {
			t.Fatal(err)
		}
		next += uint64(len(es))
		fmt.Printf("ack %d %d %d %d\n", b, next-1, term, floor)
	}
}

// TestSegmentLogStage checks entries staged ahead of their append: read
// back at once, not counted by Bounds, taken by the append that follows,
// dropped when it fails, and replaced by a suffix deletion.
func TestSegmentLogStage(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenSegmentLog(dir, SegmentLogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	segAppend(t, l, 1, 10, 1)
	stage := func(from, to, term uint64) []LogEntry {
		var es []LogEntry
		for i := from; i <= to; i++ {
			es = append(es, segEntry(i, term))
		}
		l.Stage(es)
		return es
	}
	want := map[uint64]uint64{}
	for i := uint64(1); i <= 10; i++ {
		want[i] = 1
	}
	stage(11, 15, 2)
	stage(16, 20, 2) // follows the first: both staged
	for i := uint64(11); i <= 20; i++ {
		want[i] = 2
	}
	segCheck(t, l, 1, 10, want, 1, 21)
	got, ok := l.Staged(11, 5)
	if !ok || len(got) != 5 || got[0].Index != 11 || got[4].Index != 15 {
		t.Fatalf("Staged(11, 5): %v %v", ok, got)
	}
	if _, ok := l.Staged(18, 5); ok {
		t.Fatal("Staged(18, 5) past the staged entries")
	}
	if err := l.Append(got); err != nil {
		t.Fatal(err)
	}
	segCheck(t, l, 1, 15, want, 1, 21)
	got, _ = l.Staged(16, 5)
	if err := l.Append(got); err != nil {
		t.Fatal(err)
	}
	segCheck(t, l, 1, 20, want, 1, 21)
	if s, ok := l.Staged(16, 1); ok {
		t.Fatalf("still staged after the append: %v", s)
	}

	// A staged run that does not follow the staged one replaces it; a
	// suffix deletion drops what it covers.
	stage(21, 25, 3)
	stage(21, 23, 4)
	for i := uint64(21); i <= 23; i++ {
		want[i] = 4
	}
	segCheck(t, l, 1, 20, want, 1, 26)
	if err := l.DeleteRange(19, 20); err != nil {
		t.Fatal(err)
	}
	delete(want, 19)
	delete(want, 20)
	for i := uint64(21); i <= 23; i++ {
		delete(want, i)
	}
	segCheck(t, l, 1, 18, want, 1, 26)

	// A failed append drops what it staged.
	stage(19, 22, 5)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got = []LogEntry{segEntry(19, 5)}
	if err := l.Append(got); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if s, ok := l.Staged(19, 1); ok {
		t.Fatalf("still staged after a failed append: %v", s)
	}
	l, err = OpenSegmentLog(dir, SegmentLogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	segCheck(t, l, 1, 18, want, 1, 26)
}
