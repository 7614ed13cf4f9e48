package queue

import "testing"

func TestLengthLimits(t *testing.T) {
	tests := []struct {
		name      string
		maxLen    int64
		maxBytes  int64
		overflow  Overflow
		dlx       bool
		publish   []string
		wantReady []string // ready bodies in order, after the publishes
		wantDL    []string
		wantNacks int
	}{
		{name: "drop-head by count", maxLen: 2, maxBytes: -1, publish: []string{"a", "b", "c", "d"},
			wantReady: []string{"c", "d"}, wantDL: []string{"a:maxlen", "b:maxlen"}},
		{name: "drop-head by bytes", maxLen: -1, maxBytes: 4, publish: []string{"aa", "bb", "cc"},
			wantReady: []string{"bb", "cc"}, wantDL: []string{"aa:maxlen"}},
		{name: "drop-head message bigger than limit", maxLen: -1, maxBytes: 1, publish: []string{"abc"},
			wantDL: []string{"abc:maxlen"}},
		{name: "reject-publish", maxLen: 2, maxBytes: -1, overflow: RejectPublish, dlx: true, publish: []string{"a", "b", "c"},
			wantReady: []string{"a", "b"}, wantNacks: 1},
		{name: "reject-publish by bytes", maxLen: -1, maxBytes: 3, overflow: RejectPublish, publish: []string{"ab", "cd", "e"},
			wantReady: []string{"ab", "e"}, wantNacks: 1},
		{name: "reject-publish-dlx", maxLen: 1, maxBytes: -1, overflow: RejectPublishDLX, dlx: true, publish: []string{"a", "b"},
			wantReady: []string{"a"}, wantDL: []string{"b:maxlen"}, wantNacks: 1},
		{name: "reject-publish-dlx without dlx", maxLen: 1, maxBytes: -1, overflow: RejectPublishDLX, publish: []string{"a", "b"},
			wantReady: []string{"a"}, wantNacks: 1},
		{name: "max-length 0 rejects all", maxLen: 0, maxBytes: -1, overflow: RejectPublish, publish: []string{"a"},
			wantNacks: 1},
		{name: "no limits", maxLen: -1, maxBytes: -1, publish: []string{"a", "b"}, wantReady: []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxLength, cfg.MaxLengthBytes, cfg.Overflow, cfg.DeadLetter = tt.maxLen, tt.maxBytes, tt.overflow, tt.dlx
			q := NewWithConfig(cfg)
			var dls []DeadLetter
			nacks := 0
			for _, b := range tt.publish {
				seq, ok, d := q.PublishAt(msg(b), 1000, -1)
				if !ok {
					nacks++
					if seq != 0 {
						t.Fatalf("refused publish got seq %d", seq)
					}
				}
				dls = append(dls, d...)
			}
			if got := reasons(dls); !equal(got, tt.wantDL) {
				t.Fatalf("dead letters %v, want %v", got, tt.wantDL)
			}
			if nacks != tt.wantNacks {
				t.Fatalf("nacks %d, want %d", nacks, tt.wantNacks)
			}
			var ready []string
			q.PurgeEach(func(e Entry) { ready = append(ready, string(e.Msg.Body)) })
			if !equal(ready, tt.wantReady) {
				t.Fatalf("ready %v, want %v", ready, tt.wantReady)
			}
			if q.ReadyBytes() != 0 {
				t.Fatalf("ready bytes %d after purge", q.ReadyBytes())
			}
		})
	}
}

func TestLimitCountsReadyOnly(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxLength = 1
	cfg.Overflow = RejectPublish
	q := NewWithConfig(cfg)
	c := &Consumer{Tag: "c", Prefetch: 1}
	_ = q.AddConsumer(c)
	q.PublishAt(msg("a"), 1, -1)
	q.DispatchAt(nil, 1) // a is unacked now
	if _, ok, _ := q.PublishAt(msg("b"), 1, -1); !ok {
		t.Fatal("unacked message counted against max-length")
	}
	if _, ok, _ := q.PublishAt(msg("c"), 1, -1); ok {
		t.Fatal("over max-length accepted")
	}
}

