package store

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
)

// damagedFixture writes a Badger database with a table, a value log and a
// MANIFEST, as the store writes it, and returns its directory.
func damagedFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	db, err := badger.Open(badgerOptions(dir, true, zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	big := []byte(strings.Repeat("v", 2000)) // over the value threshold: in the value log
	for i := 0; i < 2000; i++ {
		if err := db.Update(func(txn *badger.Txn) error {
			return txn.Set([]byte(fmt.Sprintf("k%06d", i)), big)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyDir copies the fixture so that each case damages its own.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// only returns the one file of dir with the suffix.
func only(t *testing.T, dir, suffix string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+suffix))
	if err != nil || len(m) != 1 {
		t.Fatalf("files %s in %s: %v %v", suffix, dir, m, err)
	}
	return m[0]
}

func truncateFile(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func overwrite(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestOpenDamagedDataDir damages tables, value logs and the MANIFEST and
// expects Open to refuse each with a *DamagedError naming the file, what
// is wrong and what to do: never a panic, never a silent truncation.
func TestOpenDamagedDataDir(t *testing.T) {
	fixture := damagedFixture(t)
	ff := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	cases := []struct {
		name    string
		damage  func(dir string) string // returns the damaged file
		problem string
		advice  string
	}{
		{"table cut short", func(d string) string {
			p := only(t, d, ".sst")
			truncateFile(t, p, size(t, p)/2)
			return p
		}, "cut short", "restore the data dir from a backup"},
		{"table block overwritten", func(d string) string {
			p := only(t, d, ".sst")
			overwrite(t, p, 100, ff)
			return p
		}, "", "restore the data dir from a backup"},
		{"table index overwritten", func(d string) string {
			p := only(t, d, ".sst")
			overwrite(t, p, size(t, p)-40, ff)
			return p
		}, "checksum", "restore the data dir from a backup"},
		{"value log cut short", func(d string) string {
			p := only(t, d, ".vlog")
			truncateFile(t, p, size(t, p)/2+7)
			return p
		}, "does not read back", "--repair-data-dir"},
		{"value log overwritten", func(d string) string {
			p := only(t, d, ".vlog")
			overwrite(t, p, size(t, p)/3, ff)
			return p
		}, "does not read back", "--repair-data-dir"},
		{"MANIFEST cut short", func(d string) string {
			p := filepath.Join(d, "MANIFEST")
			truncateFile(t, p, 10)
			return p
		}, "no longer lists table", "--repair-data-dir"},
		{"MANIFEST overwritten", func(d string) string {
			p := filepath.Join(d, "MANIFEST")
			overwrite(t, p, 12, ff[:4])
			return p
		}, "checksum mismatch", "restore the data dir from a backup"},
		{"MANIFEST missing", func(d string) string {
			p := filepath.Join(d, "MANIFEST")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "missing", "restore the data dir from a backup"},
		{"KEYREGISTRY cut short", func(d string) string {
			p := filepath.Join(d, "KEYREGISTRY")
			truncateFile(t, p, 5)
			return p
		}, "unreadable", "restore the data dir from a backup"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, fixture)
			file := c.damage(dir)
			s, err := Open(Config{Dir: dir, NoSync: true})
			if err == nil {
				_ = s.Close()
				t.Fatal("Open succeeded")
			}
			var de *DamagedError
			if !errors.As(err, &de) || !errors.Is(err, ErrDamaged) {
				t.Fatalf("Open: %v, want a *DamagedError", err)
			}
			msg := err.Error()
			if de.File != file || !strings.Contains(msg, file) || !strings.Contains(msg, c.problem) || !strings.Contains(msg, c.advice) || strings.Contains(msg, "\n") {
				t.Errorf("message %q: want one line naming %s, %q and %q", msg, file, c.problem, c.advice)
			}
		})
	}
}

// TestOpenKeepsSafeTails checks what is not damage: a value log with the
// zeroed tail of a preallocated file, and a torn last entry followed by
// zeros, as a crash leaves them. With Repair, a damaged value log is
// left to Badger to truncate.
func TestOpenKeepsSafeTails(t *testing.T) {
	fixture := damagedFixture(t)
	open := func(dir string, repair bool) {
		t.Helper()
		s, err := Open(Config{Dir: dir, NoSync: true, Repair: repair})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	dir := copyDir(t, fixture)
	p := only(t, dir, ".vlog")
	truncateFile(t, p, size(t, p)+1<<20) // a zero tail
	open(dir, false)

	dir = copyDir(t, fixture)
	p = only(t, dir, ".vlog")
	end := size(t, p)
	truncateFile(t, p, end-100)   // the last entry torn...
	truncateFile(t, p, end+1<<20) // ...then zeros
	open(dir, false)

	dir = copyDir(t, fixture)
	p = only(t, dir, ".vlog")
	overwrite(t, p, size(t, p)/3, []byte{0xff, 0xff, 0xff, 0xff})
	open(dir, true)
}

// logEntryOffsets returns the offset and length of every entry of a value
// log that reads back, in order.
func logEntryOffsets(t *testing.T, path string) (offs, lens []int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	if _, err := r.Discard(badgerLogHeader); err != nil {
		t.Fatal(err)
	}
	off := int64(badgerLogHeader)
	tab := crc32.MakeTable(crc32.Castagnoli)
	for {
		n, _, ok := readLogEntry(r, tab)
		if !ok {
			return offs, lens
		}
		offs, lens = append(offs, off), append(lens, n)
		off += n
	}
}

// logEntry encodes a value log entry as Badger writes it.
func logEntry(key, value []byte) []byte {
	e := []byte{0, 0}
	e = binary.AppendUvarint(e, uint64(len(key)))
	e = binary.AppendUvarint(e, uint64(len(value)))
	e = binary.AppendUvarint(e, 0)
	e = append(append(e, key...), value...)
	return binary.BigEndian.AppendUint32(e, crc32.Checksum(e, crc32.MakeTable(crc32.Castagnoli)))
}

// tear zeroes the first 32 and the last 128 bytes of the entry at off of
// length n, as a process killed while copying it into the log leaves it.
func tear(t *testing.T, path string, off, n int64) {
	t.Helper()
	overwrite(t, path, off, make([]byte, 32))
	overwrite(t, path, off+n-128, make([]byte, 128))
}

// TestOpenTornEntry checks a log entry torn with its header unwritten
// (what a kill during Badger's copy of it leaves): as the last write,
// followed by the zeros of the preallocated file, it is not damage and
// every entry before it is kept; in the middle of the log, or in a log
// that ends inside it, it is.
func TestOpenTornEntry(t *testing.T) {
	fixture := damagedFixture(t)
	count := func(dir string) int {
		t.Helper()
		db, err := badger.Open(badgerOptions(dir, true, zap.NewNop()))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		n := 0
		if err := db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.DefaultIteratorOptions)
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				if bytes.HasPrefix(it.Item().Key(), []byte("k")) {
					if _, err := it.Item().ValueCopy(nil); err != nil {
						return err
					}
					n++
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	refused := func(t *testing.T, dir, path string) {
		t.Helper()
		s, err := Open(Config{Dir: dir, NoSync: true})
		if err == nil {
			_ = s.Close()
			t.Fatal("Open succeeded")
		}
		var de *DamagedError
		if !errors.As(err, &de) || de.File != path || !strings.Contains(err.Error(), "does not read back") {
			t.Fatalf("Open: %v, want the value log %s refused", err, path)
		}
	}

	t.Run("last write", func(t *testing.T) {
		dir := copyDir(t, fixture)
		p := only(t, dir, ".vlog")
		offs, lens := logEntryOffsets(t, p)
		if len(offs) < 100 {
			t.Fatalf("%d entries in the fixture's value log", len(offs))
		}
		end := offs[len(offs)-1] + lens[len(offs)-1]
		e := logEntry([]byte("k999999\x00\x00\x00\x00\x00\x00\x00\x01"), bytes.Repeat([]byte("w"), 3000))
		truncateFile(t, p, end)
		overwrite(t, p, end, e)
		tear(t, p, end, int64(len(e)))
		truncateFile(t, p, size(t, p)+1<<20)
		s, err := Open(Config{Dir: dir, NoSync: true})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if n := count(dir); n != 2000 {
			t.Errorf("%d values read back, want the fixture's 2000", n)
		}
	})
	t.Run("in the middle", func(t *testing.T) {
		dir := copyDir(t, fixture)
		p := only(t, dir, ".vlog")
		offs, lens := logEntryOffsets(t, p)
		i := len(offs) / 3
		for lens[i] < 256 {
			i++
		}
		tear(t, p, offs[i], lens[i])
		truncateFile(t, p, size(t, p)+1<<20)
		refused(t, dir, p)
	})
	// lastLarge copies the fixture and returns its value log and the
	// offset just past 200 bytes short of the end of its last entry of
	// 256 bytes or more.
	lastLarge := func(t *testing.T) (dir, p string, off, end int64) {
		dir = copyDir(t, fixture)
		p = only(t, dir, ".vlog")
		offs, lens := logEntryOffsets(t, p)
		last := len(offs) - 1
		for lens[last] < 256 {
			last--
		}
		return dir, p, offs[last], offs[last] + lens[last] - 200
	}
	t.Run("cut short", func(t *testing.T) {
		dir, p, off, end := lastLarge(t)
		truncateFile(t, p, end) // ends inside the torn entry
		overwrite(t, p, off, make([]byte, 32))
		refused(t, dir, p)
	})
	t.Run("cut short on zeros", func(t *testing.T) {
		// A log cut short whose last bytes happen to be zeros is not a
		// torn write: no preallocated tail follows it.
		dir, p, _, end := lastLarge(t)
		truncateFile(t, p, end)
		overwrite(t, p, end-16, make([]byte, 16))
		refused(t, dir, p)
	})
}

// TestKillDuringWritesOpens runs TestKillDuringWritesChild as a child
// process writing large values as fast as it can, SIGKILLs it at a random
// moment, and expects the data dir to open each time and to hold every
// value the child saw committed: a value log entry torn by the kill is
// not damage. WARREN_KILL_ROUNDS sets the number of kills (3).
func TestKillDuringWritesOpens(t *testing.T) {
	if os.Getenv("WARREN_KILL_DIR") != "" {
		t.Skip("in the child")
	}
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("WARREN_KILL_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	for round := 0; round < rounds; round++ {
		dir := t.TempDir()
		cmd, sc := startChild(t, "TestKillDuringWritesChild", "WARREN_KILL_DIR", dir)
		committed := -1
		kill := time.After(time.Duration(50+rand.IntN(400)) * time.Millisecond)
		lines := make(chan string)
		go func() {
			defer close(lines)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
	read:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatal("the child stopped before it was killed")
				}
				if n, err := strconv.Atoi(l); err == nil {
					committed = n
				}
			case <-kill:
				break read
			}
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for range lines {
		}
		_ = cmd.Wait()
		s, err := Open(Config{Dir: dir})
		if err != nil {
			t.Fatalf("round %d: Open after the kill: %v", round, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		db, err := badger.Open(badgerOptions(dir, false, zap.NewNop()))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i <= committed; i++ {
			if err := db.View(func(txn *badger.Txn) error {
				item, err := txn.Get([]byte(fmt.Sprintf("big%08d", i)))
				if err != nil {
					return err
				}
				_, err = item.ValueCopy(nil)
				return err
			}); err != nil {
				t.Fatalf("round %d: value %d of %d committed: %v", round, i, committed+1, err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// startChild runs the test binary's test as a child process with env set
// to dir, and returns it and a scanner of its output.
func startChild(t *testing.T, test, env, dir string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewScanner(out)
}

// TestKillDuringWritesChild is the child of TestKillDuringWritesOpens: it
// writes values of 256 KiB to 4 MiB until it is killed, printing the
// number of each one committed.
func TestKillDuringWritesChild(t *testing.T) {
	dir := os.Getenv("WARREN_KILL_DIR")
	if dir == "" {
		t.Skip("run by TestKillDuringWritesOpens")
	}
	db, err := badger.Open(badgerOptions(dir, false, zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 4<<20)
	for i := range val {
		val[i] = byte(i*7 + 1)
	}
	for i := 0; ; i++ {
		n := 256<<10 + rand.IntN(len(val)-256<<10)
		if err := db.Update(func(txn *badger.Txn) error {
			return txn.Set([]byte(fmt.Sprintf("big%08d", i)), val[:n])
		}); err != nil {
			t.Fatal(err)
		}
		fmt.Println(i)
	}
}
