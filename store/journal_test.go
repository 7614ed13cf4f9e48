package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

func testMessage(q, seq uint64) *Message {
	return &Message{
		Exchange:   "amq.direct",
		RoutingKey: fmt.Sprintf("rk.%d", q),
		Header:     []byte{0, 60, 0, 0, byte(seq)},
		Body:       fmt.Appendf(nil, "body %d/%d", q, seq),
	}
}

// scanAll returns the messages of queueID by seq.
func scanAll(t *testing.T, s *Store, queueID uint64) ([]uint64, map[uint64]*Message, ScanStats) {
	t.Helper()
	var seqs []uint64
	msgs := map[uint64]*Message{}
	st, err := s.ScanQueue(queueID, func(seq uint64, m *Message) error {
		seqs = append(seqs, seq)
		msgs[seq] = m
		return nil
	})
	if err != nil {
		t.Fatalf("ScanQueue(%d): %v", queueID, err)
	}
	return seqs, msgs, st
}

func appendSync(t *testing.T, s *Store, q, seq uint64, m *Message) {
	t.Helper()
	ch := make(chan error, 1)
	s.Append(q, seq, m, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		t.Fatalf("Append(%d, %d): %v", q, seq, err)
	}
}

func TestAppendConcurrent(t *testing.T) {
	dir := t.TempDir()
	// Real syncs here: this is the durable path.
	s := openTest(t, dir, func(c *Config) { c.NoSync = false; c.MaxBatch = 256 })
	const goroutines, perG = 8, 400
	var calls [goroutines][perG]atomic.Int32
	var wg sync.WaitGroup
	wg.Add(goroutines * perG)
	for g := range goroutines {
		go func() {
			for i := range perG {
				q, seq := uint64(g%3+1), uint64(g*perG+i)
				s.Append(q, seq, testMessage(q, seq), func(err error) {
					if err != nil {
						t.Errorf("done(%d, %d): %v", q, seq, err)
					}
					calls[g][i].Add(1)
					wg.Done()
				})
			}
		}()
	}
	wg.Wait()
	for g := range goroutines {
		for i := range perG {
			if n := calls[g][i].Load(); n != 1 {
				t.Fatalf("done of %d/%d called %d times", g, i, n)
			}
		}
	}
	mustClose(t, s)

	s = openTest(t, dir)
	total := 0
	for q := uint64(1); q <= 3; q++ {
		seqs, msgs, st := scanAll(t, s, q)
		total += len(seqs)
		if st.Messages != len(seqs) || st.Corrupt != 0 {
			t.Fatalf("stats %+v for %d messages", st, len(seqs))
		}
		for _, seq := range seqs {
			if want := testMessage(q, seq); !equalMessage(msgs[seq], want) {
				t.Fatalf("message %d/%d = %+v, want %+v", q, seq, msgs[seq], want)
			}
		}
	}
	if total != goroutines*perG {
		t.Fatalf("%d messages after reopen, want %d", total, goroutines*perG)
	}
}

func equalMessage(a, b *Message) bool {
	return a.Exchange == b.Exchange && a.RoutingKey == b.RoutingKey && bytes.Equal(a.Header, b.Header) &&
		bytes.Equal(a.Body, b.Body) && a.Deliveries == b.Deliveries
}

func TestAppendNilDoneAndEmptyMessage(t *testing.T) {
	s := openTest(t, t.TempDir())
	s.Append(1, 1, &Message{}, nil)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	m, err := s.ReadMessage(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Exchange != "" || len(m.Header) != 0 || len(m.Body) != 0 || m.Deliveries != 0 {
		t.Fatalf("empty message read back as %+v", m)
	}
}

func TestRemoveThenReopen(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for seq := range uint64(10) {
		s.Append(7, seq, testMessage(7, seq), nil)
	}
	for _, seq := range []uint64{0, 4, 9} {
		s.Remove(7, seq)
	}
	mustClose(t, s)

	s = openTest(t, dir)
	seqs, _, _ := scanAll(t, s, 7)
	if want := []uint64{1, 2, 3, 5, 6, 7, 8}; fmt.Sprint(seqs) != fmt.Sprint(want) {
		t.Fatalf("seqs after remove and reopen: %v, want %v", seqs, want)
	}
	if _, err := s.ReadMessage(7, 4); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadMessage of removed: %v", err)
	}
}

func TestRemoveWrittenWithoutFlush(t *testing.T) {
	s := openTest(t, t.TempDir())
	appendSync(t, s, 1, 1, testMessage(1, 1))
	start := time.Now()
	s.Remove(1, 1)
	waitFor(t, "a lone removal to be written", func() bool {
		_, err := s.ReadMessage(1, 1)
		return errors.Is(err, ErrNotFound)
	})
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("lone removal took %v", d)
	}
}

