package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

func testEntry(log, index uint64) LogEntry {
	return LogEntry{
		Index:      index,
		Term:       index/10 + 1,
		Type:       uint8(index % 3),
		Data:       fmt.Appendf(nil, "log %d entry %d", log, index),
		Extensions: fmt.Appendf(nil, "ext %d", index),
		AppendedAt: int64(index) * 1000,
	}
}

func appendRange(t testing.TB, l *Log, from, to uint64) {
	t.Helper()
	var es []LogEntry
	for i := from; i <= to; i++ {
		es = append(es, testEntry(l.ID(), i))
	}
	if err := l.AppendWait(es); err != nil {
		t.Fatalf("log %d Append %d..%d: %v", l.ID(), from, to, err)
	}
}

func checkBounds(t *testing.T, l *Log, first, last uint64) {
	t.Helper()
	f, la, err := l.Bounds()
	if err != nil || f != first || la != last {
		t.Fatalf("log %d bounds %d..%d (%v), want %d..%d", l.ID(), f, la, err, first, last)
	}
}

func checkEntry(t *testing.T, l *Log, index uint64) {
	t.Helper()
	e, err := l.Entry(index)
	if err != nil {
		t.Fatalf("log %d Entry(%d): %v", l.ID(), index, err)
	}
	want := testEntry(l.ID(), index)
	if e.Index != want.Index || e.Term != want.Term || e.Type != want.Type || e.AppendedAt != want.AppendedAt ||
		!bytes.Equal(e.Data, want.Data) || !bytes.Equal(e.Extensions, want.Extensions) {
		t.Fatalf("log %d Entry(%d) = %+v, want %+v", l.ID(), index, e, want)
	}
}

// rangeIndexes lists the indexes Entries gives from from to to.
func rangeIndexes(t *testing.T, l *Log, from, to uint64) []uint64 {
	t.Helper()
	var got []uint64
	err := l.Entries(from, to, func(e *LogEntry) error {
		want := testEntry(l.ID(), e.Index)
		if !bytes.Equal(e.Data, want.Data) || e.Term != want.Term {
			t.Errorf("log %d entry %d: %+v", l.ID(), e.Index, e)
		}
		got = append(got, e.Index)
		return nil
	})
	if err != nil {
		t.Fatalf("Entries(%d, %d): %v", from, to, err)
	}
	return got
}

