package store

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestStreamChunksRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for c := 0; c < 3; c++ {
		msgs := make([]StreamMessage, 4)
		for i := range msgs {
			msgs[i] = StreamMessage{Exchange: "x", RoutingKey: "k", Header: []byte{1, 2}, Body: []byte(fmt.Sprintf("b%d", c*4+i)), Filter: "f"}
		}
		done := make(chan error, 1)
		s.AppendStreamChunk(7, &StreamChunk{First: uint64(c * 4), Count: 4, Timestamp: int64(c), Segment: uint64(c / 2), Bytes: 8, Filters: []string{"f"}}, StreamMessageList(msgs), func(err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	s.SetStreamOffset(7, "app", 5)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Config{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	idx, err := s.LoadStream(7)
	if err != nil || len(idx.Chunks) != 3 || idx.Offsets["app"] != 5 || idx.Chunks[2].Segment != 1 || idx.Chunks[1].Filters[0] != "f" {
		t.Fatalf("index: %+v %v", idx, err)
	}
	var got []string
	end, err := s.ReadStream(7, 4, 100, 1<<20, func(c *StreamChunk) bool { return c.First != 8 }, func(off uint64, m StreamMessage) {
		got = append(got, fmt.Sprintf("%d:%s", off, m.Body))
	})
	if err != nil || end != 100 || fmt.Sprint(got) != "[4:b4 5:b5 6:b6 7:b7]" {
		t.Fatalf("read: %v %v %v", got, end, err)
	}
	s.RemoveStreamChunks(7, []uint64{0})
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if idx, _ := s.LoadStream(7); len(idx.Chunks) != 2 || idx.Chunks[0].First != 4 {
		t.Fatalf("after removal: %+v", idx)
	}
	if err := s.RemoveStream(7); err != nil {
		t.Fatal(err)
	}
	if idx, _ := s.LoadStream(7); len(idx.Chunks) != 0 || len(idx.Offsets) != 0 {
		t.Fatalf("after RemoveStream: %+v", idx)
	}
}

// TestReplicaChunkRidesWithNextCommit: a replica's chunk write waits for
// company instead of committing alone, is durable with the next urgent
// write (its done called first, in the same commit), and alone is written
// anyway; both chunks are there after a reopen.
func TestReplicaChunkRidesWithNextCommit(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	var mu sync.Mutex
	var order []string
	note := func(what string, c chan<- error) func(error) {
		return func(err error) {
			mu.Lock()
			order = append(order, what)
			mu.Unlock()
			c <- err
		}
	}
	msgs := []StreamMessage{{Exchange: "x", RoutingKey: "k", Body: []byte("m0")}}
	chunkDone, appendDone := make(chan error, 1), make(chan error, 1)
	commits := s.commits.Load()
	s.AppendReplicaChunk(9, &StreamChunk{First: 0, Count: 1, Bytes: 2}, StreamMessageList(msgs), note("chunk", chunkDone))
	time.Sleep(20 * time.Millisecond) // well within removeDelay
	if n := s.commits.Load(); n != commits {
		t.Fatalf("%d group commits for the replica chunk alone, want none yet", n-commits)
	}
	s.Append(1, 1, &Message{Body: []byte("urgent")}, note("append", appendDone))
	for _, c := range []chan error{chunkDone, appendDone} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if fmt.Sprint(order) != "[chunk append]" {
		t.Errorf("completions %v, want the chunk's first", order)
	}
	mu.Unlock()
	if n := s.commits.Load() - commits; n != 1 {
		t.Errorf("%d group commits for the chunk and the append, want 1", n)
	}
	// Alone, it is written within removeDelay.
	s.AppendReplicaChunk(9, &StreamChunk{First: 1, Count: 1, Bytes: 2}, StreamMessageList{{Body: []byte("m1")}}, note("chunk", chunkDone))
	select {
	case err := <-chunkDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a lone replica chunk was never written")
	}
	mustClose(t, s)
	s = openTest(t, dir)
	defer mustClose(t, s)
	if idx, err := s.LoadStream(9); err != nil || len(idx.Chunks) != 2 {
		t.Fatalf("after reopen: %+v %v", idx, err)
	}
}
