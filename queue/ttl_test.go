package queue

import "testing"

func reasons(dls []DeadLetter) []string {
	var out []string
	for _, d := range dls {
		out = append(out, string(d.Entry.Msg.Body)+":"+d.Reason)
	}
	return out
}

func TestTTL(t *testing.T) {
	type pub struct {
		body string
		at   int64
		ttl  int64 // per-message, -1 none
	}
	tests := []struct {
		name      string
		queueTTL  int64
		consumer  bool // a consumer with prefetch 1 is registered
		publish   []pub
		at        int64 // DispatchAt / Expire time
		wantDL    []string
		wantReady int
		wantNext  int64
	}{
		{name: "queue ttl expires", queueTTL: 100, publish: []pub{{"a", 1000, -1}, {"b", 1050, -1}},
			at: 1100, wantDL: []string{"a:expired"}, wantReady: 1, wantNext: 1150},
		{name: "boundary is inclusive", queueTTL: 100, publish: []pub{{"a", 1000, -1}},
			at: 1099, wantReady: 1, wantNext: 1100},
		{name: "per-message ttl smaller wins", queueTTL: 1000, publish: []pub{{"a", 1000, 10}},
			at: 1010, wantDL: []string{"a:expired"}},
		{name: "queue ttl smaller wins", queueTTL: 10, publish: []pub{{"a", 1000, 1000}},
			at: 1010, wantDL: []string{"a:expired"}},
		{name: "head blocks expired behind it", queueTTL: -1, publish: []pub{{"a", 1000, 500}, {"b", 1000, 10}},
			at: 1100, wantReady: 2, wantNext: 1500},
		{name: "no ttl never expires", queueTTL: -1, publish: []pub{{"a", 1000, -1}},
			at: 1 << 40, wantReady: 1, wantNext: 0},
		{name: "ttl 0 without consumer expires at publish", queueTTL: 0, publish: []pub{{"a", 1000, -1}},
			at: 1000, wantDL: []string{"a:expired"}},
		{name: "per-message ttl 0 without consumer", queueTTL: -1, publish: []pub{{"a", 1000, 0}},
			at: 1000, wantDL: []string{"a:expired"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MessageTTL = tt.queueTTL
			q := NewWithConfig(cfg)
			var dls []DeadLetter
			for _, p := range tt.publish {
				_, ok, d := q.PublishAt(msg(p.body), p.at, p.ttl)
				if !ok {
					t.Fatal("publish refused")
				}
				dls = append(dls, d...)
			}
			dls = append(dls, q.Expire(tt.at)...)
			if got := reasons(dls); !equal(got, tt.wantDL) {
				t.Fatalf("dead letters %v, want %v", got, tt.wantDL)
			}
			if q.Ready() != tt.wantReady {
				t.Fatalf("ready %d, want %d", q.Ready(), tt.wantReady)
			}
			if got := q.NextExpiry(); got != tt.wantNext {
				t.Fatalf("next expiry %d, want %d", got, tt.wantNext)
			}
		})
	}
}

func TestTTLZeroDeliveredNow(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MessageTTL = 0
	q := NewWithConfig(cfg)
	c := &Consumer{Tag: "c", Prefetch: 1}
	if err := q.AddConsumer(c); err != nil {
		t.Fatal(err)
	}
	if _, _, dl := q.PublishAt(msg("a"), 1000, -1); len(dl) != 0 {
		t.Fatalf("a dropped: %v", reasons(dl))
	}
	ds, dl := q.DispatchAt(nil, 1000)
	if !equal(bodies(ds), []string{"a"}) || len(dl) != 0 {
		t.Fatalf("dispatch %v %v", bodies(ds), reasons(dl))
	}
	// c is full now: the next one cannot be delivered and expires at once.
	if _, ok, dl := q.PublishAt(msg("b"), 1000, -1); !ok || !equal(reasons(dl), []string{"b:expired"}) {
		t.Fatalf("b: %v %v", ok, reasons(dl))
	}
	if q.Ready() != 0 {
		t.Fatalf("ready %d", q.Ready())
	}
}

