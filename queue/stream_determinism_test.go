package queue

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// streamWorkload records a random command log on one stream: appends (one
// by one, and whole committed chunks), chunks cut and committed, failed
// writes rewound, retention by size and age as the clock moves, named
// offsets stored and policy changes — with refused commands among them.
type streamWorkload struct {
	rng     *rand.Rand
	s       *Stream
	now     int64
	log     []StreamCmd
	effects [][]byte
	snap    []byte
	snapAt  int
}

func newStreamWorkload(seed uint64) *streamWorkload {
	return &streamWorkload{
		rng: rand.New(rand.NewPCG(seed, seed^0x51ed27)),
		// A small cache: committed messages leave the tail as they would
		// on a busy node; the snapshot must not depend on it.
		s:   NewStream(StreamConfig{MaxBytes: 4000, MaxAge: 3000, MaxSegmentBytes: 600, CacheBytes: 300}),
		now: 1_000_000,
	}
}

func applyStream(s *Stream, cmd *StreamCmd) []byte {
	out, err := s.Apply(cmd, nil)
	b := encodeStreamEffects(nil, out)
	if err != nil {
		b = append(b, "error: "+err.Error()...)
	}
	return b
}

func (w *streamWorkload) run(n int) {
	w.snapAt = n / 2
	for i := 0; i < n; i++ {
		if i == w.snapAt {
			w.snap = w.s.StreamSnapshot()
		}
		cmd := w.next()
		w.log = append(w.log, cmd)
		w.effects = append(w.effects, applyStream(w.s, &cmd))
	}
}

func (w *streamWorkload) message() (*Message, string) {
	r := w.rng
	body := make([]byte, r.IntN(60))
	for i := range body {
		body[i] = byte('a' + r.IntN(26))
	}
	filter := ""
	if r.IntN(3) > 0 {
		filter = fmt.Sprint("f", r.IntN(20)) // sometimes more than a chunk lists
	}
	return &Message{Exchange: "x", RoutingKey: fmt.Sprint("k", r.IntN(3)), Header: []byte{byte(r.IntN(256))},
		Body: body, Persistent: true}, filter
}

// taken lists the chunks taken and not committed.
func (w *streamWorkload) taken() []ChunkInfo {
	var out []ChunkInfo
	for _, c := range w.s.chunks {
		if c.First >= w.s.committed {
			out = append(out, c)
		}
	}
	return out
}

func (w *streamWorkload) next() StreamCmd {
	r := w.rng
	w.now += int64(r.IntN(40))
	cmd := StreamCmd{Now: w.now}
	switch k := r.IntN(100); {
	case k < 40:
		cmd.Op = StreamAppend
		cmd.Msg, cmd.Filter = w.message()
	case k < 55:
		cmd.Op = StreamTakeChunk
		cmd.MaxBytes = int64(1 + r.IntN(300))
	case k < 70:
		cmd.Op = StreamCommit
		if t := w.taken(); len(t) > 0 {
			cmd.Offset = t[r.IntN(min(len(t), 2))].End() // in order, now and then two at once
		}
		if r.IntN(20) == 0 {
			cmd.Offset = w.s.written + 1 + r.Uint64N(5) // not written: refused
		}
	case k < 73:
		cmd.Op = StreamRewind
		if t := w.taken(); len(t) > 0 {
			cmd.Offset = t[r.IntN(len(t))].First
		} else {
			cmd.Offset = w.s.next + 3 // refused
		}
	case k < 83:
		cmd.Op = StreamRetain
		w.now += int64(r.IntN(400))
		cmd.Now = w.now
	case k < 91:
		cmd.Op = StreamStoreOffset
		cmd.Name = fmt.Sprint("c", r.IntN(4))
		if r.IntN(4) == 0 {
			cmd.Name = fmt.Sprint("once", r.IntN(500)) // a consumer seen on one side of the snapshot only
		}
		if w.s.next > 0 {
			cmd.Offset = r.Uint64N(w.s.next)
		}
	case k < 93:
		cmd.Op = StreamSetConfig
		cmd.Config = StreamConfig{MaxBytes: int64(r.IntN(6000)), MaxAge: int64(r.IntN(5000)),
			MaxSegmentBytes: int64(200 + r.IntN(800)), CacheBytes: int64(r.IntN(1000))}
	default:
		cmd.Op = StreamAppendChunk
		for range 1 + r.IntN(8) {
			m, f := w.message()
			cmd.Entries = append(cmd.Entries, StreamEntry{Msg: m, Filter: f})
		}
	}
	return cmd
}

