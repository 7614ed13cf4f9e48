package queue

import (
	"testing"

	"github.com/warrenmq/warren/amqp"
)

// dedupMsg is a message keyed key (none when "").
func dedupMsg(key string, ttl int64) *Message {
	m := &Message{Body: []byte(key)}
	if key != "" {
		h := amqp.Table{DedupHeader: key}
		if ttl >= 0 {
			h[DedupTTLHeader] = int32(ttl)
		}
		ch := amqp.ContentHeader{ClassID: 60, Properties: amqp.Properties{Headers: h}}
		b, err := ch.AppendTo(nil)
		if err != nil {
			panic(err)
		}
		m.Header = b
	}
	return m
}

// enqueueDedupCmd applies an enqueue of key by publisher 1 with sequence
// seq at now and reports whether the queue grew and whether it confirmed.
func enqueueDedupCmd(t *testing.T, q *Queue, key string, ttl int64, seq uint64, now int64) (kept, confirmed bool) {
	t.Helper()
	before := q.Ready()
	out, err := q.Apply(&Cmd{Op: OpEnqueue, Now: now, TTL: -1, Msg: dedupMsg(key, ttl), Publisher: 1, PubSeq: seq}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range out {
		if e.Kind == EffConfirm && e.PubSeq == seq {
			confirmed = true
		}
	}
	return q.Ready() > before, confirmed
}

func TestDedupInState(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DedupSize, cfg.DedupTTL = 3, 0
	q := NewWithConfig(cfg)
	if kept, ok := enqueueDedupCmd(t, q, "a", -1, 1, 1000); !kept || !ok {
		t.Fatalf("first a: kept %v confirmed %v", kept, ok)
	}
	// A duplicate while the original is in the queue: confirmed, not kept.
	if kept, ok := enqueueDedupCmd(t, q, "a", -1, 2, 1001); kept || !ok {
		t.Fatalf("second a: kept %v confirmed %v", kept, ok)
	}
	// A resend of the first publish is no duplicate to count.
	if kept, ok := enqueueDedupCmd(t, q, "a", -1, 1, 1002); kept || !ok {
		t.Fatalf("resend of a: kept %v confirmed %v", kept, ok)
	}
	if q.Dedup().Dropped != 1 {
		t.Fatalf("dropped %d, want 1", q.Dedup().Dropped)
	}
	// Unkeyed messages are never checked.
	for seq := uint64(3); seq < 5; seq++ {
		if kept, _ := enqueueDedupCmd(t, q, "", -1, seq, 1003); !kept {
			t.Fatal("unkeyed message dropped")
		}
	}
	// With the original gone (no window), the key is free again.
	e, ok := q.Get(true)
	if !ok || string(e.Msg.Body) != "a" {
		t.Fatalf("get: %v %v", e, ok)
	}
	if kept, _ := enqueueDedupCmd(t, q, "a", -1, 5, 1004); !kept {
		t.Fatal("a after the original left: dropped")
	}
	// A message's own window outlives it.
	if kept, _ := enqueueDedupCmd(t, q, "w", 100, 6, 2000); !kept {
		t.Fatal("w dropped")
	}
	q.Purge()
	if kept, _ := enqueueDedupCmd(t, q, "w", -1, 7, 2099); kept {
		t.Fatal("w inside its window: enqueued")
	}
	if kept, _ := enqueueDedupCmd(t, q, "w", -1, 8, 2100); !kept {
		t.Fatal("w after its window: dropped")
	}
	// The cache holds Size keys: the oldest is forgotten.
	for i, k := range []string{"x", "y", "z"} {
		enqueueDedupCmd(t, q, k, -1, uint64(9+i), 3000)
	}
	if q.Dedup().Len() != 3 {
		t.Fatalf("cache holds %d keys, want 3", q.Dedup().Len())
	}
}

func TestDedupSnapshotAndConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DedupSize, cfg.DedupTTL = 10, 500
	q := NewWithConfig(cfg)
	enqueueDedupCmd(t, q, "a", -1, 1, 1000)
	enqueueDedupCmd(t, q, "b", -1, 2, 1000)
	enqueueDedupCmd(t, q, "a", -1, 3, 1001) // dropped
	q.Purge()                               // both gone; their windows stay

	var r Queue
	if err := r.RestoreSnapshot(q.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if c := r.Config(); c.DedupSize != 10 || c.DedupTTL != 500 {
		t.Fatalf("restored config %+v", c)
	}
	if r.Dedup() == nil || r.Dedup().Dropped != 1 || r.Dedup().Len() != 2 {
		t.Fatalf("restored cache %+v", r.Dedup())
	}
	if kept, ok := enqueueDedupCmd(t, &r, "b", -1, 4, 1400); kept || !ok {
		t.Fatalf("b inside its window after restore: kept %v confirmed %v", kept, ok)
	}
	if kept, _ := enqueueDedupCmd(t, &r, "b", -1, 5, 1500); !kept {
		t.Fatal("b after its window after restore: dropped")
	}

	// The bounds travel in a configuration and are fixed by SetConfig.
	got, err := DecodeConfig(AppendConfig(nil, &cfg))
	if err != nil || got != cfg {
		t.Fatalf("config round trip: %+v %v", got, err)
	}
	plain := DefaultConfig()
	if got, err := DecodeConfig(AppendConfig(nil, &plain)); err != nil || got != plain {
		t.Fatalf("plain config round trip: %+v %v", got, err)
	}
	r.SetConfig(DefaultConfig(), 0)
	if c := r.Config(); c.DedupSize != 10 || r.Dedup() == nil {
		t.Fatalf("SetConfig changed deduplication: %+v", c)
	}
}
