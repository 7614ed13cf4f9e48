package queue

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/warrenmq/warren/amqp"
)

// headerWith is a content header payload with headers h (none when nil).
func headerWith(t *testing.T, h amqp.Table) []byte {
	t.Helper()
	ch := amqp.ContentHeader{ClassID: 60, Properties: amqp.Properties{ContentType: "text/plain", Headers: h}}
	b, err := ch.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDedupKeyOfTypes: the key of each type of header value, read from
// the encoded table among other headers; strings and byte arrays of the
// same bytes are one key, integers of the same value whatever their width
// one key, a string never an integer's.
func TestDedupKeyOfTypes(t *testing.T) {
	long := strings.Repeat("x", 300)
	key := func(v any, more amqp.Table) (DedupHash, int64, bool) {
		h := amqp.Table{"before": "b", "n": int32(7)}
		for k, x := range more {
			h[k] = x
		}
		if v != nil {
			h[DedupHeader] = v
		}
		return DedupKeyOf(headerWith(t, h))
	}
	must := func(v any) DedupHash {
		t.Helper()
		k, ttl, ok := key(v, nil)
		if !ok || ttl != -1 {
			t.Fatalf("%T %v: ok %v ttl %d", v, v, ok, ttl)
		}
		return k
	}
	if _, _, ok := key(nil, nil); ok {
		t.Fatal("a message without the header has a key")
	}
	if _, _, ok := DedupKeyOf(headerWith(t, nil)); ok {
		t.Fatal("a message without headers has a key")
	}
	if _, _, ok := DedupKeyOf(nil); ok {
		t.Fatal("no header frame has a key")
	}
	if must("a") != must([]byte("a")) {
		t.Fatal("a string and a byte array of the same bytes differ")
	}
	if must("a") == must("b") || must("a") == must("") {
		t.Fatal("different strings share a key")
	}
	if must(long) != must([]byte(long)) || must(long) == must(long[1:]) {
		t.Fatal("long strings keyed wrong")
	}
	if must(long[:62]) == must(long[:63]) || must(long[:63]) == must(long[:64]) {
		t.Fatal("strings around the inline length share a key")
	}
	five := must(int32(5))
	for _, v := range []any{int8(5), uint8(5), int16(5), uint16(5), uint32(5), int64(5)} {
		if must(v) != five {
			t.Fatalf("%T 5 is not int32 5's key", v)
		}
	}
	if must(int64(-5)) != must(int8(-5)) || must(int64(-5)) == five || must(int64(6)) == five {
		t.Fatal("integers keyed wrong")
	}
	if must("5") == five {
		t.Fatal("the string 5 is the integer 5's key")
	}
	if must(true) == must(false) || must(1.5) == must(2.5) {
		t.Fatal("other types keyed wrong")
	}
	if _, ttl, _ := key("a", amqp.Table{DedupTTLHeader: int64(60_000)}); ttl != 60_000 {
		t.Fatalf("x-cache-ttl %d, want 60000", ttl)
	}
	if _, ttl, _ := key("a", amqp.Table{DedupTTLHeader: "60"}); ttl != -1 {
		t.Fatalf("a string x-cache-ttl gave %d", ttl)
	}
	if _, ttl, _ := key("a", amqp.Table{DedupTTLHeader: int16(-1)}); ttl != -1 {
		t.Fatalf("a negative x-cache-ttl gave %d", ttl)
	}
	// The keys of versions that kept text read as the same keys.
	if DedupKeyOfLegacy("a") != must("a") || DedupKeyOfLegacy("int32:5") != five || DedupKeyOfLegacy("int64:-5") != must(int8(-5)) {
		t.Fatal("legacy keys differ")
	}
	hdr := headerWith(t, amqp.Table{"before": "b", DedupHeader: "some-key-0000000001", DedupTTLHeader: int32(5)})
	if n := testing.AllocsPerRun(100, func() { DedupKeyOf(hdr) }); n != 0 {
		t.Fatalf("DedupKeyOf allocates %v times", n)
	}
}

func hashOf(i int) DedupHash {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(i))
	return hashDedup(dedupTagInt, b[:])
}

// TestDedupCacheEvictsOldest: at its bound the cache evicts the oldest
// key, one per insert, and a hole left by Remove is reused without an
// eviction.
func TestDedupCacheEvictsOldest(t *testing.T) {
	c := DedupCache{Size: 3}
	for i := range 3 {
		if _, ev := c.Insert(hashOf(i), uint64(i), 0); ev {
			t.Fatalf("insert %d evicted below the bound", i)
		}
	}
	for i := 3; i < 10; i++ {
		old, ev := c.Insert(hashOf(i), uint64(i), 0)
		if !ev || old != hashOf(i-3) {
			t.Fatalf("insert %d evicted %v (%x), want key %d", i, ev, old, i-3)
		}
		if _, ok := c.Find(hashOf(i - 3)); ok {
			t.Fatalf("key %d still found after its eviction", i-3)
		}
	}
	if c.Len() != 3 {
		t.Fatalf("len %d", c.Len())
	}
	// 7 8 9: remove 8; the next insert takes the slot of 7 (the oldest),
	// the one after it the hole of 8 without evicting.
	e, ok := c.Find(hashOf(8))
	if !ok || e.Seq != 8 {
		t.Fatalf("find 8: %+v %v", e, ok)
	}
	c.Remove(e)
	if old, ev := c.Insert(hashOf(10), 10, 0); !ev || old != hashOf(7) {
		t.Fatalf("insert 10 evicted %v %x, want 7", ev, old)
	}
	if _, ev := c.Insert(hashOf(11), 11, 0); ev {
		t.Fatal("insert into a hole evicted")
	}
	var order []uint64
	c.Each(func(_ DedupHash, seq uint64, _ int64) { order = append(order, seq) })
	if len(order) != 3 || order[0] != 9 || order[1] != 10 || order[2] != 11 {
		t.Fatalf("order %v, want [9 10 11]", order)
	}
}