func TestDropHeadSparesImmediateDelivery(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxLength = 0
	q := NewWithConfig(cfg)
	c := &Consumer{Tag: "c", Prefetch: 1}
	_ = q.AddConsumer(c)
	if _, _, dl := q.PublishAt(msg("a"), 1, -1); len(dl) != 0 {
		t.Fatalf("deliverable message dropped: %v", reasons(dl))
	}
	if ds, _ := q.DispatchAt(nil, 1); !equal(bodies(ds), []string{"a"}) {
		t.Fatalf("dispatch %v", bodies(ds))
	}
	if _, _, dl := q.PublishAt(msg("b"), 1, -1); !equal(reasons(dl), []string{"b:maxlen"}) {
		t.Fatalf("b with a full consumer: %v", reasons(dl))
	}
}

func TestSetConfig(t *testing.T) {
	q := New()
	for _, b := range []string{"a", "b", "c", "d"} {
		q.PublishAt(msg(b), 1000, -1)
	}
	cfg := DefaultConfig()
	cfg.MaxLength = 1
	cfg.Overflow = RejectPublish
	if dl := q.SetConfig(cfg, 2000); len(dl) != 0 || q.Ready() != 4 {
		t.Fatalf("reject-publish must not drop: %v, ready %d", reasons(dl), q.Ready())
	}
	cfg.Overflow = DropHead
	cfg.MaxLength = 2
	cfg.MaxPriority = 9 // ignored: fixed at creation
	if dl := q.SetConfig(cfg, 2000); !equal(reasons(dl), []string{"a:maxlen", "b:maxlen"}) {
		t.Fatalf("lowered limit dropped %v", reasons(dl))
	}
	if q.Config().MaxPriority != 0 {
		t.Fatal("max priority changed")
	}
	cfg.MessageTTL = 10 // new messages only
	q.SetConfig(cfg, 3000)
	if q.NextExpiry() != 0 {
		t.Fatalf("old messages got a TTL: %d", q.NextExpiry())
	}
	cfg.MaxLength = -1
	q.SetConfig(cfg, 3000)
	q.PublishAt(msg("e"), 3000, -1)
	if dl := q.Expire(3010); len(dl) != 0 {
		t.Fatalf("expired behind a live head: %v", reasons(dl))
	}
	q.Get(true)
	q.Get(true)
	if dl := q.Expire(3010); !equal(reasons(dl), []string{"e:expired"}) {
		t.Fatalf("expire %v", reasons(dl))
	}
}

func TestDeliveryLimitAndDiscard(t *testing.T) {
	tests := []struct {
		name    string
		limit   int64
		returns int // how many times the message is delivered and returned
		want    string
	}{
		{name: "no limit", limit: -1, returns: 5, want: ""},
		{name: "limit 2, third return", limit: 2, returns: 3, want: ReasonDeliveryLimit},
		{name: "limit 2, two returns", limit: 2, returns: 2, want: ""},
		{name: "limit 0, first return", limit: 0, returns: 1, want: ReasonDeliveryLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.DeliveryLimit = tt.limit
			q := NewWithConfig(cfg)
			c := &Consumer{Tag: "c", Prefetch: 1}
			_ = q.AddConsumer(c)
			q.Publish(msg("a"))
			var got string
			for i := 0; i < tt.returns; i++ {
				ds := q.Dispatch(nil)
				if len(ds) != 1 {
					t.Fatalf("round %d: %d deliveries", i, len(ds))
				}
				if dl, ok := q.ReturnAt(ds[0].Entry.Seq, 1); ok {
					if i != tt.returns-1 {
						t.Fatalf("dead-lettered early, round %d", i)
					}
					got = dl.Reason
				}
			}
			if got != tt.want {
				t.Fatalf("reason %q, want %q", got, tt.want)
			}
			if q.Unacked() != 0 || c.Unacked() != 0 {
				t.Fatalf("unacked %d/%d", q.Unacked(), c.Unacked())
			}
		})
	}

	q := New()
	c := &Consumer{Tag: "c"}
	_ = q.AddConsumer(c)
	q.Publish(msg("x"))
	ds := q.Dispatch(nil)
	dl, _ := q.Discard(ds[0].Entry.Seq)
	if dl.Reason != ReasonRejected || string(dl.Entry.Msg.Body) != "x" || q.Unacked() != 0 || c.Unacked() != 0 {
		t.Fatalf("discard %+v unacked %d", dl, q.Unacked())
	}
}
