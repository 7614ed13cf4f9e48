package queue

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// fixtureSnapshotV4 is snapshotFixture's snapshot as the build with
// 32-byte ready slots wrote it (format version 4, which the 24-byte cells
// kept).
const fixtureSnapshotV4 = "04c0a907010100000000010000000000080000000100016300000600010000000105018180c0e0a499ffbc3101017802726b04003c0000016100050104808080e3a499ffbc3101017802726b04003c00000164000505808080e4a499ffbc3101017802726b04003c00000165000106808080edd795ffbc3101017802726b04003c00000166000207808080e6a499ffbc31010008808080e7a499ffbc310102000102818080e1a499ffbc3101017802726b04003c0000016200000503818080e2a499ffbc3101017802726b04003c00000163000000"

// snapshotFixture builds a queue with ready, expiring, paged-out (spilled
// and not), requeued and unacknowledged messages.
func snapshotFixture() *Queue {
	cfg := DefaultConfig()
	cfg.MessageTTL = 60_000
	q := NewWithConfig(cfg)
	const now = 1_700_000_000_000
	for i := 0; i < 8; i++ {
		m := &Message{Exchange: "x", RoutingKey: "rk", Header: []byte{0, 60, 0, 0}, Body: []byte{'a' + byte(i)}, Persistent: i%2 == 0}
		ttl := int64(-1)
		if i == 5 {
			ttl = 1000
		}
		q.PublishAt(m, now+int64(i), ttl)
	}
	c := &Consumer{Tag: "c", Prefetch: 3}
	_ = q.AddConsumer(c)
	ds, _ := q.DispatchAt(nil, now+10)
	q.Return(ds[0].Entry.Seq)
	q.PageOut(7, 0, true)
	q.PageOut(8, 0, false)
	return q
}

// TestSnapshotBeforeCellsRestores: a snapshot written before the ready
// list packed its entries into cells (format version 4) restores to the
// state the same commands build now, which snapshots to the same bytes.
func TestSnapshotBeforeCellsRestores(t *testing.T) {
	old, err := hex.DecodeString(fixtureSnapshotV4)
	if err != nil {
		t.Fatal(err)
	}
	r := New()
	if err := r.RestoreSnapshot(old); err != nil {
		t.Fatal(err)
	}
	if got, now := r.Snapshot(), snapshotFixture().Snapshot(); !bytes.Equal(got, now) {
		t.Fatalf("the restored queue snapshots as\n%x\nthe same commands now as\n%x", got, now)
	}
	if r.Ready() != 6 || r.Unacked() != 2 {
		t.Fatalf("ready %d unacked %d", r.Ready(), r.Unacked())
	}
	if n, _ := r.Paged(); n != 2 {
		t.Fatalf("%d paged out, want 2", n)
	}
	if refs := r.Wanted(nil, 10, 10, 1<<20); len(refs) != 2 || refs[0].Seq != 7 || !refs[0].Spilled || refs[1].Seq != 8 || refs[1].Spilled {
		t.Fatalf("wanted %+v", refs)
	}
}