// TestDedupCacheModel: random inserts, updates and removals against a
// map and a list, with a small index that grows and wraps.
func TestDedupCacheModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const size = 500
	c := DedupCache{Size: size}
	model := map[DedupHash]uint64{}
	var order []DedupHash // live, oldest first
	for step := range 200_000 {
		k := hashOf(r.IntN(2000))
		e, ok := c.Find(k)
		seq, in := model[k]
		if ok != in || (ok && e.Seq != seq) {
			t.Fatalf("step %d: find %v %d, model %v %d", step, ok, e.Seq, in, seq)
		}
		switch {
		case ok && r.IntN(3) == 0:
			c.Remove(e)
			delete(model, k)
			for i := range order {
				if order[i] == k {
					order = append(order[:i], order[i+1:]...)
					break
				}
			}
		case ok:
			e.Seq = uint64(step)
			c.Update(e)
			model[k] = e.Seq
		default:
			old, ev := c.Insert(k, uint64(step), 0)
			model[k] = uint64(step)
			order = append(order, k)
			if ev {
				if _, in := model[old]; !in {
					t.Fatalf("step %d: evicted a key not cached", step)
				}
				delete(model, old)
				for i := range order {
					if order[i] == old {
						order = append(order[:i], order[i+1:]...)
						break
					}
				}
			}
		}
		if c.Len() != len(model) || c.Len() > size {
			t.Fatalf("step %d: len %d, model %d", step, c.Len(), len(model))
		}
	}
	var got []DedupHash
	c.Each(func(k DedupHash, seq uint64, _ int64) {
		if model[k] != seq {
			t.Fatalf("entry seq %d, model %d", seq, model[k])
		}
		got = append(got, k)
	})
	if len(got) != len(order) {
		t.Fatalf("%d entries, model %d", len(got), len(order))
	}
	for i := range got {
		if got[i] != order[i] {
			t.Fatalf("entry %d out of order", i)
		}
	}
}

// TestDedupSnapshotV4: a snapshot of version 4, whose keys are strings,
// restores the same keys and the same order of eviction.
func TestDedupSnapshotV4(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DedupSize, cfg.DedupTTL = 2, 500
	q := NewWithConfig(cfg)
	enqueueDedupCmd(t, q, "a", -1, 1, 1000)
	enqueueDedupCmd(t, q, "b", -1, 2, 1000)
	snap := q.Snapshot()
	cur := q.dedup.appendSnapshot(nil)
	at := bytes.LastIndex(snap, cur)
	if snap[0] != snapshotVersion || at < 0 {
		t.Fatal("dedup section not found")
	}
	// As version 4 wrote it: the keys' text.
	old := binary.AppendVarint(nil, q.dedup.Dropped)
	old = binary.AppendUvarint(old, 2)
	for i, k := range []string{"a", "b"} {
		old = appendString(old, k)
		old = binary.AppendUvarint(old, uint64(i+1))
		old = binary.AppendVarint(old, 1500)
	}
	v4 := append(append(append([]byte{4}, snap[1:at]...), old...), snap[at+len(cur):]...)
	var r Queue
	if err := r.RestoreSnapshot(v4); err != nil {
		t.Fatal(err)
	}
	if r.Dedup().Len() != 2 {
		t.Fatalf("restored %d keys", r.Dedup().Len())
	}
	if kept, _ := enqueueDedupCmd(t, &r, "a", -1, 3, 1100); kept {
		t.Fatal("a, restored from version 4, not found")
	}
	// c evicts a, the oldest.
	enqueueDedupCmd(t, &r, "c", -1, 4, 1100)
	r.Purge()
	if kept, _ := enqueueDedupCmd(t, &r, "a", -1, 5, 1100); !kept {
		t.Fatal("a not evicted first")
	}
	if kept, _ := enqueueDedupCmd(t, &r, "c", -1, 6, 1100); kept {
		t.Fatal("c forgotten")
	}
	// The new snapshot is of the current version and reads back alike.
	again := r.Snapshot()
	var r2 Queue
	if err := r2.RestoreSnapshot(again); err != nil || again[0] != snapshotVersion {
		t.Fatal(err)
	}
	if !bytes.Equal(r2.Snapshot(), again) {
		t.Fatal("snapshot of the restored queue differs")
	}
}
