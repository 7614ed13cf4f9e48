package queue

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
)

// replayCommands is the length of each random command log of
// TestDeterministicReplay; WARREN_REPLAY_COMMANDS sets a longer one (and
// WARREN_REPLAY_SEEDS more seeds).
func replayCommands() (commands int, seeds uint64) {
	commands, seeds = 8000, 3
	if n, err := strconv.Atoi(os.Getenv("WARREN_REPLAY_COMMANDS")); err == nil && n > 0 {
		commands = n
	}
	if n, err := strconv.Atoi(os.Getenv("WARREN_REPLAY_SEEDS")); err == nil && n > 0 {
		seeds = uint64(n)
	}
	return commands, seeds
}

// workload records a random command log on one queue: publishes (with
// resends of publisher sequences), consumers attaching and detaching,
// checkouts, basic.gets, acks, requeues, rejects, TTL ticks, policy
// changes, purges and forgotten publishers, with the clock moving on.
type workload struct {
	rng     *rand.Rand
	q       *Queue
	now     int64
	nextID  ConsumerID
	pubSeq  map[PublisherID]uint64
	log     []Cmd
	effects [][]byte // encoded effects (and refusal) of each command
	// snap is the queue's snapshot taken before command snapAt.
	snap   []byte
	snapAt int
}

func newWorkload(seed uint64, cfg Config) *workload {
	return &workload{
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		q:      NewWithConfig(cfg),
		now:    1_000_000,
		pubSeq: map[PublisherID]uint64{},
	}
}

// apply applies cmd to q, recording its encoded effects in effs.
func apply(q *Queue, cmd *Cmd) []byte {
	out, err := q.Apply(cmd, nil)
	b := encodeEffects(nil, out)
	if err != nil {
		b = append(b, "error: "+err.Error()...)
	}
	return b
}

func (w *workload) run(n int) {
	w.snapAt = n / 2
	for i := 0; i < n; i++ {
		if i == w.snapAt {
			w.snap = w.q.Snapshot()
		}
		cmd := w.next()
		w.log = append(w.log, cmd)
		w.effects = append(w.effects, apply(w.q, &cmd))
	}
}

// held returns the ids of q's unacknowledged deliveries, in order.
func heldIDs(q *Queue) []uint64 {
	ids := q.held.appendSeqs(nil)
	slices.Sort(ids)
	return ids
}