// encodeStreamEffects appends effs to b, messages by content.
func encodeStreamEffects(b []byte, effs []StreamEffect) []byte {
	chunk := func(b []byte, c *ChunkInfo) []byte {
		b = binary.AppendUvarint(b, c.First)
		b = binary.AppendUvarint(b, uint64(c.Count))
		b = binary.AppendVarint(b, c.Timestamp)
		b = binary.AppendVarint(b, c.Bytes)
		b = binary.AppendUvarint(b, c.Segment)
		b = append(b, boolByte(c.Unfiltered), boolByte(c.AnyFilter))
		for _, f := range c.Filters {
			b = append(b, f...)
			b = append(b, ',')
		}
		return append(b, ';')
	}
	for i := range effs {
		f := &effs[i]
		b = append(b, byte(f.Kind))
		b = binary.AppendUvarint(b, f.Offset)
		if f.Kind == EffStreamWrite {
			b = chunk(b, &f.Chunk)
		}
		for _, e := range f.Entries {
			b = binary.AppendUvarint(b, e.Offset)
			b = append(b, e.Filter...)
			b = append(b, e.Msg.Exchange...)
			b = append(b, e.Msg.RoutingKey...)
			b = append(b, e.Msg.Header...)
			b = append(b, e.Msg.Body...)
			b = append(b, '/')
		}
		for j := range f.Chunks {
			b = chunk(b, &f.Chunks[j])
		}
		b = append(b, '|')
	}
	return b
}

// TestStreamDeterministicReplay records a long random command log on one
// stream, replays it into a fresh stream and, from the middle, into one
// restored from a snapshot taken there: each command must have the same
// effects, and the streams must end in the same state.
func TestStreamDeterministicReplay(t *testing.T) {
	commands, seeds := replayCommands()
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			w := newStreamWorkload(seed)
			w.run(commands)
			checkStreamWorkload(t, w)
			want := w.s.StreamSnapshot()

			fresh := NewStream(StreamConfig{MaxBytes: 4000, MaxAge: 3000, MaxSegmentBytes: 600, CacheBytes: 1 << 20})
			for i := range w.log {
				if got := applyStream(fresh, &w.log[i]); !bytes.Equal(got, w.effects[i]) {
					t.Fatalf("replay: command %d (op %d): effects\n%q\nwant\n%q", i, w.log[i].Op, got, w.effects[i])
				}
			}
			if !bytes.Equal(fresh.StreamSnapshot(), want) {
				t.Fatal("replay: state differs")
			}

			restored := NewStream(StreamConfig{})
			if err := restored.RestoreStreamSnapshot(w.snap); err != nil {
				t.Fatal(err)
			}
			for i := w.snapAt; i < len(w.log); i++ {
				if got := applyStream(restored, &w.log[i]); !bytes.Equal(got, w.effects[i]) {
					t.Fatalf("restored: command %d (op %d): effects\n%q\nwant\n%q", i, w.log[i].Op, got, w.effects[i])
				}
			}
			if !bytes.Equal(restored.StreamSnapshot(), want) {
				t.Fatal("restored: state differs")
			}
			for _, s := range []*Stream{fresh, restored} {
				if s.FirstOffset() != w.s.FirstOffset() || s.NextOffset() != w.s.NextOffset() ||
					s.CommittedOffset() != w.s.CommittedOffset() || s.Bytes() != w.s.Bytes() ||
					s.Segments() != w.s.Segments() || s.PendingBytes() != w.s.PendingBytes() {
					t.Fatalf("counts differ: first %d/%d next %d/%d committed %d/%d bytes %d/%d segments %d/%d pending %d/%d",
						s.FirstOffset(), w.s.FirstOffset(), s.NextOffset(), w.s.NextOffset(), s.CommittedOffset(), w.s.CommittedOffset(),
						s.Bytes(), w.s.Bytes(), s.Segments(), w.s.Segments(), s.PendingBytes(), w.s.PendingBytes())
				}
			}
		})
	}
}

