package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"sync"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// bigBody is n bytes of a pattern that shows a misplaced chunk.
func bigBody(n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 4096 {
		b[i] = byte(i / 4096)
		b[min(i+1, n-1)] = byte(i / (4096 * 256))
	}
	return b
}

// TestLargeMessageStoredInChunks: a body over Badger's value limit (64 MiB)
// is stored, read back by ReadMessage, ReadMessages and ScanQueue after a
// reopen, and removed with all its chunks.
func TestLargeMessageStoredInChunks(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	m := testMessage(1, 7)
	m.Body = bigBody(70 << 20)
	appendSync(t, s, 1, 7, m)
	appendSync(t, s, 1, 8, testMessage(1, 8))
	got, err := s.ReadMessage(1, 7)
	if err != nil || !bytes.Equal(got.Body, m.Body) || !bytes.Equal(got.Header, m.Header) || got.RoutingKey != m.RoutingKey {
		t.Fatalf("ReadMessage: %v", err)
	}
	got = nil
	var paged []*Message
	if err := s.ReadMessages(1, false, []uint64{7, 8}, func(_ uint64, m *Message) { paged = append(paged, m) }); err != nil {
		t.Fatal(err)
	}
	if len(paged) != 2 || paged[0] == nil || !bytes.Equal(paged[0].Body, m.Body) || paged[1] == nil || string(paged[1].Body) != "body 1/8" {
		t.Fatalf("ReadMessages: %d messages", len(paged))
	}
	paged = nil
	mustClose(t, s)

	s = openTest(t, dir)
	seqs, msgs, st := scanAll(t, s, 1)
	if len(seqs) != 2 || st.Corrupt != 0 || !bytes.Equal(msgs[7].Body, m.Body) || msgs[7].Exchange != m.Exchange {
		t.Fatalf("after reopen: seqs %v, stats %+v", seqs, st)
	}
	msgs = nil
	s.MarkDelivered(1, 7, 2)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	s.Remove(1, 7)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	keys := rawKeys(t, dir, queuePrefix(1))
	if len(keys) != 1 || !bytes.Equal(keys[0], msgKey(1, 8)) {
		t.Fatalf("after Remove, keys of the queue: %q", keys)
	}
}

// TestLargeSpilledMessage: Spill, ReadMessages and Unspill of a body over
// the value limit.
func TestLargeSpilledMessage(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	m := testMessage(3, 1)
	m.Body = bigBody(65<<20 + 3)
	s.Spill(3, 1, m)
	var got *Message
	if err := s.ReadMessages(3, true, []uint64{1}, func(_ uint64, m *Message) { got = m }); err != nil {
		t.Fatal(err)
	}
	if got == nil || !bytes.Equal(got.Body, m.Body) {
		t.Fatal("spilled message not read back")
	}
	s.Unspill(3, 1)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	if keys := rawKeys(t, dir, []byte{prefixSpill}); len(keys) != 0 {
		t.Fatalf("after Unspill: %q", keys)
	}
}

