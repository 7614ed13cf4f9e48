package broker_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/store"
)

// kvMachine is a small state machine for the command log tests: a command
// "key=value" sets key; Apply returns how many commands it has applied. It
// records the indexes it was given.
type kvMachine struct {
	mu       sync.Mutex
	kv       map[string]string
	applied  []uint64
	restored uint64
}

func newKV() *kvMachine { return &kvMachine{kv: map[string]string{}} }

func (m *kvMachine) Apply(index uint64, cmd []byte) any {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, v, _ := bytes.Cut(cmd, []byte("="))
	m.kv[string(k)] = string(v)
	m.applied = append(m.applied, index)
	return len(m.applied)
}

type kvSnapshot map[string]string

func (s kvSnapshot) WriteTo(w io.Writer) (int64, error) {
	b, err := json.Marshal(map[string]string(s))
	if err != nil {
		return 0, err
	}
	n, err := w.Write(b)
	return int64(n), err
}

func (kvSnapshot) Release() {}

func (m *kvMachine) Snapshot() (broker.StateSnapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return kvSnapshot(maps.Clone(m.kv)), nil
}

func (m *kvMachine) Restore(index uint64, r io.Reader) error {
	kv := map[string]string{}
	if err := json.NewDecoder(r).Decode(&kv); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kv, m.restored = kv, index
	return nil
}

func (m *kvMachine) state() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.kv)
}

func openLogStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(store.Config{Dir: dir, NoSync: true, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func startLocalLog(t *testing.T, st *store.Store, m *kvMachine, every uint64) *broker.LocalLog {
	t.Helper()
	l, err := broker.NewLocalLog(broker.LocalLogConfig{Store: st, LogID: 7, Machine: m, SnapshotEvery: every, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	return l
}

func closeLogStore(t *testing.T, l *broker.LocalLog, st *store.Store) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLocalLogProposeApplyReplay: concurrent proposals are applied once each,
// in index order, each proposer learning its index and result; a fresh
// machine on the reopened store replays the same state, and the next index
// follows the last.
func TestLocalLogProposeApplyReplay(t *testing.T) {
	dir := t.TempDir()
	st := openLogStore(t, dir)
	m := newKV()
	l := startLocalLog(t, st, m, 1<<20)
	const workers, per = 8, 50
	var mu sync.Mutex
	seen := map[uint64]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				a, err := l.Propose(context.Background(), fmt.Appendf(nil, "k%d=%d", w, i))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seen[a.Index] = a.Result.(int)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	const n = workers * per
	if len(seen) != n {
		t.Fatalf("%d distinct indexes for %d proposals", len(seen), n)
	}
	for i := uint64(1); i <= n; i++ {
		// The result is the count of applied commands: index i is the i-th.
		if seen[i] != int(i) {
			t.Fatalf("index %d applied as command %d", i, seen[i])
		}
	}
	for i, idx := range m.applied {
		if idx != uint64(i+1) {
			t.Fatalf("apply order: %v", m.applied[:i+1])
		}
	}
	want := m.state()
	closeLogStore(t, l, st)

	st = openLogStore(t, dir)
	m2 := newKV()
	l = startLocalLog(t, st, m2, 1<<20)
	defer closeLogStore(t, l, st)
	if got := m2.state(); !maps.Equal(got, want) {
		t.Fatalf("replayed state %v, want %v", got, want)
	}
	if len(m2.applied) != n || l.AppliedIndex() != n {
		t.Fatalf("replayed %d entries, applied index %d; want %d", len(m2.applied), l.AppliedIndex(), n)
	}
	a, err := l.Propose(context.Background(), []byte("after=1"))
	if err != nil || a.Index != n+1 {
		t.Fatalf("proposal after reopen: %+v %v, want index %d", a, err, n+1)
	}
}

// TestLocalLogSnapshotCompacts: every SnapshotEvery entries a snapshot is
// stored and the entries it covers deleted; a fresh machine restores the
// snapshot and replays only what follows it.
func TestLocalLogSnapshotCompacts(t *testing.T) {
	dir := t.TempDir()
	st := openLogStore(t, dir)
	m := newKV()
	l := startLocalLog(t, st, m, 16)
	for i := range 100 {
		if _, err := l.Propose(context.Background(), fmt.Appendf(nil, "k%d=%d", i%30, i)); err != nil {
			t.Fatal(err)
		}
	}
	want := m.state()
	first, last, err := st.Log(7).Bounds()
	if err != nil {
		t.Fatal(err)
	}
	// Snapshots at 16, 32, ..., 96: entries 97..100 remain.
	if first != 97 || last != 100 {
		t.Fatalf("log bounds after snapshots: %d..%d, want 97..100", first, last)
	}
	closeLogStore(t, l, st)

	st = openLogStore(t, dir)
	m2 := newKV()
	l = startLocalLog(t, st, m2, 16)
	defer closeLogStore(t, l, st)
	if m2.restored != 96 || len(m2.applied) != 4 || m2.applied[0] != 97 {
		t.Fatalf("restored at %d, replayed %v; want 96 and 97..100", m2.restored, m2.applied)
	}
	if got := m2.state(); !maps.Equal(got, want) {
		t.Fatalf("state after restore %v, want %v", got, want)
	}
}

// TestLocalLogWriteFailure: a write that fails (the store's fault hook) fails
// its proposal and stops the log; reopened, the machine has exactly the
// commands whose proposals succeeded, and the log goes on from there.
func TestLocalLogWriteFailure(t *testing.T) {
	dir := t.TempDir()
	st := openLogStore(t, dir)
	m := newKV()
	l := startLocalLog(t, st, m, 1<<20)
	for i := range 4 {
		if _, err := l.Propose(context.Background(), fmt.Appendf(nil, "k%d=v", i)); err != nil {
			t.Fatal(err)
		}
	}
	bad := binary.BigEndian.AppendUint64(append(binary.BigEndian.AppendUint64([]byte{'r'}, 7), 'e'), 5)
	fault := errors.New("disk on fire")
	// The write of entry 5 fails, after entry 6 is proposed: 6 is written
	// but must never be applied.
	inWrite, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	st.SetJournalFault(func(key []byte) error {
		if !bytes.Equal(key, bad) {
			return nil
		}
		once.Do(func() {
			close(inWrite)
			<-release
		})
		return fault
	})
	errs := make(chan error, 2)
	l.ProposeFunc([]byte("k4=v"), func(_ broker.Applied, err error) { errs <- err })
	<-inWrite
	l.ProposeFunc([]byte("k5=v"), func(_ broker.Applied, err error) { errs <- err })
	close(release)
	if err := <-errs; !errors.Is(err, broker.ErrLogFailed) || !errors.Is(err, fault) {
		t.Fatalf("failed write: %v, want ErrLogFailed and the fault", err)
	}
	if err := <-errs; !errors.Is(err, broker.ErrLogFailed) {
		t.Fatalf("proposal after the failed one: %v, want ErrLogFailed", err)
	}
	st.SetJournalFault(nil)
	if _, err := l.Propose(context.Background(), []byte("k6=v")); !errors.Is(err, broker.ErrLogFailed) {
		t.Fatalf("after a failed write: %v, want ErrLogFailed", err)
	}
	if e, err := st.Log(7).Entry(6); err != nil || string(e.Data) != "k5=v" {
		t.Fatalf("entry 6 after the failure: %+v %v, want it written", e, err)
	}
	want := m.state()
	closeLogStore(t, l, st)

	st = openLogStore(t, dir)
	m2 := newKV()
	l = startLocalLog(t, st, m2, 1<<20)
	defer closeLogStore(t, l, st)
	if got := m2.state(); !maps.Equal(got, want) || len(want) != 4 {
		t.Fatalf("state after reopen %v, want %v", got, want)
	}
	if _, last, err := st.Log(7).Bounds(); err != nil || last != 4 {
		t.Fatalf("last index after reopen: %d %v, want 4 (entries after the gap deleted)", last, err)
	}
	if a, err := l.Propose(context.Background(), []byte("k4=again")); err != nil || a.Index != 5 {
		t.Fatalf("proposal after reopen: %+v %v, want index 5", a, err)
	}
}

// TestLocalLogLifecycle: proposals before Start and after Close fail with
// ErrLogClosed, Start runs once, Close is idempotent.
func TestLocalLogLifecycle(t *testing.T) {
	st := openLogStore(t, t.TempDir())
	l, err := broker.NewLocalLog(broker.LocalLogConfig{Store: st, LogID: 1, Machine: newKV()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Propose(context.Background(), []byte("a=1")); !errors.Is(err, broker.ErrLogClosed) {
		t.Fatalf("proposal before Start: %v", err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); !errors.Is(err, broker.ErrLogClosed) {
		t.Fatalf("second Start: %v", err)
	}
	if a, err := l.Propose(context.Background(), []byte("a=1")); err != nil || a.Index != 1 {
		t.Fatalf("proposal: %+v %v", a, err)
	}
	closeLogStore(t, l, st)
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.Propose(context.Background(), []byte("a=2")); !errors.Is(err, broker.ErrLogClosed) {
		t.Fatalf("proposal after Close: %v", err)
	}
}

// BenchmarkLocalLogPropose measures proposals committed (fsynced) and
// applied per second through LocalLog, from 1 and 64 proposers.
func BenchmarkLocalLogPropose(b *testing.B) {
	for _, proposers := range []int{1, 64} {
		b.Run(fmt.Sprintf("proposers=%d", proposers), func(b *testing.B) {
			st, err := store.Open(store.Config{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			l, err := broker.NewLocalLog(broker.LocalLogConfig{Store: st, LogID: 1, Machine: newKV()})
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Start(); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			for p := range proposers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cmd := fmt.Appendf(nil, "key-%d=value", p)
					for next.Add(1) <= int64(b.N) {
						if _, err := l.Propose(context.Background(), cmd); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "proposals/s")
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
			if err := st.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