func seq(from, to uint64) []uint64 {
	var s []uint64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

func equalU64(a, b []uint64) bool {
	return len(a) == len(b) && (len(a) == 0 || fmt.Sprint(a) == fmt.Sprint(b))
}

// TestLogAppendReadTruncateReopen: two logs side by side; entries read back
// one by one and by range; a prefix and a suffix deleted; values kept; all of
// it the same after a reopen; Remove leaves no key of the log.
func TestLogAppendReadTruncateReopen(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	a, b := s.Log(1), s.Log(2)
	checkBounds(t, a, 0, 0)
	if _, err := a.Entry(1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Entry of an empty log: %v", err)
	}
	for i := uint64(1); i <= 100; i += 10 {
		appendRange(t, a, i, i+9)
		appendRange(t, b, i, i)
	}
	checkBounds(t, a, 1, 100)
	checkBounds(t, b, 1, 91)
	checkEntry(t, a, 1)
	checkEntry(t, a, 57)
	checkEntry(t, b, 41)
	if got := rangeIndexes(t, a, 10, 20); !equalU64(got, seq(10, 20)) {
		t.Fatalf("Entries(10, 20) = %v", got)
	}
	if got := rangeIndexes(t, b, 5, 35); !equalU64(got, []uint64{11, 21, 31}) {
		t.Fatalf("log 2 Entries(5, 35) = %v", got)
	}
	// A prefix (after a snapshot) and a suffix (a conflict).
	if err := a.DeleteRange(1, 30); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteRange(90, 100); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, a, 31, 89)
	if _, err := a.Entry(30); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Entry(30) after prefix deletion: %v", err)
	}
	if _, err := a.Entry(90); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Entry(90) after suffix deletion: %v", err)
	}
	// The suffix is written again with other terms.
	e := testEntry(1, 90)
	e.Term = 99
	if err := a.AppendWait([]LogEntry{e}); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, b, 1, 91)
	for _, v := range []struct{ key, val string }{{"CurrentTerm", "x"}, {"LastVoteCand", "node-b"}, {"empty", ""}} {
		if err := a.SetValue([]byte(v.key), []byte(v.val)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := b.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	if err := a.SetValue(nil, []byte("x")); !errors.Is(err, ErrLogValueKey) {
		t.Fatalf("SetValue with an empty key: %v", err)
	}
	if err := a.SetValue(bytes.Repeat([]byte("k"), MaxLogValueKey+1), []byte("x")); !errors.Is(err, ErrLogValueKey) {
		t.Fatalf("SetValue with a long key: %v", err)
	}
	mustClose(t, s)

	s = openTest(t, dir)
	a, b = s.Log(1), s.Log(2)
	checkBounds(t, a, 31, 90)
	checkBounds(t, b, 1, 91)
	checkEntry(t, a, 31)
	checkEntry(t, a, 89)
	if e, err := a.Entry(90); err != nil || e.Term != 99 {
		t.Fatalf("rewritten entry 90: %+v %v", e, err)
	}
	if got := rangeIndexes(t, a, 0, 40); !equalU64(got, seq(31, 40)) {
		t.Fatalf("Entries(0, 40) after reopen = %v", got)
	}
	if v, err := a.Uint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Fatalf("log 1 CurrentTerm: %d %v", v, err)
	}
	if v, err := b.Uint64([]byte("CurrentTerm")); err != nil || v != 3 {
		t.Fatalf("log 2 CurrentTerm: %d %v", v, err)
	}
	if v, err := a.Value([]byte("LastVoteCand")); err != nil || string(v) != "node-b" {
		t.Fatalf("LastVoteCand: %q %v", v, err)
	}
	if v, err := a.Value([]byte("empty")); err != nil || len(v) != 0 {
		t.Fatalf("empty value: %q %v", v, err)
	}
	if _, err := a.Value([]byte("missing")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing value: %v", err)
	}
	if _, err := a.Uint64([]byte("LastVoteCand")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Uint64 of a 6-byte value: %v", err)
	}
	if err := b.Remove(); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, b, 0, 0)
	checkBounds(t, a, 31, 90)
	mustClose(t, s)
	if keys := rawKeys(t, dir, logPrefix(2, 0)); len(keys) != 0 {
		t.Fatalf("keys of a removed log: %q", keys)
	}
}

// TestLogLargeEntry: entries and values over the record limit are kept in
// chunk records, read back whole after a reopen, and deleted with all their
// chunks.
func TestLogLargeEntry(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	l := s.Log(3)
	big := bigBody(65<<20 + 7) // over Badger's 64 MiB value limit
	es := []LogEntry{testEntry(3, 1), {Index: 2, Term: 1, Data: big}, testEntry(3, 3)}
	if err := l.AppendWait(es); err != nil {
		t.Fatal(err)
	}
	snap := bigBody(9<<20 + 1)
	if err := l.SetValue([]byte("snapshot"), snap); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)

	s = openTest(t, dir)
	l = s.Log(3)
	if e, err := l.Entry(2); err != nil || !bytes.Equal(e.Data, big) {
		t.Fatalf("large entry read back: %d bytes, %v", len(e.Data), err)
	}
	n := 0
	if err := l.Entries(1, 3, func(e *LogEntry) error {
		n++
		if e.Index == 2 && !bytes.Equal(e.Data, big) {
			t.Error("large entry in a range")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Entries over a large entry: %d entries, %v", n, err)
	}
	checkBounds(t, l, 1, 3)
	if v, err := l.Value([]byte("snapshot")); err != nil || !bytes.Equal(v, snap) {
		t.Fatalf("large value read back: %d bytes, %v", len(v), err)
	}
	if err := l.DeleteRange(2, 3); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, l, 1, 1)
	mustClose(t, s)
	if keys := rawKeys(t, dir, logPrefix(3, logEntryKind)); len(keys) != 1 || !bytes.Equal(keys[0], logEntryKey(3, 1)) {
		t.Fatalf("entry keys after deleting the large entry: %d keys", len(keys))
	}
}

