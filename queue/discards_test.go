package queue

import (
	"errors"
	"testing"
)

// aloConfig is an at-least-once dead-lettering queue (strategy,
// dead-letter exchange, reject-publish) of at most max messages.
func aloConfig(max int64) Config {
	c := DefaultConfig()
	c.DeadLetter, c.Overflow, c.DeadLetterAtLeastOnce, c.MaxLength = true, RejectPublish, true, max
	return c
}

func mustApply(t *testing.T, q *Queue, c Cmd) []Effect {
	t.Helper()
	out, err := q.Apply(&c, nil)
	if err != nil {
		t.Fatalf("op %d: %v", c.Op, err)
	}
	return out
}

// TestDiscardsHeldUntilSettled: with at-least-once dead-lettering a
// rejected and an expired message are kept (Held) among the discards,
// count against x-max-length, survive a snapshot, and leave only when
// settled; an id settled twice is passed over.
func TestDiscardsHeldUntilSettled(t *testing.T) {
	q := NewWithConfig(aloConfig(4))
	now := int64(1000)
	for i := range 3 {
		ttl := int64(-1)
		if i == 1 {
			ttl = 10
		}
		mustApply(t, q, Cmd{Op: OpEnqueue, Now: now, TTL: ttl, Msg: &Message{Body: []byte("abc")}})
	}
	mustApply(t, q, Cmd{Op: OpAttach, Now: now, Consumer: 7, Prefetch: 1})
	out := mustApply(t, q, Cmd{Op: OpCheckout, Now: now})
	if len(out) != 1 || out[0].Kind != EffDeliver || out[0].Entry.Seq != 1 {
		t.Fatalf("checkout %+v", out)
	}
	out = mustApply(t, q, Cmd{Op: OpDiscard, Now: now, Seq: 1})
	if len(out) < 1 || out[0].Kind != EffDeadLetter || !out[0].Held || out[0].Reason != ReasonRejected {
		t.Fatalf("discard %+v", out)
	}
	mustApply(t, q, Cmd{Op: OpDetach, Now: now, Consumer: 7})
	out = mustApply(t, q, Cmd{Op: OpTick, Now: now + 50})
	if len(out) != 1 || out[0].Kind != EffDeadLetter || !out[0].Held || out[0].Entry.Seq != 2 || out[0].Reason != ReasonExpired {
		t.Fatalf("tick %+v", out)
	}
	if n, bytes := q.DiscardCount(); n != 2 || bytes != 6 || q.Ready() != 1 {
		t.Fatalf("discards %d (%d bytes), ready %d", n, bytes, q.Ready())
	}
	// The discards count against x-max-length 4: one more fits, then
	// publishes are refused.
	for i, want := range []EffectKind{EffConfirm, EffReject} {
		out = mustApply(t, q, Cmd{Op: OpEnqueue, Now: now + 50, TTL: -1, Msg: &Message{Body: []byte("x")}, Publisher: 1, PubSeq: uint64(i + 1)})
		if len(out) != 1 || out[0].Kind != want {
			t.Fatalf("publish %d: %+v", i, out)
		}
	}

	var r Queue
	if err := r.RestoreSnapshot(q.Snapshot()); err != nil {
		t.Fatal(err)
	}
	ds := r.Discards(nil, 0)
	if rc := r.Config(); len(ds) != 2 || ds[0].Entry.Seq != 1 || ds[0].Reason != ReasonRejected || string(ds[0].Entry.Msg.Body) != "abc" ||
		ds[1].Entry.Seq != 2 || ds[1].Reason != ReasonExpired || !rc.AtLeastOnce() {
		t.Fatalf("restored discards %+v", ds)
	}

	for _, q := range []*Queue{q, &r} {
		out, err := q.Apply(&Cmd{Op: OpSettleDiscards, Seqs: []uint64{2, 1, 99}}, nil)
		if !errors.Is(err, ErrUnknownMessage) || len(out) != 2 || out[0].Kind != EffSettled || out[0].Entry.Seq != 1 || out[1].Entry.Seq != 2 {
			t.Fatalf("settle: %+v %v", out, err)
		}
		if n, bytes := q.DiscardCount(); n != 0 || bytes != 0 {
			t.Fatalf("after settling: %d discards (%d bytes)", n, bytes)
		}
		if _, err := q.Apply(&Cmd{Op: OpSettleDiscards, Seq: 1}, nil); !errors.Is(err, ErrUnknownMessage) {
			t.Fatalf("settled twice: %v", err)
		}
		// Room again.
		out = mustApply(t, q, Cmd{Op: OpEnqueue, Now: now + 60, TTL: -1, Msg: &Message{Body: []byte("y")}, Publisher: 1, PubSeq: 3})
		if len(out) != 1 || out[0].Kind != EffConfirm {
			t.Fatalf("publish after settling: %+v", out)
		}
	}
}

