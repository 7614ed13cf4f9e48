package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
