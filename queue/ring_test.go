package queue

import (
	"bytes"
	"testing"
	"unsafe"
)

// TestCellIs24Bytes: the ready list's index entry is three words.
func TestCellIs24Bytes(t *testing.T) {
	if n := unsafe.Sizeof(cell{}); n != 24 {
		t.Fatalf("cell is %d bytes, want 24", n)
	}
}

// ringSeqs is every seq in r, front first.
func ringSeqs(r *ring) []uint64 {
	var seqs []uint64
	for i := 0; i < r.len(); i++ {
		seqs = append(seqs, r.seqAt(i))
	}
	return seqs
}

func equalSeqs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRingRebasesAndGoesWide: seqs 2^32 apart move the ring's base to the
// front, and when the front itself is that far behind the ring keeps full
// seqs until it drains; through both, every seq, flag and field survives
// pushes, growth, search, removal from the middle and pops.
func TestRingRebasesAndGoesWide(t *testing.T) {
	var r ring
	m := &Message{Body: []byte("x")}
	mk := func(seq uint64) slot {
		s := slot{msg: m, seq: seq, size: 1, flags: flagSpilled}
		s.setExpires(int64(seq % 1000))
		s.meta |= 3
		return s
	}
	r.push(mk(10))
	r.push(mk(20))
	if r.pop().seq != 10 {
		t.Fatal("front")
	}
	// 20 + 2^32 - 1 fits once the base is the front's 20.
	far := uint64(20 + maxOff)
	r.push(mk(far))
	if r.wide != nil || r.base != 20 || !equalSeqs(ringSeqs(&r), []uint64{20, far}) {
		t.Fatalf("rebase: wide %v base %d seqs %v", r.wide != nil, r.base, ringSeqs(&r))
	}
	// One more is too far from the front: the ring goes wide.
	r.push(mk(far + 1))
	if r.wide == nil {
		t.Fatal("not wide with a span over 32 bits")
	}
	want := []uint64{20, far, far + 1}
	for i := uint64(2); len(want) < 40; i++ { // grow while wide
		r.push(mk(far + i))
		want = append(want, far+i)
	}
	if got := ringSeqs(&r); !equalSeqs(got, want) {
		t.Fatalf("wide seqs %v, want %v", got, want)
	}
	if i := r.search(far + 5); r.seqAt(i) != far+5 {
		t.Fatalf("search found %d", r.seqAt(i))
	}
	if s := r.removeAt(3); s.seq != far+2 {
		t.Fatalf("removed %d", s.seq)
	}
	want = append(want[:3:3], want[4:]...)
	for _, seq := range want {
		s := r.pop()
		if s.seq != seq || s.msg != m || s.size != 1 || s.flags != flagSpilled || s.meta&deliveriesMask != 3 || s.expires() != int64(seq%1000) {
			t.Fatalf("popped %+v, want seq %d", s, seq)
		}
	}
	if r.wide != nil {
		t.Fatal("still wide when drained")
	}
	r.push(mk(7)) // a fresh base
	if r.base != 7 || r.pop().seq != 7 {
		t.Fatal("base after draining")
	}
}

// TestQueueAcrossSeq32: a queue whose ids cross 2^32 publishes, pages,
// delivers, settles, snapshots and restores as below it.
func TestQueueAcrossSeq32(t *testing.T) {
	q := New()
	q.nextSeq = 1<<32 - 3
	for i := 0; i < 6; i++ {
		q.Publish(&Message{Body: []byte{byte('a' + i)}})
	}
	if !q.PageOut(1<<32+1, 0, true) || q.base.ready.wide != nil {
		t.Fatal("page out across 2^32")
	}
	if refs := q.Wanted(nil, 10, 10, 1<<20); len(refs) != 1 || refs[0].Seq != 1<<32+1 || !refs[0].Spilled {
		t.Fatalf("wanted %+v", refs)
	}
	r := New()
	if err := r.RestoreSnapshot(q.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.Snapshot(), q.Snapshot()) {
		t.Fatal("snapshot of the restored queue differs")
	}
	for _, x := range []*Queue{q, r} {
		if !x.PageIn(1<<32+1, &Message{Body: []byte{'d'}}) {
			t.Fatal("page in")
		}
		for i := 0; i < 6; i++ {
			e, ok := x.Get(false)
			if !ok || e.Seq != 1<<32-2+uint64(i) || e.Msg.Body[0] != byte('a'+i) || e.Spilled != (i == 3) {
				t.Fatalf("get %d: %+v %v", i, e, ok)
			}
			if _, ok := x.Settle(e.Seq); !ok {
				t.Fatalf("settle %d", e.Seq)
			}
		}
	}
}
