package queue

import (
	"errors"
	"testing"
)

// TestApplySettleMany: one command settles, returns or discards several
// deliveries in the order named; an id that is not held is passed over
// and reported, the others applied.
func TestApplySettleMany(t *testing.T) {
	q := New()
	c := ConsumerID(1)
	if _, err := q.Apply(&Cmd{Op: OpAttach, Consumer: c}, nil); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		q.Publish(msg("m"))
	}
	effs, _ := q.Apply(&Cmd{Op: OpCheckout}, nil)
	if len(effs) != 6 || q.Unacked() != 6 {
		t.Fatalf("%d deliveries, %d unacked", len(effs), q.Unacked())
	}
	effs, err := q.Apply(&Cmd{Op: OpSettle, Seqs: []uint64{3, 1, 1 << 40, 2}}, nil)
	if !errors.Is(err, ErrUnknownMessage) {
		t.Fatalf("err %v, want ErrUnknownMessage for the id not held", err)
	}
	var got []uint64
	for _, f := range effs {
		if f.Kind != EffSettled {
			t.Fatalf("effect %d, want EffSettled", f.Kind)
		}
		got = append(got, f.Entry.Seq)
	}
	if len(got) != 3 || got[0] != 3 || got[1] != 1 || got[2] != 2 || q.Unacked() != 3 {
		t.Fatalf("settled %v, unacked %d; want [3 1 2], 3", got, q.Unacked())
	}
	if _, err := q.Apply(&Cmd{Op: OpReturn, Seqs: []uint64{5, 4}}, nil); err != nil {
		t.Fatal(err)
	}
	effs, err = q.Apply(&Cmd{Op: OpDiscard, Seqs: []uint64{6}}, nil)
	if err != nil || len(effs) != 1 || effs[0].Kind != EffDeadLetter || effs[0].Reason != ReasonRejected {
		t.Fatalf("discard: %v %+v", err, effs)
	}
	if q.Unacked() != 0 || q.Ready() != 2 {
		t.Fatalf("unacked %d ready %d, want 0 and 2 (requeued)", q.Unacked(), q.Ready())
	}
}

// TestPurgeInChunks: OpPurge with Max drops at most Max ready messages in
// queue order, requeued ones first; purging in chunks until fewer come
// back drops what one purge of all would.
func TestPurgeInChunks(t *testing.T) {
	q := New()
	for range 10 {
		q.Publish(msg("m"))
	}
	if e, ok := q.Get(false); !ok || !q.Return(e.Seq) {
		t.Fatal("get and return")
	}
	var seqs []uint64
	for {
		effs, err := q.Apply(&Cmd{Op: OpPurge, Max: 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range effs {
			if f.Kind != EffSettled {
				t.Fatalf("effect %d", f.Kind)
			}
			seqs = append(seqs, f.Entry.Seq)
		}
		if len(effs) < 4 {
			break
		}
	}
	if len(seqs) != 10 || q.Ready() != 0 || q.ReadyBytes() != 0 {
		t.Fatalf("purged %v, ready %d bytes %d", seqs, q.Ready(), q.ReadyBytes())
	}
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("purged %v, want 1..10 in order", seqs)
		}
	}
}