// TestLogSharesGroupCommit: log entries, log values and messages submitted
// while the writer is busy are written together in its next group commit.
func TestLogSharesGroupCommit(t *testing.T) {
	s := openTest(t, t.TempDir(), func(c *Config) { c.NoSync = false })
	// Hold the writer in the commit of message 1/1.
	first := msgKey(1, 1)
	inCommit, release := make(chan struct{}), make(chan struct{})
	type seen struct {
		commit int64
		key    string
	}
	var mu sync.Mutex
	var keys []seen
	s.SetJournalFault(func(key []byte) error {
		if bytes.Equal(key, first) {
			close(inCommit)
			<-release
			return nil
		}
		mu.Lock()
		keys = append(keys, seen{s.commits.Load(), string(key)})
		mu.Unlock()
		return nil
	})
	done := make(chan error, 1)
	s.Append(1, 1, testMessage(1, 1), func(err error) { done <- err })
	<-inCommit
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	wg.Add(5)
	go func() { defer wg.Done(); errs <- s.Log(1).AppendWait([]LogEntry{testEntry(1, 1), testEntry(1, 2)}) }()
	go func() { defer wg.Done(); errs <- s.Log(2).AppendWait([]LogEntry{testEntry(2, 1)}) }()
	go func() { defer wg.Done(); errs <- s.Log(1).SetUint64([]byte("CurrentTerm"), 1) }()
	for q := uint64(2); q <= 3; q++ {
		s.Append(q, 1, testMessage(q, 1), func(err error) { errs <- err; wg.Done() })
	}
	// Wait until all five are queued behind the commit in progress.
	for {
		s.mu.Lock()
		n := s.npending
		s.mu.Unlock()
		if n == 6 {
			break
		}
		runtime.Gosched()
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s.SetJournalFault(nil)
	commits := map[int64]int{}
	for _, k := range keys {
		commits[k.commit]++
	}
	if len(keys) != 6 || len(commits) != 1 {
		t.Fatalf("the 6 records after the first commit went in commits %v (%d keys), want one", commits, len(keys))
	}
	checkEntry(t, s.Log(1), 2)
	checkEntry(t, s.Log(2), 1)
	if _, msgs, _ := scanAll(t, s, 3); len(msgs) != 1 {
		t.Fatalf("queue 3: %d messages", len(msgs))
	}
}

// TestLogConcurrentWithMessages: appenders of many logs and of messages at
// once, with real syncs: everything is written and the logs are contiguous.
func TestLogConcurrentWithMessages(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, func(c *Config) { c.NoSync = false })
	const logs, perLog, queues, perQueue = 8, 60, 4, 100
	var wg sync.WaitGroup
	for id := uint64(1); id <= logs; id++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := s.Log(id)
			for i := uint64(1); i <= perLog; i += 2 {
				appendRange(t, l, i, i+1)
			}
			if err := l.SetUint64([]byte("CurrentTerm"), id); err != nil {
				t.Error(err)
			}
		}()
	}
	var acked atomic.Int64
	for q := uint64(1); q <= queues; q++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); i <= perQueue; i++ {
				appendSync(t, s, q, i, testMessage(q, i))
				acked.Add(1)
			}
		}()
	}
	wg.Wait()
	writes := int64(logs*(perLog/2+1)) + acked.Load()
	commits := s.commits.Load()
	mustClose(t, s)
	s = openTest(t, dir)
	for id := uint64(1); id <= logs; id++ {
		l := s.Log(id)
		checkBounds(t, l, 1, perLog)
		if got := rangeIndexes(t, l, 1, perLog); !equalU64(got, seq(1, perLog)) {
			t.Fatalf("log %d: %v", id, got)
		}
		if v, err := l.Uint64([]byte("CurrentTerm")); err != nil || v != id {
			t.Fatalf("log %d CurrentTerm %d %v", id, v, err)
		}
	}
	for q := uint64(1); q <= queues; q++ {
		if seqs, _, _ := scanAll(t, s, q); len(seqs) != perQueue {
			t.Fatalf("queue %d: %d messages", q, len(seqs))
		}
	}
	t.Logf("%d synchronous writes from %d writers in %d group commits", writes, logs+queues, commits)
}