// TestSchemaVersion1Upgraded: a version-1 database opens and is marked
// version 2 (chunked bodies).
func TestSchemaVersion1Upgraded(t *testing.T) {
	dir := t.TempDir()
	mustClose(t, openTest(t, dir))
	rawUpdate(t, dir, func(txn *badger.Txn) error {
		return txn.Set(schemaKey, sealRecord(binary.AppendUvarint(beginRecord(nil), 1)))
	})
	mustClose(t, openTest(t, dir))
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

// TestFailedCommitFailsOnlyItsOp: one op of a group commit that Badger
// refuses (fault hook) fails alone: the appends beside it are confirmed, the
// removals and delivery marks of the batch are written, and what a queue
// keeps in memory from the callbacks (failed appends dropped) is what a
// reopened store holds.
func TestFailedCommitFailsOnlyItsOp(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for seq := uint64(1); seq <= 3; seq++ {
		appendSync(t, s, 1, seq, testMessage(1, seq))
	}
	s.MarkDelivered(1, 3, 1)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// The model: seq → deliveries, as the queue would hold it.
	model := map[uint64]uint32{1: 0, 2: 0, 3: 1}

	gate, release := make(chan struct{}), make(chan struct{})
	bad := map[string]bool{string(msgKey(1, 11)): true, string(chunkKey(msgKey(1, 13), 1)): true}
	s.SetJournalFault(func(k []byte) error {
		if bytes.Equal(k, msgKey(1, 9)) {
			close(gate)
			<-release // hold the writer while the batch below gathers
		}
		if bad[string(k)] {
			return errors.New("injected write failure")
		}
		return nil
	})
	done9 := make(chan error, 1)
	s.Append(1, 9, testMessage(1, 9), func(err error) { done9 <- err })
	<-gate
	model[9] = 0

	var mu sync.Mutex
	results := map[uint64]error{}
	var wg sync.WaitGroup
	add := func(seq uint64, m *Message) {
		wg.Add(1)
		s.Append(1, seq, m, func(err error) {
			mu.Lock()
			results[seq] = err
			mu.Unlock()
			wg.Done()
		})
	}
	add(10, testMessage(1, 10))
	add(11, testMessage(1, 11)) // refused
	s.Remove(1, 1)
	delete(model, 1)
	s.MarkDelivered(1, 2, 1)
	s.MarkDelivered(1, 3, 2)
	model[2], model[3] = 1, 2
	add(12, testMessage(1, 12))
	big := testMessage(1, 13)
	big.Body = bigBody(3*bodyChunkLen + 5) // its second chunk is refused
	add(13, big)
	close(release)
	if err := <-done9; err != nil {
		t.Fatalf("append 9: %v", err)
	}
	if err := s.Flush(); err != nil { // also writes the marks
		t.Fatalf("Flush: %v", err)
	}
	wg.Wait()
	for seq, err := range results {
		if (err != nil) != (seq == 11 || seq == 13) {
			t.Errorf("append %d: %v", seq, err)
		}
		if err == nil {
			model[seq] = 0
		}
	}
	s.SetJournalFault(nil)
	mustClose(t, s)

	s = openTest(t, dir)
	seqs, msgs, st := scanAll(t, s, 1)
	got := map[uint64]uint32{}
	for _, seq := range seqs {
		got[seq] = msgs[seq].Deliveries
	}
	if !maps.Equal(got, model) || st.Corrupt != 0 {
		t.Fatalf("after reopen: %v (corrupt %d), want %v", got, st.Corrupt, model)
	}
	if keys := rawChunkKeys(t, s, 1); len(keys) != 0 {
		t.Fatalf("chunks of the refused message were written: %q", keys)
	}
}

// rawChunkKeys lists the chunk keys of queue q.
func rawChunkKeys(t *testing.T, s *Store, q uint64) [][]byte {
	t.Helper()
	var out [][]byte
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: queuePrefix(q)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if k := it.Item().Key(); len(k) == chunkKeyLen {
				out = append(out, it.Item().KeyCopy(nil))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRecordOverLimitFailsAlone: a record Badger would refuse fails with
// ErrTooLarge before it is queued, and nothing else fails.
func TestRecordOverLimitFailsAlone(t *testing.T) {
	s := openTest(t, t.TempDir())
	errc := make(chan error, 1)
	m := testMessage(1, 2)
	m.Header = make([]byte, maxValueLen) // only bodies are cut into chunks
	s.Append(1, 2, m, func(err error) { errc <- err })
	if err := <-errc; !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized message record: %v", err)
	}
	appendSync(t, s, 1, 1, testMessage(1, 1))
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// TestStreamChunkFailsWhole: a stream chunk's data and header are written
// and fail together: when the data is refused the header is not written
// and done gets the error, while a neighbour in the same commit is written.
func TestStreamChunkFailsWhole(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	gate, release := make(chan struct{}), make(chan struct{})
	s.SetJournalFault(func(k []byte) error {
		if bytes.Equal(k, msgKey(1, 1)) {
			close(gate)
			<-release
		}
		if bytes.Equal(k, streamKey(5, streamChunkData, 10)) {
			return errors.New("injected write failure")
		}
		return nil
	})
	s.Append(1, 1, testMessage(1, 1), nil)
	<-gate
	errc := make(chan error, 2)
	s.AppendStreamChunk(5, &StreamChunk{First: 10, Count: 1}, StreamMessageList{{Body: []byte("x")}}, func(err error) { errc <- err })
	s.AppendStreamChunk(5, &StreamChunk{First: 11, Count: 1}, StreamMessageList{{Body: []byte("y")}}, func(err error) { errc <- err })
	close(release)
	if err := <-errc; err == nil {
		t.Fatal("chunk 10: no error")
	}
	if err := <-errc; err != nil {
		t.Fatalf("chunk 11: %v", err)
	}
	s.SetJournalFault(nil)
	idx, err := s.LoadStream(5)
	if err != nil || len(idx.Chunks) != 1 || idx.Chunks[0].First != 11 {
		t.Fatalf("LoadStream: %+v %v", idx.Chunks, err)
	}
}

// TestLateMarkReplacedNotDuplicated: a second delivery mark of a message
// whose first one is still waiting replaces it, so the message's removal
// drops it and no mark outlives its message.
func TestLateMarkReplacedNotDuplicated(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	appendSync(t, s, 1, 1, testMessage(1, 1))
	s.MarkDelivered(1, 1, 1)
	s.mu.Lock()
	s.ageMarksLocked(false) // as a removeDelay tick: the mark is now the older generation
	s.mu.Unlock()
	s.MarkDelivered(1, 1, 2)
	s.Remove(1, 1)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	late := s.late
	s.mu.Unlock()
	mustClose(t, s)
	if keys := rawKeys(t, dir, queuePrefix(1)); len(keys) != 0 || late != 0 {
		t.Fatalf("after Remove: keys %q, late marks %d", keys, late)
	}
}

// TestStreamOffsetLongNames: named offsets of every name length are kept,
// the long ones under a hashed key.
func TestStreamOffsetLongNames(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	names := map[string]uint64{"a": 1, string(bytes.Repeat([]byte("b"), maxOffsetName)): 2,
		string(bytes.Repeat([]byte("c"), maxOffsetName+1)): 3, string(bytes.Repeat([]byte("d"), 5000)): 4}
	for n, off := range names {
		s.SetStreamOffset(9, n, off)
	}
	s.SetStreamOffset(9, string(bytes.Repeat([]byte("d"), 5000)), 5) // moves on
	names[string(bytes.Repeat([]byte("d"), 5000))] = 5
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	s = openTest(t, dir)
	idx, err := s.LoadStream(9)
	if err != nil || !maps.Equal(idx.Offsets, names) || idx.Corrupt != 0 {
		t.Fatalf("LoadStream: %d offsets, corrupt %d, %v", len(idx.Offsets), idx.Corrupt, err)
	}
	if err := s.RemoveStream(9); err != nil {
		t.Fatal(err)
	}
	if idx, _ := s.LoadStream(9); len(idx.Offsets) != 0 {
		t.Fatalf("after RemoveStream: %d offsets", len(idx.Offsets))
	}
}

// TestLargeStreamChunk: a stream chunk whose data is over the value limit
// is kept in chunk records, read back whole, found again after a reopen and
// deleted with its chunks.
func TestLargeStreamChunk(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	big := bigBody(70 << 20)
	msgs := []StreamMessage{{Exchange: "x", RoutingKey: "k", Header: []byte{1, 2}, Body: []byte("small"), Filter: "f"},
		{Exchange: "x", RoutingKey: "k", Header: []byte{3}, Body: big}}
	errc := make(chan error, 1)
	s.AppendStreamChunk(5, &StreamChunk{First: 0, Count: 2, Bytes: int64(len(big) + 5)}, StreamMessageList(msgs), func(err error) { errc <- err })
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	s.AppendStreamChunk(5, &StreamChunk{First: 2, Count: 1}, StreamMessageList{{Body: []byte("next")}}, func(err error) { errc <- err })
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	s = openTest(t, dir)
	idx, err := s.LoadStream(5)
	if err != nil || len(idx.Chunks) != 2 || idx.Corrupt != 0 {
		t.Fatalf("LoadStream: %+v %v", idx, err)
	}
	var got []StreamMessage
	end, err := s.ReadStream(5, 0, 3, 1<<30, nil, func(off uint64, m StreamMessage) { got = append(got, m) })
	if err != nil || end != 3 || len(got) != 3 || string(got[0].Body) != "small" || got[0].Filter != "f" ||
		!bytes.Equal(got[1].Body, big) || !bytes.Equal(got[1].Header, []byte{3}) || string(got[2].Body) != "next" {
		t.Fatalf("ReadStream: end %d, %d messages, %v", end, len(got), err)
	}
	got = nil
	s.RemoveStreamChunks(5, []uint64{0})
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	if keys := rawKeys(t, dir, streamPrefix(5, 0)); len(keys) != 2 {
		t.Fatalf("after RemoveStreamChunks: %q", keys)
	}
}