func TestScanQueueOrder(t *testing.T) {
	s := openTest(t, t.TempDir())
	seqs := []uint64{0, 1, 2, 255, 256, 257, 65535, 65536, 1 << 40, 1<<64 - 1}
	shuffled := append([]uint64(nil), seqs...)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for _, seq := range shuffled {
		// Neighbouring queue ids share byte prefixes with queue 1.
		s.Append(1, seq, testMessage(1, seq), nil)
		s.Append(256, seq, testMessage(256, seq), nil)
		s.Append(0, seq, testMessage(0, seq), nil)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	got, msgs, st := scanAll(t, s, 1)
	if fmt.Sprint(got) != fmt.Sprint(seqs) {
		t.Fatalf("scan order %v, want %v", got, seqs)
	}
	wantBytes := 0
	for _, seq := range seqs {
		if !equalMessage(msgs[seq], testMessage(1, seq)) {
			t.Fatalf("message %d: %+v", seq, msgs[seq])
		}
		wantBytes += len(testMessage(1, seq).Body)
	}
	if st != (ScanStats{Messages: len(seqs), Bytes: wantBytes}) {
		t.Fatalf("stats %+v", st)
	}

	// fn's error stops the scan.
	stop := errors.New("stop")
	n := 0
	_, err := s.ScanQueue(1, func(uint64, *Message) error {
		n++
		if n == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 3 {
		t.Fatalf("scan stopped with %v after %d", err, n)
	}
}

func TestMarkDelivered(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for seq := range uint64(4) {
		m := testMessage(3, seq)
		m.Deliveries = 1
		s.Append(3, seq, m, nil)
	}
	s.MarkDelivered(3, 1, 2)
	s.MarkDelivered(3, 2, 5)
	s.MarkDelivered(3, 2, 6)
	mustClose(t, s)

	s = openTest(t, dir)
	_, msgs, _ := scanAll(t, s, 3)
	for seq, want := range []uint32{1, 2, 6, 1} {
		if got := msgs[uint64(seq)].Deliveries; got != want {
			t.Fatalf("deliveries of %d after reopen = %d, want %d", seq, got, want)
		}
	}
	if m, err := s.ReadMessage(3, 2); err != nil || m.Deliveries != 6 {
		t.Fatalf("ReadMessage: %+v, %v", m, err)
	}
	// Remove after recovery deletes the marks it learned of from the scan.
	s.Remove(3, 1)
	s.Remove(3, 2)
	s.Remove(3, 3)
	mustClose(t, s)
	keys := rawKeys(t, dir, queuePrefix(3))
	if len(keys) != 1 || !bytes.Equal(keys[0], msgKey(3, 0)) {
		t.Fatalf("keys left: %q", keys)
	}
}

func TestMarkThenRemoveSameBatch(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	s.Append(1, 1, testMessage(1, 1), nil)
	s.MarkDelivered(1, 1, 1)
	s.Remove(1, 1)
	mustClose(t, s)
	if keys := rawKeys(t, dir, queuePrefix(1)); len(keys) != 0 {
		t.Fatalf("keys left: %q", keys)
	}
}

func TestCorruptMessages(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for seq := range uint64(5) {
		s.Append(2, seq, testMessage(2, seq), nil)
	}
	s.MarkDelivered(2, 3, 4)
	mustClose(t, s)

	flipByte(t, dir, msgKey(2, 1), -1)              // a body byte
	flipByte(t, dir, markKey(2, 3), 0)              // the version byte of a mark
	rawUpdate(t, dir, func(txn *badger.Txn) error { // garbage in place of a record
		return txn.Set(msgKey(2, 4), []byte("xyz"))
	})

	s = openTest(t, dir)
	seqs, msgs, st := scanAll(t, s, 2)
	if fmt.Sprint(seqs) != "[0 2 3]" {
		t.Fatalf("seqs %v, want [0 2 3]", seqs)
	}
	if st.Corrupt != 3 || st.Messages != 3 {
		t.Fatalf("stats %+v, want 3 messages, 3 corrupt", st)
	}
	if msgs[3].Deliveries != 0 {
		t.Fatalf("corrupt mark applied: %d", msgs[3].Deliveries)
	}
	if _, err := s.ReadMessage(2, 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadMessage of corrupt: %v", err)
	}
	// The scan saw the corrupt mark, so Remove deletes it with its message.
	s.Remove(2, 3)
	mustClose(t, s)
	for _, k := range rawKeys(t, dir, queuePrefix(2)) {
		if seq, _, _ := parseQueueKey(k); seq == 3 {
			t.Fatalf("key %q left after Remove", k)
		}
	}
}

func TestRemoveQueue(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for seq := range uint64(25000) { // more than one delete chunk
		s.Append(5, seq, testMessage(5, seq), nil)
	}
	s.Append(6, 1, testMessage(6, 1), nil)
	s.MarkDelivered(5, 7, 1)
	// No Flush: RemoveQueue must not be outlived by earlier appends.
	if err := s.RemoveQueue(5); err != nil {
		t.Fatal(err)
	}
	if seqs, _, _ := scanAll(t, s, 5); len(seqs) != 0 {
		t.Fatalf("%d messages left", len(seqs))
	}
	if len(s.marked) != 0 {
		t.Fatalf("marks remembered: %v", s.marked)
	}
	mustClose(t, s)
	if keys := rawKeys(t, dir, queuePrefix(5)); len(keys) != 0 {
		t.Fatalf("%d keys left after reopen", len(keys))
	}
	s = openTest(t, dir)
	if seqs, _, _ := scanAll(t, s, 6); len(seqs) != 1 {
		t.Fatalf("other queue: %v", seqs)
	}
}

func TestFlush(t *testing.T) {
	s := openTest(t, t.TempDir(), func(c *Config) { c.NoSync = false; c.MaxBatch = 7 })
	var done atomic.Int32
	const n = 100
	for seq := range uint64(n) {
		s.Append(1, seq, testMessage(1, seq), func(error) { done.Add(1) })
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := done.Load(); got != n {
		t.Fatalf("%d of %d done callbacks ran before Flush returned", got, n)
	}
	s.Remove(1, 5)
	s.MarkDelivered(1, 6, 3)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadMessage(1, 5); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removal not written by Flush: %v", err)
	}
	if m, err := s.ReadMessage(1, 6); err != nil || m.Deliveries != 3 {
		t.Fatalf("mark not written by Flush: %+v %v", m, err)
	}
	// Flush with nothing pending returns at once.
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestBigBatchAndLargeBodies(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	// 3000 × 3 KiB stays in the LSM and exceeds one Badger transaction (~1.2 MiB);
	// 20 × 1 MiB goes to the value log.
	small := bytes.Repeat([]byte("s"), 3<<10)
	large := bytes.Repeat([]byte("L"), 1<<20)
	for seq := range uint64(3000) {
		s.Append(1, seq, &Message{Body: small}, nil)
	}
	for seq := range uint64(20) {
		s.Append(2, seq, &Message{Body: large}, nil)
	}
	mustClose(t, s)
	s = openTest(t, dir)
	for q, want := range map[uint64]ScanStats{1: {Messages: 3000, Bytes: 3000 * len(small)}, 2: {Messages: 20, Bytes: 20 * len(large)}} {
		_, _, st := scanAll(t, s, q)
		if st != want {
			t.Fatalf("queue %d: %+v, want %+v", q, st, want)
		}
	}
	m, err := s.ReadMessage(2, 19)
	if err != nil || !bytes.Equal(m.Body, large) {
		t.Fatalf("ReadMessage large: %v", err)
	}
}

func TestBacklogCap(t *testing.T) {
	s := openTest(t, t.TempDir(), func(c *Config) { c.maxBacklog = 4 << 10 })
	// Stall the writer inside the first message's callback.
	entered, release := make(chan struct{}), make(chan struct{})
	s.Append(1, 0, &Message{Body: []byte("first")}, func(error) {
		close(entered)
		<-release
	})
	<-entered
	body := make([]byte, 1000)
	for seq := uint64(1); seq <= 3; seq++ {
		s.Append(1, seq, &Message{Body: body}, nil) // fits under 4 KiB
	}
	returned := make(chan struct{})
	go func() {
		s.Append(1, 4, &Message{Body: body}, nil) // over the cap: blocks
		close(returned)
	}()
	waitFor(t, "the blocked Append to wait on the cap", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.npending == 3 && s.waiters == 1
	})
	close(release)
	<-returned
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if seqs, _, _ := scanAll(t, s, 1); len(seqs) != 5 {
		t.Fatalf("%d messages", len(seqs))
	}
	waitFor(t, "the backlog to drain", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.backlog == 0
	})
}

func TestBacklogReleasedByClose(t *testing.T) {
	s := openTest(t, t.TempDir(), func(c *Config) { c.maxBacklog = 1 })
	entered, release := make(chan struct{}), make(chan struct{})
	s.Append(1, 0, &Message{}, func(error) { close(entered); <-release })
	<-entered
	got := make(chan error, 1)
	go s.Append(1, 1, &Message{}, func(err error) { got <- err })
	waitFor(t, "the second Append to block", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.waiters == 1
	})
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	if err := <-got; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Append released with %v, want ErrClosed", err)
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

func TestValueLogGCRuns(t *testing.T) {
	s := openTest(t, t.TempDir(), func(c *Config) { c.GCInterval = 5 * time.Millisecond })
	body := bytes.Repeat([]byte("v"), 64<<10) // over ValueThreshold: value log
	for seq := range uint64(50) {
		s.Append(1, seq, &Message{Body: body}, nil)
	}
	for seq := range uint64(50) {
		s.Remove(1, seq)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two GC rounds", func() bool { return s.gcRuns.Load() >= 2 })
	if seqs, _, _ := scanAll(t, s, 1); len(seqs) != 0 {
		t.Fatalf("%d messages left", len(seqs))
	}
}
