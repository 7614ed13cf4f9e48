package broker

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// streamGroupLog records a random log of replicated stream commands over
// two streams: creations, batched appends from a few publishers (some
// proposed twice), named offsets, retention at a moving clock and a
// deletion.
func streamGroupLog(seed uint64, n int) [][]byte {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	keys := []GroupQueueKey{{VHost: "/", Name: "s1", ID: 1}, {VHost: "/", Name: "s2", ID: 2}}
	header, err := (&amqp.ContentHeader{ClassID: amqp.ClassBasic, BodySize: 8}).AppendTo(nil)
	if err != nil {
		panic(err)
	}
	var log [][]byte
	seqs := map[uint64]uint64{}
	now := int64(1_000_000)
	for range n {
		now += int64(r.IntN(50))
		k := keys[r.IntN(len(keys))]
		switch x := r.IntN(100); {
		case x < 3:
			log = append(log, GroupStreamCreateCmd(k, queue.StreamConfig{MaxBytes: 3000, MaxAge: 2000, MaxSegmentBytes: 400}))
		case x < 4:
			log = append(log, GroupDeleteCmd(k))
		case x < 70:
			var msgs []streamAppend
			for range 1 + r.IntN(5) {
				pub := uint64(1 + r.IntN(3))
				seq := seqs[pub] + 1
				if r.IntN(8) == 0 && seqs[pub] > 0 {
					seq = 1 + r.Uint64N(seqs[pub]) // proposed again
				} else {
					seqs[pub] = seq
				}
				msgs = append(msgs, streamAppend{pub: pub, seq: seq, msg: &queue.Message{RoutingKey: k.Name, Header: header,
					Body: fmt.Appendf(nil, "%d/%d", pub, seq)}})
			}
			log = append(log, appendStreamAppendCmd(nil, k, now, msgs))
		case x < 85:
			log = append(log, GroupStreamOffsetCmd(k, fmt.Sprint("c", r.IntN(3)), uint64(r.IntN(200))))
		default:
			log = append(log, GroupStreamRetainCmd(k, now))
		}
	}
	return log
}

// TestStreamGroupDeterministic: two replicas applying the same log of
// stream commands (some in batches) hold the same streams — offsets,
// chunks, named offsets, publishers' sequences — and a replica restored
// from a snapshot taken halfway and fed the rest ends the same; a message
// proposed twice is appended once.
func TestStreamGroupDeterministic(t *testing.T) {
	for seed := range uint64(5) {
		log := streamGroupLog(seed, 2000)
		a, b := NewQueueGroup(), NewQueueGroup()
		var snap []byte
		half := len(log) / 2
		for i, c := range log {
			a.Apply(uint64(i+1), c)
			if i == half {
				snap = a.snapshotBytes()
			}
		}
		for i := 0; i < len(log); {
			n := min(1+i%4, len(log)-i)
			b.Apply(uint64(i+n), GroupBatchCmd(log[i:i+n]))
			i += n
		}
		if !bytes.Equal(a.snapshotBytes(), b.snapshotBytes()) {
			t.Fatalf("seed %d: replicas differ", seed)
		}
		c := NewQueueGroup()
		if err := c.Restore(uint64(half+1), bytes.NewReader(snap)); err != nil {
			t.Fatal(err)
		}
		for i, cmd := range log[half+1:] {
			c.Apply(uint64(half+2+i), cmd)
		}
		if !bytes.Equal(a.snapshotBytes(), c.snapshotBytes()) {
			t.Fatalf("seed %d: restored replica differs", seed)
		}
		if len(a.streamKeys()) == 0 {
			t.Fatalf("seed %d: no stream left to compare", seed)
		}
	}
}

// TestStreamGroupDedup: an append proposed twice (a retried forward) adds
// its messages once; the offsets follow.
func TestStreamGroupDedup(t *testing.T) {
	g := NewQueueGroup()
	k := GroupQueueKey{VHost: "/", Name: "s", ID: 7}
	g.Apply(1, GroupStreamCreateCmd(k, queue.StreamConfig{}))
	header, err := (&amqp.ContentHeader{ClassID: amqp.ClassBasic, BodySize: 1}).AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []streamAppend{{pub: 9, seq: 1, msg: &queue.Message{Header: header, Body: []byte("a")}},
		{pub: 9, seq: 2, msg: &queue.Message{Header: header, Body: []byte("b")}}}
	cmd := appendStreamAppendCmd(nil, k, 5, msgs)
	for i := range 3 {
		if r := g.Apply(uint64(2+i), cmd).(*GroupResult); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	more := appendStreamAppendCmd(nil, k, 6, []streamAppend{{pub: 9, seq: 3, msg: &queue.Message{Header: header, Body: []byte("c")}}})
	g.Apply(5, more)
	first, next, committed, _, ok := g.StreamOffsets(k)
	if !ok || first != 0 || next != 3 || committed != 3 {
		t.Fatalf("offsets %d %d %d %v, want 0 3 3", first, next, committed, ok)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	gs := g.streams[k]
	if gs.stored != 3 || gs.s.Chunks() != 2 {
		t.Fatalf("stored %d, chunks %d; want 3 and 2", gs.stored, gs.s.Chunks())
	}
}
