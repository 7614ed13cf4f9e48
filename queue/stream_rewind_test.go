package queue

import "testing"

// TestStreamRewind: rewinding to a chunk that was not written drops it and
// everything after it (taken or not), and the next message takes its
// offset; what was committed stays.
func TestStreamRewind(t *testing.T) {
	s := NewStream(StreamConfig{MaxSegmentBytes: 250, CacheBytes: 1 << 20})
	fill(s, 2, 100, "", 1)
	fill(s, 1, 100, "", 2) // a new segment starts after this one
	for i := 0; i < 3; i++ {
		s.Append(&Message{Body: make([]byte, 100)}, "")
	}
	failed, _, _ := s.TakeChunk(3, 100) // first of the failed run, in a new segment
	s.TakeChunk(4, 100)
	c := &StreamConsumer{Prefetch: 10, Offset: s.NextOffset()}
	s.AddConsumer(c)
	dropped := s.Rewind(failed.First)
	if len(dropped) != 2 || dropped[0].First != 3 {
		t.Fatalf("dropped %+v", dropped)
	}
	if s.NextOffset() != 3 || s.CommittedOffset() != 3 || s.Chunks() != 2 || s.Segments() != 1 ||
		s.Bytes() != 300 || s.PendingBytes() != 0 || c.Offset != 3 {
		t.Fatalf("after rewind: next %d committed %d chunks %d segments %d bytes %d pending %d consumer at %d",
			s.NextOffset(), s.CommittedOffset(), s.Chunks(), s.Segments(), s.Bytes(), s.PendingBytes(), c.Offset)
	}
	if off := s.Append(&Message{Body: []byte("x")}, ""); off != 3 {
		t.Fatalf("next message at %d, want 3", off)
	}
	ci, entries, ok := s.TakeChunk(5, 100)
	if !ok || ci.First != 3 || len(entries) != 1 {
		t.Fatalf("chunk after rewind: %+v %d", ci, len(entries))
	}
	s.Commit(ci.End())
	ds, _ := s.Dispatch(nil, nil)
	if len(ds) != 1 || ds[0].Entry.Offset != 3 || string(ds[0].Entry.Msg.Body) != "x" {
		t.Fatalf("dispatch after rewind: %+v", ds)
	}
}