// next picks the next command.
func (w *workload) next() Cmd {
	r := w.rng
	w.now += int64(r.IntN(25))
	cmd := Cmd{Now: w.now}
	if d := w.q.discards.list; len(d) > 0 && r.IntN(6) == 0 {
		// The dead-letter targets confirmed some discards (in any
		// order), now and then with one settled already.
		cmd.Op = OpSettleDiscards
		cmd.Seq = d[r.IntN(len(d))].Entry.Seq
		if r.IntN(2) == 0 {
			for range 1 + r.IntN(min(len(d), 8)) {
				cmd.Seqs = append(cmd.Seqs, d[r.IntN(len(d))].Entry.Seq)
			}
			if r.IntN(8) == 0 {
				cmd.Seqs = append(cmd.Seqs, 1<<40)
			}
		}
		return cmd
	}
	switch k := r.IntN(100); {
	case k < 35:
		cmd.Op = OpEnqueue
		body := make([]byte, r.IntN(40))
		for i := range body {
			body[i] = byte('a' + r.IntN(26))
		}
		cmd.Msg = &Message{Exchange: "x", RoutingKey: fmt.Sprint("k", r.IntN(3)), Header: []byte{byte(r.IntN(256))},
			Body: body, Persistent: r.IntN(2) == 0, Priority: uint8(r.IntN(6))}
		if h := w.q.cfg.GroupHeader; h != "" && r.IntN(8) != 0 {
			// Seven in eight messages in one of a few groups.
			cmd.Msg.Header = groupHeader(h, fmt.Sprint("g", r.IntN(5)))
		}
		if w.q.cfg.DedupSize > 0 && r.IntN(4) != 0 {
			// Three in four messages keyed, from few keys: duplicates.
			cmd.Msg.Header = groupHeader(DedupHeader, fmt.Sprint("d", r.IntN(40)))
		}
		cmd.TTL = -1
		cmd.ReportEnqueued = len(body)%2 == 0 // as an owner that journals by id asks
		switch r.IntN(10) {
		case 0:
			cmd.TTL = 0
		case 1, 2:
			cmd.TTL = int64(r.IntN(300))
		}
		if p := PublisherID(r.IntN(4)); p != 0 {
			cmd.Publisher = p
			if r.IntN(8) == 0 && w.pubSeq[p] > 0 {
				cmd.PubSeq = 1 + r.Uint64N(w.pubSeq[p]) // a resend
			} else {
				w.pubSeq[p]++
				cmd.PubSeq = w.pubSeq[p]
			}
		}
	case k < 40:
		cmd.Op = OpAttach
		w.nextID++
		cmd.Consumer = w.nextID
		cmd.Prefetch = r.IntN(6)
		cmd.Priority = r.IntN(3) - 1
		cmd.NoAck = r.IntN(6) == 0
		cmd.Exclusive = r.IntN(40) == 0
	case k < 44:
		cmd.Op = OpDetach
		if cs := w.q.consumers; len(cs) > 0 {
			cmd.Consumer = cs[r.IntN(len(cs))].ID
		} else {
			cmd.Consumer = 999_999 // refused
		}
	case k < 62:
		cmd.Op = OpCheckout
	case k < 65:
		cmd.Op = OpGet
		cmd.NoAck = r.IntN(3) == 0
		if r.IntN(2) == 0 {
			cmd.Consumer = 1<<40 | ConsumerID(r.IntN(3)) // a getter's node and process
		}
	case k < 88:
		ids := heldIDs(w.q)
		if len(ids) == 0 {
			cmd.Op = OpTick
			break
		}
		cmd.Seq = ids[r.IntN(len(ids))]
		if r.IntN(10) == 0 {
			cmd.Seq = ids[0] // the oldest, often
		}
		switch r.IntN(6) {
		case 0, 1, 2:
			cmd.Op = OpSettle
		case 3, 4:
			cmd.Op = OpReturn
		default:
			cmd.Op = OpDiscard
		}
		if r.IntN(50) == 0 {
			cmd.Seq = 1 << 40 // unknown: refused
		}
		if r.IntN(6) == 0 {
			// Several ids in one command (an ack with multiple=true),
			// now and then with one that is not held.
			n := 1 + r.IntN(min(len(ids), 6))
			cmd.Seqs = append([]uint64(nil), ids[:n]...)
			if r.IntN(8) == 0 {
				cmd.Seqs = append(cmd.Seqs, 1<<40)
			}
		}
		if r.IntN(5) == 0 {
			// Naming a holder: the right one or another.
			if h, ok := w.q.held.get(ids[0]); ok && h.c != nil && r.IntN(2) == 0 {
				cmd.Consumer = h.c.ID
			} else {
				cmd.Consumer = 1<<40 | 1
			}
		}
	case k < 94:
		cmd.Op = OpTick
		w.now += int64(r.IntN(200))
		cmd.Now = w.now
	case k < 97:
		cmd.Op = OpSetConfig
		c := DefaultConfig()
		if r.IntN(2) == 0 {
			c.MessageTTL = int64(r.IntN(400))
		}
		if r.IntN(3) == 0 {
			c.MaxLength = int64(r.IntN(30))
		}
		if r.IntN(4) == 0 {
			c.MaxLengthBytes = int64(r.IntN(600))
		}
		c.Overflow = Overflow(r.IntN(3))
		c.DeadLetter = r.IntN(2) == 0
		if r.IntN(3) == 0 {
			c.DeliveryLimit = int64(r.IntN(4))
		}
		if r.IntN(5) == 0 {
			c.Expires = int64(1 + r.IntN(2000))
		}
		if w.q.cfg.DeadLetterAtLeastOnce || len(w.q.discards.list) > 0 {
			// An at-least-once queue stays one, mostly: now and then
			// a policy lets its discards go.
			c.DeadLetterAtLeastOnce = r.IntN(20) != 0
			if r.IntN(20) != 0 {
				c.DeadLetter, c.Overflow = true, RejectPublish
			}
		}
		cmd.Config = c
	case k < 98:
		cmd.Op = OpPurge
		if r.IntN(2) == 0 {
			cmd.Max = 1 + r.IntN(5) // a purge in chunks
		}
	case k < 99:
		cmd.Op = OpForget
		cmd.Publisher = PublisherID(1 + r.IntN(3))
		w.pubSeq[cmd.Publisher] = 0
	default:
		cmd.Op = OpTouch
	}
	return cmd
}