// TestLogAppendFaultFailsAlone: an entry whose write fails (the journal's
// fault hook) fails its Append — none of its batch is written, as the entries
// written must be a prefix — while the messages committed beside it are
// written, and the log takes later appends.
func TestLogAppendFaultFailsAlone(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	l := s.Log(5)
	appendRange(t, l, 1, 2)
	bad := logEntryKey(5, 4)
	fault := errors.New("injected")
	s.SetJournalFault(func(key []byte) error {
		if bytes.Equal(key, bad) {
			return fault
		}
		return nil
	})
	var wg sync.WaitGroup
	wg.Add(3)
	var logErr, msgErr atomic.Pointer[error]
	s.Append(9, 1, testMessage(9, 1), func(err error) { msgErr.Store(&err); wg.Done() })
	l.Append([]LogEntry{testEntry(5, 3), testEntry(5, 4), testEntry(5, 5)}, func(err error) { logErr.Store(&err); wg.Done() })
	s.Append(9, 2, testMessage(9, 2), func(err error) {
		if err != nil {
			t.Error(err)
		}
		wg.Done()
	})
	wg.Wait()
	if err := *logErr.Load(); !errors.Is(err, fault) {
		t.Fatalf("Append with a failing entry: %v", err)
	}
	if err := *msgErr.Load(); err != nil {
		t.Fatalf("message beside it: %v", err)
	}
	s.SetJournalFault(nil)
	checkBounds(t, l, 1, 2)
	appendRange(t, l, 3, 5)
	mustClose(t, s)
	s = openTest(t, dir)
	checkBounds(t, s.Log(5), 1, 5)
	if seqs, _, _ := scanAll(t, s, 9); !equalU64(seqs, []uint64{1, 2}) {
		t.Fatalf("messages beside the failed entry: %v", seqs)
	}
}

