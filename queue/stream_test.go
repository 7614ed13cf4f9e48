package queue

import (
	"fmt"
	"testing"
)

// fill appends n messages of size bytes (filter f) and writes them as one
// chunk at now, committed.
func fill(s *Stream, n, size int, f string, now int64) ChunkInfo {
	for i := 0; i < n; i++ {
		s.Append(&Message{Body: make([]byte, size)}, f)
	}
	ci, _, ok := s.TakeChunk(now, 1<<30)
	if !ok {
		panic("no chunk")
	}
	s.Commit(ci.End())
	return ci
}

func TestStreamResolve(t *testing.T) {
	s := NewStream(StreamConfig{CacheBytes: 1 << 20})
	fill(s, 5, 10, "", 1000)
	fill(s, 5, 10, "", 2000)
	fill(s, 5, 10, "", 3000)
	for _, tc := range []struct {
		spec OffsetSpec
		want uint64
	}{
		{OffsetSpec{Kind: OffsetFirst}, 0},
		{OffsetSpec{Kind: OffsetLast}, 10},
		{OffsetSpec{Kind: OffsetNext}, 15},
		{OffsetSpec{Kind: OffsetAbsolute, Offset: 7}, 7},
		{OffsetSpec{Kind: OffsetAbsolute, Offset: 99}, 15},
		{OffsetSpec{Kind: OffsetTimestamp, Time: 1500}, 5},
		{OffsetSpec{Kind: OffsetTimestamp, Time: 2000}, 5},
		{OffsetSpec{Kind: OffsetTimestamp, Time: 0}, 0},
		{OffsetSpec{Kind: OffsetTimestamp, Time: 9999}, 15},
	} {
		if got := s.Resolve(tc.spec); got != tc.want {
			t.Errorf("Resolve(%+v) = %d, want %d", tc.spec, got, tc.want)
		}
	}
}

func TestStreamRetain(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        StreamConfig
		now        int64
		wantFirst  uint64
		wantChunks int
	}{
		{"none", StreamConfig{MaxSegmentBytes: 100}, 10_000, 0, 6},
		{"size", StreamConfig{MaxSegmentBytes: 100, MaxBytes: 250}, 0, 10, 4},
		{"size keeps the active segment", StreamConfig{MaxSegmentBytes: 100, MaxBytes: 1}, 0, 20, 2},
		{"age", StreamConfig{MaxSegmentBytes: 100, MaxAge: 1500}, 4000, 20, 2},
		{"age keeps the active segment", StreamConfig{MaxSegmentBytes: 100, MaxAge: 1}, 99_999, 20, 2},
	} {
		s := NewStream(tc.cfg)
		for i := 0; i < 6; i++ { // three segments of two 50-byte chunks, at 1000, 2000, 3000
			fill(s, 5, 10, "", int64(1000*(1+i/2)))
		}
		s.Retain(tc.now)
		if s.FirstOffset() != tc.wantFirst || s.Chunks() != tc.wantChunks || s.NextOffset() != 30 {
			t.Errorf("%s: first %d chunks %d, want %d %d", tc.name, s.FirstOffset(), s.Chunks(), tc.wantFirst, tc.wantChunks)
		}
	}
}