// encodeEffects appends effs to b, messages by content (a queue restored
// from a snapshot has its own copies).
func encodeEffects(b []byte, effs []Effect) []byte {
	for _, f := range effs {
		b = append(b, byte(f.Kind), boolByte(f.Held))
		b = binary.AppendUvarint(b, uint64(f.Consumer))
		b = binary.AppendUvarint(b, uint64(f.Publisher))
		b = binary.AppendUvarint(b, f.PubSeq)
		b = append(b, f.Reason...)
		e := &f.Entry
		b = binary.AppendUvarint(b, e.Seq)
		b = binary.AppendUvarint(b, uint64(e.Deliveries))
		b = binary.AppendVarint(b, e.Expires)
		b = binary.AppendVarint(b, int64(e.Size))
		b = append(b, boolByte(e.Redelivered), boolByte(e.Spilled))
		if m := e.Msg; m != nil {
			b = append(b, m.Exchange...)
			b = append(b, m.RoutingKey...)
			b = append(b, m.Header...)
			b = append(b, m.Body...)
			b = append(b, m.Priority, boolByte(m.Persistent))
		}
		b = append(b, '|')
	}
	return b
}

// TestDeterministicReplay records a long random command log on one queue,
// replays it into a fresh queue and, from the middle, into one restored
// from a snapshot taken there: each command must have the same effects
// and the queues must end in the same state.
func TestDeterministicReplay(t *testing.T) {
	prio := DefaultConfig()
	prio.MaxPriority = 4
	sac := DefaultConfig()
	sac.SingleActiveConsumer = true
	groups := DefaultConfig()
	groups.GroupHeader = "JMSXGroupID"
	dedup := DefaultConfig()
	dedup.DedupSize, dedup.DedupTTL = 25, 200
	alo := DefaultConfig()
	alo.DeadLetter, alo.Overflow, alo.DeadLetterAtLeastOnce, alo.MaxLength = true, RejectPublish, true, 60
	configs := map[string]Config{"classic": DefaultConfig(), "priority": prio, "single-active": sac, "groups": groups, "dedup": dedup,
		"at-least-once": alo}
	commands, seeds := replayCommands()
	for _, name := range []string{"classic", "priority", "single-active", "groups", "dedup", "at-least-once"} {
		for seed := uint64(1); seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", name, seed), func(t *testing.T) {
				cfg := configs[name]
				w := newWorkload(seed, cfg)
				w.run(commands)
				checkWorkload(t, w)
				if cfg.DeadLetterAtLeastOnce {
					checkDiscards(t, w)
				}

				fresh := NewWithConfig(cfg)
				for i := range w.log {
					if got := apply(fresh, &w.log[i]); !bytes.Equal(got, w.effects[i]) {
						t.Fatalf("replay: command %d (op %d): effects\n%q\nwant\n%q", i, w.log[i].Op, got, w.effects[i])
					}
				}
				want := w.q.Snapshot()
				if !bytes.Equal(fresh.Snapshot(), want) {
					t.Fatal("replay: state differs")
				}

				var restored Queue
				if err := restored.RestoreSnapshot(w.snap); err != nil {
					t.Fatal(err)
				}
				for i := w.snapAt; i < len(w.log); i++ {
					if got := apply(&restored, &w.log[i]); !bytes.Equal(got, w.effects[i]) {
						t.Fatalf("restored: command %d (op %d): effects\n%q\nwant\n%q", i, w.log[i].Op, got, w.effects[i])
					}
				}
				if !bytes.Equal(restored.Snapshot(), want) {
					t.Fatal("restored: state differs")
				}
			})
		}
	}
}

