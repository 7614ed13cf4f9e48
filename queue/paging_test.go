package queue

import "testing"

func TestPageOutDispatchStopsAndResumes(t *testing.T) {
	q := New()
	var msgs []*Message
	for i := 0; i < 10; i++ {
		m := msg(string(rune('a' + i)))
		msgs = append(msgs, m)
		q.Publish(m)
	}
	for seq := uint64(4); seq <= 10; seq++ {
		if !q.PageOut(seq, 0, seq%2 == 0) {
			t.Fatalf("page out %d", seq)
		}
	}
	if q.PageOut(5, 0, false) {
		t.Fatal("paged out twice")
	}
	if n, b := q.Paged(); n != 7 || b != 7 {
		t.Fatalf("paged %d/%d", n, b)
	}
	if n, b := q.Resident(); n != 3 || b != 3 {
		t.Fatalf("resident %d/%d", n, b)
	}
	if q.Ready() != 10 || q.ReadyBytes() != 10 {
		t.Fatalf("ready %d/%d", q.Ready(), q.ReadyBytes())
	}
	c := &Consumer{Tag: "c", Prefetch: 100}
	_ = q.AddConsumer(c)
	ds := q.Dispatch(nil)
	if len(ds) != 3 || !q.HeadPaged() {
		t.Fatalf("delivered %d, head paged %v", len(ds), q.HeadPaged())
	}
	if _, ok := q.Get(true); ok {
		t.Fatal("get returned a paged-out message")
	}
	refs := q.Wanted(nil, 4, 100, 1<<20)
	if len(refs) != 4 || refs[0].Seq != 4 || !refs[0].Spilled || refs[1].Seq != 5 || refs[1].Spilled {
		t.Fatalf("wanted %+v", refs)
	}
	for _, r := range refs {
		if !q.PageIn(r.Seq, msgs[r.Seq-1]) {
			t.Fatalf("page in %d", r.Seq)
		}
	}
	if q.PageIn(4, msgs[3]) {
		t.Fatal("paged in twice")
	}
	ds = q.Dispatch(ds[:0])
	if len(ds) != 4 || ds[0].Entry.Seq != 4 || ds[0].Entry.Msg != msgs[3] || !ds[0].Entry.Spilled || ds[1].Entry.Spilled {
		t.Fatalf("after page in: %+v", ds)
	}
	if ds[0].Entry.Size != 1 {
		t.Fatalf("size %d", ds[0].Entry.Size)
	}
	if n, _ := q.Paged(); n != 3 {
		t.Fatalf("paged %d", n)
	}
}

func TestPagedHeadExpiresAndDrops(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MessageTTL = 10
	cfg.MaxLength = 3
	q := NewWithConfig(cfg)
	for i := 0; i < 3; i++ {
		q.PublishAt(msg("xy"), 1000, -1)
	}
	q.PageOut(1, 0, true)
	q.PageOut(2, 0, false)
	// A fourth publish drops the paged head, with a nil Msg and its size.
	_, _, dls := q.PublishAt(msg("z"), 1001, -1)
	if len(dls) != 1 || dls[0].Entry.Seq != 1 || dls[0].Entry.Msg != nil || dls[0].Entry.Size != 2 || !dls[0].Entry.Spilled {
		t.Fatalf("dropped %+v", dls)
	}
	dls = q.Expire(1010)
	if len(dls) != 2 || dls[0].Entry.Msg != nil || dls[1].Entry.Msg == nil {
		t.Fatalf("expired %+v", dls)
	}
	if n, b := q.Paged(); n != 0 || b != 0 || q.Ready() != 1 || q.ReadyBytes() != 1 {
		t.Fatalf("paged %d/%d ready %d/%d", n, b, q.Ready(), q.ReadyBytes())
	}
}

func TestPageOutEachKeepsHead(t *testing.T) {
	q := NewWithConfig(Config{MessageTTL: -1, MaxLength: -1, MaxLengthBytes: -1, DeliveryLimit: -1, MaxPriority: 2})
	for i := 0; i < 6; i++ {
		m := msg("m")
		m.Priority = uint8(i % 2)
		q.Publish(m)
	}
	var offered []uint64
	n := q.PageOutEach(2, 1<<20, func(seq uint64, m *Message) (bool, bool, bool) {
		offered = append(offered, seq)
		return true, false, true
	})
	// Lanes highest first, each from its tail, the first two of each kept.
	if n != 2 || len(offered) != 2 || offered[0] != 6 || offered[1] != 5 {
		t.Fatalf("paged %d offered %v", n, offered)
	}
	refs := q.Wanted(nil, 10, 10, 1<<20)
	if len(refs) != 2 || refs[0].Seq != 6 || refs[1].Seq != 5 {
		t.Fatalf("wanted %+v", refs)
	}
	if !q.DropPaged(6) || q.DropPaged(6) || q.Ready() != 5 {
		t.Fatalf("drop paged: ready %d", q.Ready())
	}
	c := &Consumer{Tag: "c", Prefetch: 100}
	_ = q.AddConsumer(c)
	ds := q.Dispatch(nil)
	// priority 1: 2, 4 (6 dropped); then the head of priority 0 (1) ...
	if len(ds) != 4 || ds[0].Entry.Seq != 2 || ds[1].Entry.Seq != 4 || ds[2].Entry.Seq != 1 || ds[3].Entry.Seq != 3 || !q.HeadPaged() {
		t.Fatalf("dispatch %v paged head %v", seqs(ds), q.HeadPaged())
	}
}

func TestRestorePaged(t *testing.T) {
	q := New()
	q.Restore(Entry{Msg: msg("a"), Seq: 3})
	q.RestorePaged(Entry{Seq: 7, Size: 5, Deliveries: 2, Redelivered: true}, 0)
	if q.Ready() != 2 || q.ReadyBytes() != 6 || !(q.Publish(msg("b")) == 8) {
		t.Fatalf("ready %d/%d", q.Ready(), q.ReadyBytes())
	}
	m := msg("hello")
	if !q.PageIn(7, m) {
		t.Fatal("page in")
	}
	_, _ = q.Get(false)
	e, ok := q.Get(false)
	if !ok || e.Seq != 7 || e.Msg != m || e.Deliveries != 3 || !e.Redelivered {
		t.Fatalf("got %+v", e)
	}
}

func seqs(ds []Delivery) []uint64 {
	var s []uint64
	for _, d := range ds {
		s = append(s, d.Entry.Seq)
	}
	return s
}

func TestRingShrinksAsItDrains(t *testing.T) {
	q := New()
	m := msg("x")
	for i := 0; i < 100_000; i++ {
		q.Publish(m)
	}
	big := len(q.base.ready.buf)
	for i := 0; i < 99_990; i++ {
		if _, ok := q.Get(true); !ok {
			t.Fatal("empty")
		}
	}
	if n := len(q.base.ready.buf); n >= big/8 || n > shrinkBelow {
		t.Fatalf("buffer of %d slots for 10 messages (was %d)", n, big)
	}
	for i := 99_990; i < 100_000; i++ {
		if e, ok := q.Get(true); !ok || e.Seq != uint64(i+1) {
			t.Fatalf("message %d: %+v %v", i, e, ok)
		}
	}
}