func TestStreamDispatchCreditFilterAndGroups(t *testing.T) {
	s := NewStream(StreamConfig{CacheBytes: 1 << 20})
	fill(s, 4, 1, "a", 1)
	fill(s, 4, 1, "", 2)
	fill(s, 4, 1, "b", 3)
	all := &StreamConsumer{Tag: "all", Prefetch: 5}
	onlyB := &StreamConsumer{Tag: "b", Prefetch: 100, Filters: []string{"b"}}
	g1 := &StreamConsumer{Tag: "g1", Prefetch: 100, Name: "g", Single: true}
	g2 := &StreamConsumer{Tag: "g2", Prefetch: 100, Name: "g", Single: true}
	for _, c := range []*StreamConsumer{all, onlyB, g1, g2} {
		s.AddConsumer(c)
	}
	ds, reads := s.Dispatch(nil, nil)
	if len(reads) != 0 {
		t.Fatalf("reads: %v", reads)
	}
	got := map[string][]uint64{}
	for _, d := range ds {
		got[d.Consumer.Tag] = append(got[d.Consumer.Tag], d.Entry.Offset)
	}
	if fmt.Sprint(got) != "map[all:[0 1 2 3 4] b:[8 9 10 11] g1:[0 1 2 3 4 5 6 7 8 9 10 11]]" {
		t.Fatalf("deliveries: %v", got)
	}
	s.Settle(all, 2, 1)
	s.Settle(g1, 5, 4)
	if ds, _ = s.Dispatch(nil, nil); len(ds) != 2 || ds[0].Entry.Offset != 5 {
		t.Fatalf("after credit: %v", ds)
	}
	// g1 goes: g2 resumes after the group's acknowledged offset.
	if s.RemoveConsumer(g1); !g2.Active() || g2.Offset != 5 {
		t.Fatalf("takeover: %v at %d", g2.Active(), g2.Offset)
	}
	if off, ok := s.NamedOffset("g"); !ok || off != 4 {
		t.Fatalf("named offset %d %v", off, ok)
	}
	if d := s.TakeDirtyOffsets(); d["g"] != 4 {
		t.Fatalf("dirty: %v", d)
	}
}

func TestStreamTailAndReads(t *testing.T) {
	s := NewStream(StreamConfig{CacheBytes: 20})
	fill(s, 4, 10, "", 1)
	fill(s, 4, 10, "", 2)
	// The tail keeps the newest 20 bytes: offsets 6 and 7.
	c := &StreamConsumer{Prefetch: 10}
	s.AddConsumer(c)
	_, reads := s.Dispatch(nil, nil)
	if len(reads) != 1 || reads[0].From != 0 || reads[0].Limit != 6 {
		t.Fatalf("reads: %+v", reads)
	}
	if _, again := s.Dispatch(nil, nil); len(again) != 0 {
		t.Fatal("a second read while one is in flight")
	}
	var entries []StreamEntry
	for i := uint64(0); i < 6; i++ {
		entries = append(entries, StreamEntry{Offset: i, Msg: &Message{Body: make([]byte, 10)}})
	}
	s.Fill(c, 0, entries, 6)
	ds, reads := s.Dispatch(nil, nil)
	if len(ds) != 8 || len(reads) != 0 || ds[7].Entry.Offset != 7 {
		t.Fatalf("after fill: %d deliveries, reads %v", len(ds), reads)
	}
	// Uncommitted messages are not delivered.
	s.Append(&Message{Body: []byte("x")}, "")
	s.Settle(c, 8, 7)
	if ds, _ := s.Dispatch(nil, nil); len(ds) != 0 {
		t.Fatalf("uncommitted delivered: %v", ds)
	}
	if s.PendingBytes() != 1 {
		t.Fatalf("pending %d", s.PendingBytes())
	}
}

func TestStreamFilterSkipsTailChunksAndAsksForMore(t *testing.T) {
	s := NewStream(StreamConfig{CacheBytes: 1 << 30})
	for i := 0; i < 3; i++ {
		fill(s, maxSkip, 1, "a", 1) // chunks the filter skips whole
	}
	for i := 0; i < 2*maxSkip; i++ { // one chunk mixing a and b
		f := "a"
		if i == 2*maxSkip-1 {
			f = "b"
		}
		s.Append(&Message{Body: []byte{1}}, f)
	}
	ci, _, _ := s.TakeChunk(2, 1<<30)
	s.Commit(ci.End())
	c := &StreamConsumer{Prefetch: 10, Filters: []string{"b"}}
	s.AddConsumer(c)
	var ds []StreamDelivery
	rounds := 0
	for len(ds) == 0 && rounds < 10 {
		ds, _ = s.Dispatch(nil, nil)
		rounds++
		if len(ds) == 0 && !s.More() {
			t.Fatalf("round %d: nothing delivered and no more to do at offset %d", rounds, c.Offset)
		}
	}
	if len(ds) != 1 || ds[0].Entry.Offset != uint64(5*maxSkip-1) || rounds != 3 {
		t.Fatalf("after %d rounds: %+v", rounds, ds)
	}
}

