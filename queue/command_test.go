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

// TestTickConsumersKeepQueueInUse: x-expires counts from the last tick
// that found a consumer, not from the consumer's attach, even when the
// detach carries no time; ExpiresAt tells the owner when to tick next.
func TestTickConsumersKeepQueueInUse(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Expires = 100
	q := NewWithConfig(cfg)
	tick := func(now int64) []Effect {
		out, err := q.Apply(&Cmd{Op: OpTick, Now: now}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	q.Apply(&Cmd{Op: OpTouch, Now: 1000}, nil)
	if at := q.ExpiresAt(); at != 1100 {
		t.Fatalf("ExpiresAt %d, want 1100", at)
	}
	q.Apply(&Cmd{Op: OpAttach, Consumer: 1, Now: 1000}, nil)
	if at := q.ExpiresAt(); at != 0 {
		t.Fatalf("ExpiresAt %d with a consumer, want 0", at)
	}
	if out := tick(5000); len(out) != 0 {
		t.Fatalf("with a consumer: %+v", out)
	}
	q.Apply(&Cmd{Op: OpDetach, Consumer: 1}, nil) // no clock
	if at := q.ExpiresAt(); at != 5100 {
		t.Fatalf("ExpiresAt %d after the consumer left, want 5100 (the last tick that saw it)", at)
	}
	if out := tick(5050); len(out) != 0 {
		t.Fatalf("expired 50 ms after the last tick with a consumer: %+v", out)
	}
	if out := tick(5100); len(out) != 1 || out[0].Kind != EffExpired || !q.Expired() || q.ExpiresAt() != 0 {
		t.Fatalf("due: %+v, Expired %v, ExpiresAt %d", out, q.Expired(), q.ExpiresAt())
	}
}

// TestTouchTakesExpiryBack: a use after EffExpired (its owner had not
// deleted the queue) takes the report back; the queue expires again once
// unused for Config.Expires.
func TestTouchTakesExpiryBack(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Expires = 100
	q := NewWithConfig(cfg)
	q.Apply(&Cmd{Op: OpTouch, Now: 1000}, nil)
	if out, _ := q.Apply(&Cmd{Op: OpTick, Now: 1100}, nil); len(out) != 1 || !q.Expired() {
		t.Fatalf("first expiry: %+v", out)
	}
	q.Apply(&Cmd{Op: OpGet, Now: 1150}, nil) // a basic.get is a use
	if q.Expired() || q.ExpiresAt() != 1250 {
		t.Fatalf("after a use: Expired %v, ExpiresAt %d", q.Expired(), q.ExpiresAt())
	}
	if out, _ := q.Apply(&Cmd{Op: OpTick, Now: 1200}, nil); len(out) != 0 {
		t.Fatalf("expired again too early: %+v", out)
	}
	if out, _ := q.Apply(&Cmd{Op: OpTick, Now: 1250}, nil); len(out) != 1 || out[0].Kind != EffExpired {
		t.Fatalf("second expiry: %+v", out)
	}
}

// TestGetHeldByGetter: a basic.get through OpGet with a holder id is held
// by it, so that HeldBy finds it (the getter's node died) and OpReturn
// puts it back; without one it is held by no consumer.
func TestGetHeldByGetter(t *testing.T) {
	q := New()
	for range 2 {
		q.Publish(&Message{Body: []byte("m")})
	}
	const getter = ConsumerID(7 << 40)
	effs, _ := q.Apply(&Cmd{Op: OpGet, Consumer: getter | 1}, nil)
	if len(effs) != 1 || effs[0].Kind != EffDeliver {
		t.Fatalf("get: %+v", effs)
	}
	q.Apply(&Cmd{Op: OpGet}, nil)
	held := q.HeldBy(0xFF<<40, getter, nil)
	if len(held) != 1 || held[0] != effs[0].Entry.Seq {
		t.Fatalf("held by the getter's node: %v, want [%d]", held, effs[0].Entry.Seq)
	}
	if ids := q.HolderIDs(nil); len(ids) != 1 || ids[0] != getter|1 {
		t.Fatalf("holders %v", ids)
	}
	r := New()
	if err := r.RestoreSnapshot(q.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if got := r.HeldBy(0xFF<<40, getter, nil); len(got) != 1 {
		t.Fatalf("after a snapshot: held by the getter %v", got)
	}
	q.Apply(&Cmd{Op: OpReturn, Seqs: held}, nil)
	if q.Ready() != 1 || q.Unacked() != 1 {
		t.Fatalf("ready %d unacked %d after the return", q.Ready(), q.Unacked())
	}
}

// TestSettleNamingHolder: a settlement naming a consumer applies only to
// the deliveries that consumer holds.
func TestSettleNamingHolder(t *testing.T) {
	q := New()
	q.Publish(&Message{Body: []byte("m")})
	q.Apply(&Cmd{Op: OpAttach, Consumer: 1, Prefetch: 10}, nil)
	q.Apply(&Cmd{Op: OpAttach, Consumer: 2, Prefetch: 10}, nil)
	effs, _ := q.Apply(&Cmd{Op: OpCheckout}, nil)
	if len(effs) != 1 {
		t.Fatalf("checkout: %+v", effs)
	}
	seq, holder := effs[0].Entry.Seq, effs[0].Consumer
	other := 3 - holder
	if _, err := q.Apply(&Cmd{Op: OpSettle, Seq: seq, Consumer: other}, nil); !errors.Is(err, ErrUnknownMessage) {
		t.Fatalf("settle by the other consumer: %v, want ErrUnknownMessage", err)
	}
	enc := AppendCmd(nil, &Cmd{Op: OpReturn, Seqs: []uint64{seq}, Consumer: holder})
	c, err := DecodeCmd(enc)
	if err != nil || c.Consumer != holder {
		t.Fatalf("decoded %+v, %v", c, err)
	}
	if _, err := q.Apply(&c, nil); err != nil || q.Unacked() != 0 || q.Ready() != 1 {
		t.Fatalf("return by the holder: %v; ready %d unacked %d", err, q.Ready(), q.Unacked())
	}
}