func TestDispatchAndGetSkipExpired(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MessageTTL = 100
	q := NewWithConfig(cfg)
	q.PublishAt(msg("old1"), 1000, -1)
	q.PublishAt(msg("old2"), 1001, -1)
	q.PublishAt(msg("new"), 1099, -1)
	c := &Consumer{Tag: "c", NoAck: true}
	if err := q.AddConsumer(c); err != nil {
		t.Fatal(err)
	}
	ds, dl := q.DispatchAt(nil, 1150)
	if !equal(bodies(ds), []string{"new"}) || !equal(reasons(dl), []string{"old1:expired", "old2:expired"}) {
		t.Fatalf("dispatch %v, dead %v", bodies(ds), reasons(dl))
	}
	if ds[0].Entry.Expires != 1199 {
		t.Fatalf("expires %d", ds[0].Entry.Expires)
	}

	g := NewWithConfig(cfg)
	g.PublishAt(msg("x"), 1000, -1)
	g.PublishAt(msg("y"), 1050, -1)
	e, ok, dl := g.GetAt(true, 1120)
	if !ok || string(e.Msg.Body) != "y" || !equal(reasons(dl), []string{"x:expired"}) {
		t.Fatalf("get %v %v %v", e, ok, reasons(dl))
	}
	if _, ok, _ := g.GetAt(true, 1120); ok {
		t.Fatal("get from empty queue")
	}
}

func TestRequeuedKeepsExpiry(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MessageTTL = 100
	q := NewWithConfig(cfg)
	c := &Consumer{Tag: "c", Prefetch: 1}
	_ = q.AddConsumer(c)
	q.PublishAt(msg("a"), 1000, -1)
	ds, _ := q.DispatchAt(nil, 1000)
	if dl, ok := q.ReturnAt(ds[0].Entry.Seq, 1050); ok {
		t.Fatalf("returned live message dead-lettered: %v", dl)
	}
	if q.NextExpiry() != 1100 {
		t.Fatalf("next expiry %d", q.NextExpiry())
	}
	ds, _ = q.DispatchAt(nil, 1060)
	if dl, ok := q.ReturnAt(ds[0].Entry.Seq, 1100); !ok || dl.Reason != ReasonExpired {
		t.Fatalf("expired return: %v %v", dl, ok)
	}
	if q.Ready() != 0 || q.Unacked() != 0 || c.Unacked() != 0 {
		t.Fatalf("ready %d unacked %d/%d", q.Ready(), q.Unacked(), c.Unacked())
	}
}

func TestSlotRoundTrip(t *testing.T) {
	for _, e := range []Entry{
		{Msg: msg("a"), Seq: 1, Size: 1},
		{Msg: msg("bb"), Seq: 1 << 60, Redelivered: true, Deliveries: 7, Expires: 1_800_000_000_000, Size: 2},
		{Msg: msg("c"), Seq: 3, Deliveries: deliveriesMask, Expires: maxExpires, Spilled: true, Size: 1},
	} {
		if got := toSlot(e).entry(); got != e {
			t.Fatalf("round trip %+v -> %+v", e, got)
		}
	}
	s := toSlot(Entry{Deliveries: deliveriesMask})
	s.delivered()
	if s.entry().Deliveries != deliveriesMask || s.entry().Redelivered {
		t.Fatal("delivery count must saturate")
	}
}

func BenchmarkTTLPublishDeliverAck(b *testing.B) {
	cfg := DefaultConfig()
	cfg.MessageTTL = 60_000
	q := NewWithConfig(cfg)
	c := &Consumer{Tag: "c", Prefetch: 100}
	_ = q.AddConsumer(c)
	m := msg("0123456789abcdef")
	var scratch []Delivery
	b.ReportAllocs()
	for i := int64(1); b.Loop(); i++ {
		q.PublishAt(m, i, -1)
		scratch, _ = q.DispatchAt(scratch[:0], i)
		settleAll(q, scratch)
	}
}

func TestNextTick(t *testing.T) {
	q := NewWithConfig(Config{MessageTTL: 100, MaxLength: -1, MaxLengthBytes: -1, DeliveryLimit: -1})
	if got := q.NextTick(1000); got != 0 {
		t.Fatalf("empty queue: next tick %d, want 0", got)
	}
	q.Apply(&Cmd{Op: OpEnqueue, Now: 1000, TTL: -1, Msg: &Message{}}, nil)
	if got := q.NextTick(1000); got != 1100 {
		t.Fatalf("next tick %d, want 1100", got)
	}
	cfg := q.Config()
	cfg.Expires = 50
	q.Apply(&Cmd{Op: OpSetConfig, Now: 1010, Config: cfg}, nil)
	if got := q.NextTick(1020); got != 1020 {
		t.Fatalf("x-expires with no use recorded: next tick %d, want now", got)
	}
	q.Apply(&Cmd{Op: OpTick, Now: 1020}, nil)
	if got := q.NextTick(1030); got != 1070 {
		t.Fatalf("x-expires after a use at 1020: next tick %d, want 1070", got)
	}
	effs, _ := q.Apply(&Cmd{Op: OpTick, Now: 1070}, nil)
	if len(effs) != 1 || effs[0].Kind != EffExpired || q.NextTick(1080) != 1100 {
		t.Fatalf("tick at 1070: %+v, next %d", effs, q.NextTick(1080))
	}
}