// checkWorkload makes sure the workload exercised what it is meant to:
// a log that never delivers or dead-letters proves little.
func checkWorkload(t *testing.T, w *workload) {
	t.Helper()
	counts := map[string]int{}
	for _, cmd := range w.log {
		counts[fmt.Sprint("op", cmd.Op)]++
	}
	all := bytes.Join(w.effects, nil)
	for _, want := range []string{ReasonExpired, ReasonRejected, ReasonMaxLen, ReasonDeliveryLimit, "error: "} {
		if n := bytes.Count(all, []byte(want)); n == 0 {
			t.Errorf("workload produced no %q", want)
		}
	}
	var deliveries, confirms, rejects, settles, enqueued int
	for _, effs := range w.effects {
		for _, b := range bytes.Split(effs, []byte{'|'}) {
			if len(b) == 0 {
				continue
			}
			switch EffectKind(b[0]) {
			case EffDeliver:
				deliveries++
			case EffConfirm:
				confirms++
			case EffReject:
				rejects++
			case EffSettled:
				settles++
			case EffEnqueued:
				enqueued++
			}
		}
	}
	if deliveries < 500 || confirms < 500 || rejects == 0 || settles < 200 {
		t.Errorf("deliveries %d confirms %d rejects %d settles %d: workload too tame", deliveries, confirms, rejects, settles)
	}
	if enqueued < 200 {
		t.Errorf("%d messages reported enqueued: workload too tame", enqueued)
	}
}

// checkDiscards makes sure an at-least-once workload kept dead letters
// (Held), settled them, and let some go when a policy changed.
func checkDiscards(t *testing.T, w *workload) {
	t.Helper()
	var held, released, settled int
	for i, effs := range w.effects {
		for _, b := range bytes.Split(effs, []byte{'|'}) {
			if len(b) < 2 {
				continue
			}
			switch {
			case EffectKind(b[0]) == EffDeadLetter && b[1] == 1:
				held++
			case EffectKind(b[0]) == EffDeadLetter && w.log[i].Op == OpSetConfig:
				released++
			case EffectKind(b[0]) == EffSettled && w.log[i].Op == OpSettleDiscards:
				settled++
			}
		}
	}
	if held < 40 || released == 0 || settled < 30 {
		t.Errorf("held %d, released %d, settled %d discards: workload too tame", held, released, settled)
	}
}