// TestSchemaVersion2Upgraded: a data dir of schema version 2 — what main
// writes before the logs, with messages (one large), a delivery mark,
// definitions and a stream — opens as the current version with all of it,
// and its logs start empty and work.
func TestSchemaVersion2Upgraded(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	vhID, err := s.Put(&VHost{Name: "/", Description: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(&Queue{VHost: "/", Name: "q1", Durable: true, Type: "classic"}); err != nil {
		t.Fatal(err)
	}
	appendSync(t, s, 1, 1, testMessage(1, 1))
	large := testMessage(1, 2)
	large.Body = bigBody(5<<20 + 1)
	appendSync(t, s, 1, 2, large)
	s.MarkDelivered(1, 1, 2)
	s.SetStreamOffset(4, "consumer", 42)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	rawUpdate(t, dir, func(txn *badger.Txn) error {
		// Version 2, and a key under the prefix that was reserved then.
		if err := txn.Set([]byte{prefixLog, 1}, []byte("stray")); err != nil {
			return err
		}
		return txn.Set(schemaKey, sealRecord(binary.AppendUvarint(beginRecord(nil), 2)))
	})

	s = openTest(t, dir)
	defs, err := s.LoadDefinitions()
	if err != nil {
		t.Fatal(err)
	}
	if len(defs.VHosts) != 1 || defs.VHosts[0].ID != vhID || defs.VHosts[0].Description != "default" ||
		len(defs.Queues) != 1 || defs.Queues[0].Name != "q1" || defs.Corrupt != 0 {
		t.Fatalf("definitions after upgrade: %+v", defs)
	}
	seqs, msgs, st := scanAll(t, s, 1)
	if !equalU64(seqs, []uint64{1, 2}) || st.Corrupt != 0 || msgs[1].Deliveries != 2 || !bytes.Equal(msgs[2].Body, large.Body) {
		t.Fatalf("messages after upgrade: %v %+v", seqs, st)
	}
	idx, err := s.LoadStream(4)
	if err != nil || idx.Offsets["consumer"] != 42 {
		t.Fatalf("stream offsets after upgrade: %v %v", idx.Offsets, err)
	}
	checkBounds(t, s.Log(1), 0, 0)
	appendRange(t, s.Log(1), 1, 3)
	checkEntry(t, s.Log(1), 3)
	mustClose(t, s)
	if keys := rawKeys(t, dir, []byte{prefixLog, 1}); len(keys) != 0 {
		t.Fatalf("stray reserved key kept: %q", keys)
	}
	rawUpdate(t, dir, func(txn *badger.Txn) error {
		item, err := txn.Get(schemaKey)
		if err != nil {
			return err
		}
		if v, err := readUvarintRecord(item); err != nil || v != schemaVersion {
			t.Errorf("schema version after upgrade: %d %v", v, err)
		}
		return nil
	})
}

// TestSchemaVersion3Upgraded: a data dir of schema version 3 keeps its logs
// (entries and values) when it is marked version 4.
func TestSchemaVersion3Upgraded(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	appendRange(t, s.Log(7), 1, 5)
	if err := s.Log(7).SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	rawUpdate(t, dir, func(txn *badger.Txn) error {
		return txn.Set(schemaKey, sealRecord(binary.AppendUvarint(beginRecord(nil), 3)))
	})
	s = openTest(t, dir)
	checkBounds(t, s.Log(7), 1, 5)
	checkEntry(t, s.Log(7), 5)
	if v, err := s.Log(7).Uint64([]byte("CurrentTerm")); err != nil || v != 3 {
		t.Fatalf("value after upgrade: %d %v", v, err)
	}
	mustClose(t, s)
	rawUpdate(t, dir, func(txn *badger.Txn) error {
		item, err := txn.Get(schemaKey)
		if err != nil {
			return err
		}
		if v, err := readUvarintRecord(item); err != nil || v != 4 {
			t.Errorf("schema version after upgrade: %d %v", v, err)
		}
		return nil
	})
}

// TestLogCrashKeepsAcknowledged runs TestLogCrashChild as a child process
// appending to logs and queues with real syncs, SIGKILLs it mid-stream, and
// checks that every entry and message it saw acknowledged as durable is in
// the reopened store, each log contiguous from its first entry.
func TestLogCrashKeepsAcknowledged(t *testing.T) {
	if os.Getenv("WARREN_LOG_CRASH_DIR") != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	cmd, sc := startChild(t, "TestLogCrashChild", "WARREN_LOG_CRASH_DIR", dir)
	acked := map[uint64]uint64{} // log or queue id → highest index acknowledged
	n := 0
	for sc.Scan() && n < 2000 {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "ack" {
			continue
		}
		id, _ := strconv.ParseUint(f[1], 10, 64)
		idx, _ := strconv.ParseUint(f[2], 10, 64)
		acked[id] = max(acked[id], idx)
		n++
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if n < 2000 {
		t.Fatalf("child stopped after %d acks", n)
	}
	s := openTest(t, dir)
	for id := uint64(1); id <= crashLogs; id++ {
		l := s.Log(id)
		first, last, err := l.Bounds()
		if err != nil {
			t.Fatal(err)
		}
		if first != 1 || last < acked[id] {
			t.Fatalf("log %d: %d..%d after the crash, %d acknowledged", id, first, last, acked[id])
		}
		if got := rangeIndexes(t, l, 1, last); !equalU64(got, seq(1, last)) {
			t.Fatalf("log %d not contiguous: %d entries for 1..%d", id, len(got), last)
		}
	}
	for q := uint64(100); q < 100+crashQueues; q++ {
		seqs, _, _ := scanAll(t, s, q)
		if uint64(len(seqs)) < acked[q] {
			t.Fatalf("queue %d: %d messages after the crash, %d acknowledged", q, len(seqs), acked[q])
		}
	}
	t.Logf("acknowledged before the kill: %v", acked)
}

const crashLogs, crashQueues = 4, 2

// TestLogCrashChild is the child of TestLogCrashKeepsAcknowledged: it writes
// until it is killed, printing "ack id index" for each durable write.
func TestLogCrashChild(t *testing.T) {
	dir := os.Getenv("WARREN_LOG_CRASH_DIR")
	if dir == "" {
		t.Skip("run by TestLogCrashKeepsAcknowledged")
	}
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var out sync.Mutex
	ack := func(id, index uint64) {
		out.Lock()
		fmt.Fprintf(os.Stdout, "ack %d %d\n", id, index)
		out.Unlock()
	}
	var wg sync.WaitGroup
	for id := uint64(1); id <= crashLogs; id++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := s.Log(id)
			for i := uint64(1); ; i += 3 {
				es := []LogEntry{testEntry(id, i), testEntry(id, i+1), testEntry(id, i+2)}
				if err := l.AppendWait(es); err != nil {
					return
				}
				ack(id, i+2)
			}
		}()
	}
	for q := uint64(100); q < 100+crashQueues; q++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); ; i++ {
				ch := make(chan error, 1)
				s.Append(q, i, testMessage(q, i), func(err error) { ch <- err })
				if <-ch != nil {
					return
				}
				ack(q, i)
			}
		}()
	}
	wg.Wait()
}
