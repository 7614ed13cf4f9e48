package store

import (
	"errors"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// openTest opens a store in dir, closed at cleanup. NoSync keeps the tests quick except
// where a test wants real syncs.
func openTest(t testing.TB, dir string, mod ...func(*Config)) *Store {
	t.Helper()
	cfg := Config{Dir: dir, NoSync: true, Logger: testLogger(t)}
	for _, f := range mod {
		f(&cfg)
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func testLogger(t testing.TB) *zap.Logger {
	if tt, ok := t.(*testing.T); ok {
		return zaptest.NewLogger(tt, zaptest.Level(zap.WarnLevel))
	}
	return zap.NewNop()
}

func mustClose(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// rawUpdate opens dir with plain Badger (the store closed) and runs fn in a transaction.
func rawUpdate(t *testing.T, dir string, fn func(txn *badger.Txn) error) {
	t.Helper()
	db, err := badger.Open(badgerOptions(dir, true, zap.NewNop()))
	if err != nil {
		t.Fatalf("badger.Open: %v", err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatalf("raw update: %v", err)
	}
}

// rawKeys lists the keys under prefix with plain Badger.
func rawKeys(t *testing.T, dir string, prefix []byte) [][]byte {
	t.Helper()
	db, err := badger.Open(badgerOptions(dir, true, zap.NewNop()))
	if err != nil {
		t.Fatalf("badger.Open: %v", err)
	}
	defer db.Close()
	var keys [][]byte
	_ = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		return nil
	})
	return keys
}

// flipByte corrupts the value of key by flipping one of its bits.
func flipByte(t *testing.T, dir string, key []byte, at int) {
	t.Helper()
	rawUpdate(t, dir, func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		if at < 0 {
			at += len(v)
		}
		v[at] ^= 0x10
		return txn.Set(key, v)
	})
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestOpenEmptyDir(t *testing.T) {
	if _, err := Open(Config{}); err == nil {
		t.Fatal("Open with empty Dir succeeded")
	}
}

func TestSchemaVersion(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	mustClose(t, s)

	rawUpdate(t, dir, func(txn *badger.Txn) error {
		return txn.Set(schemaKey, sealRecord(append(beginRecord(nil), 9)))
	})
	if _, err := Open(Config{Dir: dir, NoSync: true}); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("Open of a version-9 dir: %v, want ErrSchemaVersion", err)
	}
	rawUpdate(t, dir, func(txn *badger.Txn) error {
		return txn.Set(schemaKey, []byte("garbage"))
	})
	if _, err := Open(Config{Dir: dir, NoSync: true}); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("Open with a corrupt schema key: %v, want ErrSchemaVersion", err)
	}
}

func TestCloseIdempotent(t *testing.T) {
	s := openTest(t, t.TempDir())
	mustClose(t, s)
	mustClose(t, s)
	if _, err := s.Put(&VHost{Name: "/"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	if _, err := s.LoadDefinitions(); !errors.Is(err, ErrClosed) {
		t.Fatalf("LoadDefinitions after Close: %v", err)
	}
	if err := s.Flush(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush after Close: %v", err)
	}
	var got error
	s.Append(1, 1, &Message{Body: []byte("x")}, func(err error) { got = err })
	if !errors.Is(got, ErrClosed) {
		t.Fatalf("Append after Close: done(%v)", got)
	}
	s.Remove(1, 1)
	s.MarkDelivered(1, 1, 1)
	if _, err := s.ReadMessage(1, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadMessage after Close: %v", err)
	}
	if _, err := s.ScanQueue(1, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("ScanQueue after Close: %v", err)
	}
	if err := s.RemoveQueue(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("RemoveQueue after Close: %v", err)
	}
}
