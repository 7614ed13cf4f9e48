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
		case x < 80:
			log = append(log, GroupStreamOffsetCmd(k, fmt.Sprint("c", r.IntN(3)), uint64(r.IntN(200))))
		case x < 84:
			id := queue.ConsumerID(1+r.IntN(3))<<replNodeShift | queue.ConsumerID(1+r.IntN(4))
			log = append(log, GroupStreamJoinCmd(k, fmt.Sprint("c", r.IntN(2)), id, r.IntN(3), "t"))
		case x < 86:
			id := queue.ConsumerID(1+r.IntN(3))<<replNodeShift | queue.ConsumerID(1+r.IntN(4))
			log = append(log, GroupStreamLeaveCmd(k, fmt.Sprint("c", r.IntN(2)), id))
		case x < 87:
			log = append(log, GroupGoneCmd(replNodeMask, queue.ConsumerID(1+r.IntN(3))<<replNodeShift, now))
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

// TestStreamGroupElection: a consumer group's active member is partition
// mod members in joining order; one taking over resumes after the stored
// offset; a node gone takes its members out; the groups survive a
// snapshot.
func TestStreamGroupElection(t *testing.T) {
	g := NewQueueGroup()
	k := GroupQueueKey{VHost: "/", Name: "s", ID: 7}
	g.Apply(1, GroupStreamCreateCmd(k, queue.StreamConfig{}))
	header, err := (&amqp.ContentHeader{ClassID: amqp.ClassBasic, BodySize: 1}).AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []streamAppend
	for i := range 10 {
		msgs = append(msgs, streamAppend{msg: &queue.Message{Header: header, Body: []byte{byte(i)}}})
	}
	g.Apply(2, appendStreamAppendCmd(nil, k, 5, msgs))
	id1, id2 := queue.ConsumerID(1)<<replNodeShift|1, queue.ConsumerID(2)<<replNodeShift|1
	c1 := &queue.StreamConsumer{Tag: "c1", Name: "grp", Single: true, Elected: true, Prefetch: 10}
	c2 := &queue.StreamConsumer{Tag: "c2", Name: "grp", Single: true, Elected: true, Prefetch: 10}
	g.mu.Lock()
	gs := g.streams[k]
	for _, c := range []struct {
		id queue.ConsumerID
		sc *queue.StreamConsumer
	}{{id1, c1}, {id2, c2}} {
		if g.sacLocal == nil {
			g.sacLocal = map[queue.ConsumerID]sacLocal{}
		}
		g.sacLocal[c.id] = sacLocal{key: k, sc: c.sc}
		gs.s.AddConsumer(c.sc)
	}
	g.mu.Unlock()
	active := func() (bool, bool) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return c1.Active(), c2.Active()
	}
	g.Apply(3, GroupStreamJoinCmd(k, "grp", id1, 1, "c1"))
	if a1, a2 := active(); !a1 || a2 {
		t.Fatalf("one member: active %v %v, want the first", a1, a2)
	}
	g.Apply(4, GroupStreamJoinCmd(k, "grp", id2, 1, "c2"))
	if a1, a2 := active(); a1 || !a2 {
		t.Fatalf("partition 1 of two members: active %v %v, want the second", a1, a2)
	}
	g.Apply(5, GroupStreamOffsetCmd(k, "grp", 6))
	snap := g.snapshotBytes()
	g.Apply(6, GroupGoneCmd(replNodeMask, queue.ConsumerID(2)<<replNodeShift, 7))
	if a1, a2 := active(); !a1 || a2 || c1.Offset != 7 {
		t.Fatalf("second's node gone: active %v %v, offset %d; want the first from 7", a1, a2, c1.Offset)
	}
	g.Apply(7, GroupStreamLeaveCmd(k, "grp", id1))
	if a1, a2 := active(); a1 || a2 {
		t.Fatalf("both gone: active %v %v", a1, a2)
	}
	// The restored group has both members, the second active.
	if err := g.Restore(5, bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if a1, a2 := active(); a1 || !a2 {
		t.Fatalf("restored: active %v %v, want the second", a1, a2)
	}
}