// TestDedupResend: a resend of a sequence the publisher already had
// enqueued is confirmed and not enqueued again; after OpForget the
// publisher's sequences start afresh.
func TestDedupResend(t *testing.T) {
	q := New()
	pub := func(seq uint64) []Effect {
		out, err := q.Apply(&Cmd{Op: OpEnqueue, TTL: -1, Msg: msg("m"), Publisher: 7, PubSeq: seq}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, seq := range []uint64{1, 2, 2, 1, 3} {
		out := pub(seq)
		if len(out) != 1 || out[0].Kind != EffConfirm || out[0].PubSeq != seq || out[0].Publisher != 7 {
			t.Fatalf("publish %d: effects %+v", seq, out)
		}
	}
	if q.Ready() != 3 {
		t.Fatalf("ready %d, want 3 (two resends dropped)", q.Ready())
	}
	if _, err := q.Apply(&Cmd{Op: OpForget, Publisher: 7}, nil); err != nil || q.Publishers() != 0 {
		t.Fatalf("forget: %v, %d publishers", err, q.Publishers())
	}
	pub(1)
	if q.Ready() != 4 {
		t.Fatalf("ready %d after the forgotten publisher's seq 1, want 4", q.Ready())
	}
}

// TestSettleByID: unacknowledged deliveries live in the queue and are
// settled, returned and discarded by message id, in any order, each
// giving its consumer's credit back.
func TestSettleByID(t *testing.T) {
	q := New()
	var out []Effect
	do := func(cmd Cmd) {
		var err error
		if out, err = q.Apply(&cmd, out[:0]); err != nil {
			t.Fatalf("op %d: %v", cmd.Op, err)
		}
	}
	do(Cmd{Op: OpAttach, Consumer: 1, Prefetch: 3})
	for _, b := range []string{"a", "b", "c", "d"} {
		do(Cmd{Op: OpEnqueue, TTL: -1, Msg: msg(b)})
	}
	do(Cmd{Op: OpCheckout})
	if len(out) != 3 || q.Unacked() != 3 {
		t.Fatalf("checkout: %d effects, %d unacked", len(out), q.Unacked())
	}
	ids := []uint64{out[0].Entry.Seq, out[1].Entry.Seq, out[2].Entry.Seq}
	do(Cmd{Op: OpSettle, Seq: ids[1]})
	if len(out) != 1 || out[0].Kind != EffSettled || string(out[0].Entry.Msg.Body) != "b" {
		t.Fatalf("settle: %+v", out)
	}
	if _, err := q.Apply(&Cmd{Op: OpSettle, Seq: ids[1]}, nil); err != ErrUnknownMessage {
		t.Fatalf("second settle of one id: %v", err)
	}
	do(Cmd{Op: OpDiscard, Seq: ids[2]})
	if len(out) != 1 || out[0].Kind != EffDeadLetter || out[0].Reason != ReasonRejected {
		t.Fatalf("discard: %+v", out)
	}
	do(Cmd{Op: OpReturn, Seq: ids[0]})
	do(Cmd{Op: OpCheckout})
	if got := len(out); got != 2 || string(out[0].Entry.Msg.Body) != "a" || !out[0].Entry.Redelivered ||
		out[0].Entry.Deliveries != 2 || string(out[1].Entry.Msg.Body) != "d" {
		t.Fatalf("after return: %+v", out)
	}
	if q.Unacked() != 2 || q.consumers[0].Unacked() != 2 {
		t.Fatalf("unacked %d/%d, want 2", q.Unacked(), q.consumers[0].Unacked())
	}
	// A detached consumer's deliveries stay held, and can be settled.
	a := out[0].Entry.Seq
	do(Cmd{Op: OpDetach, Consumer: 1})
	do(Cmd{Op: OpSettle, Seq: a})
	if q.Unacked() != 1 {
		t.Fatalf("unacked %d after detach and settle, want 1", q.Unacked())
	}
}

// TestSnapshotRoundTrip: a snapshot restores to a queue whose snapshot is
// the same bytes; garbage is refused and leaves the queue as it was.
func TestSnapshotRoundTrip(t *testing.T) {
	w := newWorkload(42, DefaultConfig())
	w.run(3000)
	b := w.q.Snapshot()
	var r Queue
	if err := r.RestoreSnapshot(b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.Snapshot(), b) {
		t.Fatal("restored snapshot differs")
	}
	if r.Ready() != w.q.Ready() || r.Unacked() != w.q.Unacked() || r.ReadyBytes() != w.q.ReadyBytes() || r.ConsumerCount() != w.q.ConsumerCount() {
		t.Fatalf("restored counts %d/%d/%d/%d, want %d/%d/%d/%d", r.Ready(), r.Unacked(), r.ReadyBytes(), r.ConsumerCount(),
			w.q.Ready(), w.q.Unacked(), w.q.ReadyBytes(), w.q.ConsumerCount())
	}
	for _, bad := range [][]byte{nil, {9}, b[:len(b)/2], append(slices.Clone(b), 0)} {
		if err := r.RestoreSnapshot(bad); err == nil {
			t.Fatalf("restored %d bad bytes", len(bad))
		}
	}
	if !bytes.Equal(r.Snapshot(), b) {
		t.Fatal("a refused snapshot changed the queue")
	}
}

// TestTickExpiresQueue: with Config.Expires, a tick reports the queue's
// expiry once it has had no consumer and no use for that long.
func TestTickExpiresQueue(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Expires = 100
	q := NewWithConfig(cfg)
	tick := func(now int64) []Effect {
		out, _ := q.Apply(&Cmd{Op: OpTick, Now: now}, nil)
		return out
	}
	q.Apply(&Cmd{Op: OpTouch, Now: 1000}, nil)
	if out := tick(1099); len(out) != 0 {
		t.Fatalf("early: %+v", out)
	}
	q.Apply(&Cmd{Op: OpAttach, Consumer: 1, Now: 1050}, nil)
	if out := tick(5000); len(out) != 0 {
		t.Fatalf("with a consumer: %+v", out)
	}
	q.Apply(&Cmd{Op: OpDetach, Consumer: 1, Now: 5000}, nil)
	if out := tick(5100); len(out) != 1 || out[0].Kind != EffExpired {
		t.Fatalf("due: %+v", out)
	}
	if out := tick(9000); len(out) != 0 {
		t.Fatalf("reported twice: %+v", out)
	}
}

// BenchmarkApplyPublishDeliverAck is BenchmarkPublishDeliverAck through
// Apply: one enqueue, one checkout and one settle command per op.
func BenchmarkApplyPublishDeliverAck(b *testing.B) {
	q := New()
	m := msg("0123456789abcdef")
	var out, settled []Effect
	attach := Cmd{Op: OpAttach, Consumer: 1, Prefetch: 100}
	out, _ = q.Apply(&attach, out)
	enq := Cmd{Op: OpEnqueue, Msg: m, TTL: -1}
	checkout := Cmd{Op: OpCheckout}
	settle := Cmd{Op: OpSettle}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, _ = q.Apply(&enq, out[:0])
		out, _ = q.Apply(&checkout, out[:0])
		for j := range out {
			settle.Seq = out[j].Entry.Seq
			settled, _ = q.Apply(&settle, settled[:0])
		}
	}
}

// TestEnqueueReported: with ReportEnqueued an enqueue reports the id the
// message was kept under, or its refusal, whatever the publisher; a
// message accepted but not kept, or a resend, has no EffEnqueued.
func TestEnqueueReported(t *testing.T) {
	enq := func(q *Queue, cmd Cmd) []Effect {
		cmd.Op, cmd.ReportEnqueued = OpEnqueue, true
		out, err := q.Apply(&cmd, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	q := New()
	for want := uint64(1); want <= 3; want++ {
		m := msg("m")
		out := enq(q, Cmd{Msg: m, TTL: -1})
		if len(out) != 1 || out[0].Kind != EffEnqueued || out[0].Entry.Seq != want || out[0].Entry.Msg != m || out[0].Entry.Size != 1 {
			t.Fatalf("plain enqueue %d: %+v", want, out)
		}
	}
	out := enq(q, Cmd{Msg: msg("p"), TTL: -1, Now: 10, Publisher: 5, PubSeq: 1})
	if len(out) != 2 || out[0].Kind != EffEnqueued || out[0].Entry.Seq != 4 || out[1].Kind != EffConfirm {
		t.Fatalf("with a publisher: %+v", out)
	}
	if out := enq(q, Cmd{Msg: msg("p"), TTL: -1, Now: 10, Publisher: 5, PubSeq: 1}); len(out) != 1 || out[0].Kind != EffConfirm {
		t.Fatalf("a resend: %+v", out)
	}

	cfg := DefaultConfig()
	cfg.MaxLength, cfg.Overflow = 1, RejectPublish
	limited := NewWithConfig(cfg)
	enq(limited, Cmd{Msg: msg("a"), TTL: -1, Now: 10})
	if out := enq(limited, Cmd{Msg: msg("b"), TTL: -1, Now: 10}); len(out) != 1 || out[0].Kind != EffReject || out[0].Publisher != 0 {
		t.Fatalf("refused by the length limit: %+v", out)
	}
	if out := enq(limited, Cmd{Msg: msg("c"), TTL: -1}); len(out) != 1 || out[0].Kind != EffReject {
		t.Fatalf("refused by the length limit without a clock: %+v", out)
	}

	m := msg("gone")
	out = enq(New(), Cmd{Msg: m, TTL: 0, Now: 10})
	if len(out) != 1 || out[0].Kind != EffDeadLetter || out[0].Entry.Msg != m || out[0].Reason != ReasonExpired {
		t.Fatalf("a TTL of 0 with no consumer: %+v", out)
	}
}

// BenchmarkEnqueue compares an enqueue to a plain queue through the typed
// method (what the broker's publish path calls) with the same transition
// through Apply with ReportEnqueued: the command and effect values cost
// more than the transition itself.
func BenchmarkEnqueue(b *testing.B) {
	m := msg("0123456789abcdef")
	b.Run("typed", func(b *testing.B) {
		q := New()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			q.Publish(m)
			if i%4096 == 4095 {
				q.Purge()
			}
		}
	})
	b.Run("apply", func(b *testing.B) {
		q := New()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			cmd := Cmd{Op: OpEnqueue, Msg: m, TTL: -1, ReportEnqueued: true}
			var buf [2]Effect
			if effs, _ := q.Apply(&cmd, buf[:0]); len(effs) != 1 {
				b.Fatal(len(effs))
			}
			if i%4096 == 4095 {
				q.Purge()
			}
		}
	})
}
