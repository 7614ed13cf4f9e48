package store

import (
	"fmt"
	"testing"
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
		s.AppendStreamChunk(7, &StreamChunk{First: uint64(c * 4), Count: 4, Timestamp: int64(c), Segment: uint64(c / 2), Bytes: 8, Filters: []string{"f"}}, msgs, func(err error) { done <- err })
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