// checkStreamWorkload makes sure the workload exercised what it is meant
// to: chunks written and committed, retention and rewinds dropping chunks,
// whole chunks appended, commands refused, offsets stored.
func checkStreamWorkload(t *testing.T, w *streamWorkload) {
	t.Helper()
	var writes, retained, rewound, refused, chunkAppends int
	for i, effs := range w.effects {
		op := w.log[i].Op
		if bytes.Contains(effs, []byte("error: ")) {
			refused++
		} else if op == StreamAppendChunk {
			chunkAppends++
		}
		for _, b := range bytes.Split(effs, []byte{'|'}) {
			if len(b) == 0 {
				continue
			}
			switch StreamEffectKind(b[0]) {
			case EffStreamWrite:
				writes++
			case EffStreamRemove:
				if op == StreamRetain {
					retained++
				} else {
					rewound++
				}
			}
		}
	}
	if writes < 300 || retained < 10 || rewound < 5 || refused < 20 || chunkAppends < 20 ||
		len(w.s.NamedOffsets()) == 0 || w.s.CommittedOffset() < 200 || w.s.FirstOffset() == 0 {
		t.Errorf("writes %d retained %d rewound %d refused %d chunk appends %d named %d committed %d first %d: workload too tame",
			writes, retained, rewound, refused, chunkAppends, len(w.s.NamedOffsets()), w.s.CommittedOffset(), w.s.FirstOffset())
	}
}

// TestStreamSnapshotRoundTrip: a stream snapshot restores to a stream
// whose snapshot is the same bytes, keeping this node's cursors (moved
// into the log); garbage is refused and leaves the stream as it was.
func TestStreamSnapshotRoundTrip(t *testing.T) {
	w := newStreamWorkload(7)
	w.run(3000)
	b := w.s.StreamSnapshot()
	r := NewStream(StreamConfig{CacheBytes: 123})
	c := &StreamConsumer{Prefetch: 10, Offset: 1 << 40}
	r.AddConsumer(c)
	if err := r.RestoreStreamSnapshot(b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.StreamSnapshot(), b) {
		t.Fatal("restored snapshot differs")
	}
	if r.Config().CacheBytes != 123 || len(r.Consumers()) != 1 || c.Offset != r.NextOffset() {
		t.Fatalf("node's own state: cache %d, %d consumers, cursor at %d (next %d)",
			r.Config().CacheBytes, len(r.Consumers()), c.Offset, r.NextOffset())
	}
	for _, bad := range [][]byte{nil, {9}, b[:len(b)/2], append(slices.Clone(b), 0)} {
		if err := r.RestoreStreamSnapshot(bad); err == nil {
			t.Fatalf("restored %d bad bytes", len(bad))
		}
	}
	if !bytes.Equal(r.StreamSnapshot(), b) {
		t.Fatal("a refused snapshot changed the stream")
	}
}

// TestStreamCommandsRefused: a commit cannot go past the chunks taken, a
// rewind must name the start of one not committed; a whole chunk cannot be appended while single
// appends wait; a refused command changes nothing.
func TestStreamCommandsRefused(t *testing.T) {
	s := NewStream(StreamConfig{})
	do := func(cmd StreamCmd) ([]StreamEffect, error) { return s.Apply(&cmd, nil) }
	for _, b := range []string{"aa", "bbb", "c"} {
		do(StreamCmd{Op: StreamAppend, Msg: &Message{Body: []byte(b)}})
	}
	out, err := do(StreamCmd{Op: StreamTakeChunk, Now: 5, MaxBytes: 5})
	if err != nil || len(out) != 1 || out[0].Chunk.First != 0 || out[0].Chunk.Count != 2 || out[0].Chunk.Timestamp != 5 {
		t.Fatalf("take: %+v %v", out, err)
	}
	before := s.StreamSnapshot()
	for _, cmd := range []StreamCmd{
		{Op: StreamCommit, Offset: 3},   // not written
		{Op: StreamRewind, Offset: 1},   // not a chunk start
		{Op: StreamRewind, Offset: 2},   // not taken
		{Op: StreamAppendChunk, Now: 9}, // single appends wait
		{Op: 99},
	} {
		if _, err := do(cmd); err == nil {
			t.Fatalf("op %d offset %d accepted", cmd.Op, cmd.Offset)
		}
	}
	if !bytes.Equal(s.StreamSnapshot(), before) {
		t.Fatal("a refused command changed the stream")
	}
	if _, err := do(StreamCmd{Op: StreamCommit, Offset: 2}); err != nil || s.CommittedOffset() != 2 {
		t.Fatalf("commit: %v, committed %d", err, s.CommittedOffset())
	}
}