// BenchmarkStreamAppendCommitDispatch is the state machine's share of a
// stream publish → deliver → ack, per message, in chunks of 100 with 4
// consumers at the tail.
func BenchmarkStreamAppendCommitDispatch(b *testing.B) {
	s := NewStream(StreamConfig{CacheBytes: 4 << 20})
	var cs []*StreamConsumer
	for i := 0; i < 4; i++ {
		c := &StreamConsumer{Prefetch: 1000}
		s.AddConsumer(c)
		cs = append(cs, c)
	}
	msg := &Message{Body: make([]byte, 100)}
	var out []StreamDelivery
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s.Append(msg, "")
		if i%100 == 99 {
			ci, _, _ := s.TakeChunk(int64(i), 1<<20)
			s.Commit(ci.End())
			out, _ = s.Dispatch(out[:0], nil)
			for _, c := range cs {
				s.Settle(c, c.Unacked(), 0)
			}
		}
	}
}

func TestStreamGroupsSpreadOverPartitions(t *testing.T) {
	for _, tc := range []struct {
		partition, members, active int
	}{
		{0, 3, 0}, {1, 3, 1}, {2, 3, 2}, {3, 3, 0}, {1, 2, 1}, {2, 2, 0}, {5, 1, 0},
	} {
		s := NewStream(StreamConfig{})
		s.SetPartition(tc.partition)
		var ms []*StreamConsumer
		for i := 0; i < tc.members; i++ {
			c := &StreamConsumer{Name: "g", Single: true, Prefetch: 1}
			s.AddConsumer(c)
			ms = append(ms, c)
		}
		for i, c := range ms {
			if c.Active() != (i == tc.active) {
				t.Errorf("partition %d, %d members: member %d active=%v", tc.partition, tc.members, i, c.Active())
			}
		}
	}
	// Membership changes move the active member; the new one resumes after
	// the group's offset.
	s := NewStream(StreamConfig{})
	s.SetPartition(1)
	fill(s, 10, 1, "", 1)
	a := &StreamConsumer{Name: "g", Single: true, Prefetch: 10}
	s.AddConsumer(a) // alone: active, from offset 0
	ds, _ := s.Dispatch(nil, nil)
	s.Settle(a, len(ds), 3)
	b := &StreamConsumer{Name: "g", Single: true, Prefetch: 10}
	s.AddConsumer(b) // partition 1 of 2 members: b takes over
	if a.Active() || !b.Active() || b.Offset != 4 {
		t.Fatalf("after b joined: a %v, b %v at %d", a.Active(), b.Active(), b.Offset)
	}
	s.RemoveConsumer(b)
	if !a.Active() || a.Offset != 4 {
		t.Fatalf("after b left: a %v at %d", a.Active(), a.Offset)
	}
}

func TestStreamSetConfigShrinksTheTail(t *testing.T) {
	s := NewStream(StreamConfig{CacheBytes: 1 << 20})
	for i := 0; i < 100; i++ {
		s.Append(&Message{Body: make([]byte, 1000)}, "")
	}
	for {
		if _, _, ok := s.TakeChunk(1, 64<<10); !ok {
			break
		}
	}
	s.Commit(s.NextOffset())
	if s.tailBytes != 100_000 {
		t.Fatalf("tail holds %d bytes", s.tailBytes)
	}
	cfg := s.Config()
	cfg.CacheBytes = 10_000
	s.SetConfig(cfg)
	if s.tailBytes > 10_000 || s.tailFirst != 90 {
		t.Fatalf("after shrinking: %d bytes from offset %d", s.tailBytes, s.tailFirst)
	}
}