// TestDiscardsFallBackToAtMostOnce: the strategy without reject-publish
// (or without a dead-letter exchange) dead-letters at most once; a policy
// that stops asking for at-least-once lets the kept dead letters go.
func TestDiscardsFallBackToAtMostOnce(t *testing.T) {
	for _, c := range []Config{
		func() Config { c := aloConfig(-1); c.Overflow = DropHead; return c }(),
		func() Config { c := aloConfig(-1); c.Overflow = RejectPublishDLX; return c }(),
		func() Config { c := aloConfig(-1); c.DeadLetter = false; return c }(),
	} {
		q := NewWithConfig(c)
		mustApply(t, q, Cmd{Op: OpEnqueue, TTL: -1, Msg: &Message{Body: []byte("a")}})
		mustApply(t, q, Cmd{Op: OpGet})
		out := mustApply(t, q, Cmd{Op: OpDiscard, Seq: 1})
		if len(out) != 1 || out[0].Kind != EffDeadLetter || out[0].Held {
			t.Fatalf("%+v: discard %+v", c, out)
		}
		if n, _ := q.DiscardCount(); n != 0 {
			t.Fatalf("%+v: %d discards", c, n)
		}
	}

	q := NewWithConfig(aloConfig(-1))
	mustApply(t, q, Cmd{Op: OpEnqueue, TTL: -1, Msg: &Message{Body: []byte("a")}})
	mustApply(t, q, Cmd{Op: OpGet})
	mustApply(t, q, Cmd{Op: OpDiscard, Seq: 1})
	c := aloConfig(-1)
	c.Overflow = DropHead
	out := mustApply(t, q, Cmd{Op: OpSetConfig, Config: c})
	if len(out) != 1 || out[0].Kind != EffDeadLetter || out[0].Held || out[0].Entry.Seq != 1 {
		t.Fatalf("set-config: %+v", out)
	}
	if n, _ := q.DiscardCount(); n != 0 {
		t.Fatalf("%d discards after set-config", n)
	}
}

// TestDiscardsSnapshotV3: a snapshot of the version before the discards
// is still read.
func TestDiscardsSnapshotV3(t *testing.T) {
	q := NewWithConfig(DefaultConfig())
	q.Publish(&Message{Body: []byte("a")})
	b := q.Snapshot()
	// Version 3: no strategy byte after the dedup bounds, no discards at
	// the end.
	v3 := append([]byte{3}, b[1:]...)
	i := 1
	for range 3 { // ttl, max length, max length bytes
		i += varintLen(v3[i:])
	}
	i += 4 // overflow, priority, single active, dead letter
	i += varintLen(v3[i:]) + varintLen(v3[i+varintLen(v3[i:]):])
	i += 1 + int(v3[i]) // group header (short)
	i += varintLen(v3[i:])
	i += varintLen(v3[i:])
	if v3[i] != 0 || v3[len(v3)-1] != 0 {
		t.Fatal("layout changed: fix the test")
	}
	v3 = append(v3[:i:i], v3[i+1:len(v3)-1]...)
	var r Queue
	if err := r.RestoreSnapshot(v3); err != nil {
		t.Fatal(err)
	}
	if r.Ready() != 1 {
		t.Fatalf("ready %d", r.Ready())
	}
}

func varintLen(b []byte) int {
	for i, c := range b {
		if c < 0x80 {
			return i + 1
		}
	}
	return len(b)
}
