package queue

import (
	"math/rand"
	"slices"
	"testing"
)

// TestPersistentCounts drives queues (plain, length-limited, TTL,
// priority) through random publishes, gets, deliveries, acks, requeues,
// page-outs (spilling the transient messages, as a durable queue's owner
// does) and page-ins, expiries, drops and purges, and checks after every
// step that Persistent counts exactly the persistent messages Has still
// finds, and their bytes.
func TestPersistentCounts(t *testing.T) {
	configs := map[string]Config{
		"plain":    DefaultConfig(),
		"maxlen":   func() Config { c := DefaultConfig(); c.MaxLength = 12; c.DeadLetter = true; return c }(),
		"ttl":      func() Config { c := DefaultConfig(); c.MessageTTL = 30; return c }(),
		"priority": func() Config { c := DefaultConfig(); c.MaxPriority = 3; return c }(),
	}
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(7))
			q := NewWithConfig(cfg)
			q.SetCountPersistent(true)
			c := &Consumer{Tag: "c", Prefetch: 6}
			if err := q.AddConsumer(c); err != nil {
				t.Fatal(err)
			}
			msgs := map[uint64]*Message{}
			var unacked []uint64
			now := int64(1000)
			check := func(step int, op string) {
				t.Helper()
				wantN, wantB := 0, int64(0)
				for seq, m := range msgs {
					if q.Has(seq) && m.Persistent {
						wantN++
						wantB += int64(m.Size())
					}
				}
				if n, b := q.Persistent(); n != wantN || b != wantB || q.pReady < 0 || q.pAcked < 0 {
					t.Fatalf("step %d (%s): persistent %d/%d bytes, want %d/%d (ready %d, unacked %d)", step, op, n, b, wantN, wantB, q.pReady, q.pAcked)
				}
			}
			held := func(ds []Delivery) {
				for _, d := range ds {
					if d.Consumer != nil && !d.Consumer.NoAck {
						unacked = append(unacked, d.Entry.Seq)
					}
				}
			}
			for step := range 4000 {
				var op string
				switch r := rng.Intn(100); {
				case r < 40:
					op = "publish"
					m := &Message{Body: make([]byte, 1+rng.Intn(20)), Persistent: rng.Intn(3) > 0, Priority: uint8(rng.Intn(4))}
					ttl := int64(-1)
					if rng.Intn(5) == 0 {
						ttl = int64(rng.Intn(20))
					}
					if seq, ok, _ := q.PublishAt(m, now, ttl); ok {
						msgs[seq] = m
					}
				case r < 50:
					op = "get"
					noAck := rng.Intn(2) == 0
					if e, ok := q.Get(noAck); ok && !noAck {
						unacked = append(unacked, e.Seq)
					}
				case r < 60:
					op = "dispatch"
					ds, _ := q.DispatchAt(nil, now)
					held(ds)
				case r < 72 && len(unacked) > 0:
					op = "settle"
					i := rng.Intn(len(unacked))
					q.Settle(unacked[i])
					unacked = slices.Delete(unacked, i, i+1)
				case r < 78 && len(unacked) > 0:
					op = "return"
					i := rng.Intn(len(unacked))
					q.Return(unacked[i])
					unacked = slices.Delete(unacked, i, i+1)
				case r < 84:
					op = "page out"
					q.PageOutEach(2, 1<<20, func(seq uint64, m *Message) (bool, bool, bool) {
						return true, !m.Persistent, rng.Intn(4) > 0
					})
				case r < 90:
					op = "page in"
					for _, ref := range q.Wanted(nil, 8, 4, 1<<20) {
						q.PageIn(ref.Seq, msgs[ref.Seq])
					}
				case r < 94:
					op = "expire"
					now += int64(rng.Intn(15))
					q.Expire(now)
				case r < 97:
					op = "drop"
					for seq := range msgs {
						if q.DropReady(seq) {
							break
						}
					}
				case r < 98:
					op = "purge"
					q.Purge()
				default:
					op = "tick"
					now++
				}
				check(step, op)
			}
		})
	}
}

// TestPersistentCountsOff: a queue not told to count (a transient queue)
// reports none.
func TestPersistentCountsOff(t *testing.T) {
	q := New()
	q.Publish(&Message{Body: []byte("abc"), Persistent: true})
	if n, b := q.Persistent(); n != 0 || b != 0 {
		t.Fatalf("persistent %d/%d without SetCountPersistent", n, b)
	}
	q = New()
	q.SetCountPersistent(true)
	q.Publish(&Message{Body: []byte("abc"), Persistent: true})
	q.Publish(&Message{Body: []byte("de")})
	if n, b := q.Persistent(); n != 1 || b != 3 {
		t.Fatalf("persistent %d/%d, want 1/3", n, b)
	}
}

// TestPersistentCountsOddPaging: a persistent message the owner spills
// when it pages it out stops counting until it is paged in (a transient
// one it does not spill counts meanwhile), and the counts never go wrong
// when such messages leave.
func TestPersistentCountsOddPaging(t *testing.T) {
	q := New()
	q.SetCountPersistent(true)
	p := &Message{Body: []byte("pppp"), Persistent: true}
	tr := &Message{Body: []byte("tt")}
	q.Publish(p)
	q.Publish(tr)
	want := func(n int, b int64) {
		t.Helper()
		if gn, gb := q.Persistent(); gn != n || gb != b {
			t.Fatalf("persistent %d/%d, want %d/%d", gn, gb, n, b)
		}
	}
	want(1, 4)
	q.PageOut(1, 0, true)  // persistent, spilled
	q.PageOut(2, 0, false) // transient, not spilled
	want(1, 2)
	q.PageIn(1, p)
	want(2, 6)
	q.PageIn(2, tr)
	want(1, 4)
	q.PageOut(1, 0, true)
	q.PageOut(2, 0, false)
	q.SetDeliverPaged(true)
	e1, _ := q.Get(false)
	e2, _ := q.Get(false)
	want(1, 2)
	q.Settle(e1.Seq)
	want(1, 2)
	q.Settle(e2.Seq)
	want(0, 0)
}
