package store

import (
	"fmt"
	"testing"
	"time"
)

func TestCancelSettledSkipsAppendMarkAndRemoval(t *testing.T) {
	s := &Store{}
	key := func(kind opKind, seq uint64) op {
		switch kind {
		case opMark, opRemoveBoth:
			b := make([]byte, markKeyLen)
			putMarkKey(b, 1, seq)
			return op{kind: kind, buf: b}
		}
		b := make([]byte, msgKeyLen)
		putMsgKey(b, 1, seq)
		return op{kind: kind, buf: b}
	}
	blocks := [][]op{
		{key(opAppend, 1), key(opAppend, 2), key(opMark, 2), key(opAppend, 3)},
		{key(opRemove, 1), key(opRemoveBoth, 2), key(opRemove, 9), key(opAppend, 1)},
	}
	s.cancelSettled(blocks)
	var got []string
	for _, ops := range blocks {
		for _, o := range ops {
			got = append(got, fmt.Sprint(o.kind, o.skip))
		}
	}
	// append 1, append 2 and its mark, and both removals are skipped; append 3,
	// the removal of 9 (appended earlier) and the re-append of 1 are written.
	want := fmt.Sprint([]string{
		fmt.Sprint(opAppend, true), fmt.Sprint(opAppend, true), fmt.Sprint(opMark, true), fmt.Sprint(opAppend, false),
		fmt.Sprint(opRemove, true), fmt.Sprint(opRemoveBoth, true), fmt.Sprint(opRemove, false), fmt.Sprint(opAppend, false),
	})
	if fmt.Sprint(got) != want {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	if s.Cancelled() != 2 {
		t.Fatalf("cancelled %d", s.Cancelled())
	}
}

func TestAppendRemovedBeforeCommitLeavesNothing(t *testing.T) {
	s := openTest(t, t.TempDir())
	const n = 20000
	done := make(chan error, n)
	for seq := uint64(1); seq <= n; seq++ {
		s.Append(3, seq, &Message{Body: []byte("x")}, func(err error) { done <- err })
		if seq%2 == 0 {
			s.MarkDelivered(3, seq, 1)
		}
		if seq%10 != 0 {
			s.Remove(3, seq)
		}
	}
	for i := 0; i < n; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	st, err := s.ScanQueue(3, func(seq uint64, m *Message) error {
		if m.Deliveries != 1 {
			t.Errorf("message %d: %d deliveries", seq, m.Deliveries)
		}
		seqs = append(seqs, seq)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) != n/10 || seqs[0] != 10 || seqs[len(seqs)-1] != n || st.Corrupt != 0 {
		t.Fatalf("%d left (first %v), corrupt %d", len(seqs), seqs[:min(3, len(seqs))], st.Corrupt)
	}
	t.Logf("%d of %d removed appends were never written", s.Cancelled(), n-n/10)
}

func TestLateMarksWrittenUnlessRemoved(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for seq := uint64(1); seq <= 4; seq++ {
		s.Append(5, seq, &Message{Body: []byte("x")}, nil)
		s.MarkDelivered(5, seq, 1)
	}
	s.Remove(5, 2) // acknowledged before its mark was due: no mark is ever written
	// Without a Flush the writer queues the rest within two removal delays.
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		late := s.late
		s.mu.Unlock()
		if late == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d late marks still waiting", late)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.MarkDelivered(5, 3, 2) // a later mark of a marked message is queued at once
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	got := map[uint64]uint32{}
	if _, err := s.ScanQueue(5, func(seq uint64, m *Message) error { got[seq] = m.Deliveries; return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(map[uint64]uint32{1: 1, 3: 2, 4: 1}) {
		t.Fatalf("deliveries after restart: %v", got)
	}
}
