package broker

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
	"github.com/warrenmq/warren/store"
)

// Delayed messages: the delayed-message exchange plugin's interface (type
// x-delayed-message, routing as its x-delayed-type says) and LavinMQ's
// (x-delayed-exchange=true on any exchange). A message published to such
// an exchange with a positive integer x-delay header (milliseconds) is not
// routed at once: it goes to the store under a key ordered by due time
// (store/delayed.go) and its publisher confirm comes once it is durable.
// One scheduler goroutine per broker (runDelayed) sleeps until the
// earliest due time, reads what is due from the store in key order, a
// batch at a time, routes it through the exchange as a publish made then
// (its type, bindings, alternate exchange, the queues' TTLs and limits),
// and deletes it once the queues it went to have their copies safe
// (fireDue, firer: without waiting, reading on after it; what is due
// within delayedLookahead is read before the scheduler sleeps). A copy
// not confirmed keeps the record, routed again a second later or after a
// restart: at-least-once, duplicates only then. Nothing per message stays
// in memory: bodies are on disk, a batch of at most delayedBatch messages
// (and delayedUnsettled awaiting confirms) is in RAM while it is routed.
//
// mandatory cannot be answered at publish time: Warren accepts the message
// (no basic.return); at its due time a message no queue takes goes to the
// exchange's alternate exchange if it has one, else it is dropped.
// Deleting the exchange drops its delayed messages (and a new exchange of
// the same name does not get them): each delayed exchange has an id (its
// definition id, or one from a counter with the top bit set for a
// transient exchange) that is part of the key, and the scheduler sweeps
// the keys of exchanges that are gone. Without a store, delayed exchanges
// route at once.

// delayedBatch is how many due messages the scheduler routes per store
// read.
const delayedBatch = 16384

// delayedExchange is the delayed part of an exchange.
type delayedExchange struct {
	// waiting counts its delayed messages (management API).
	waiting atomic.Int64
}

// delayedRef finds a delayed exchange by its id.
type delayedRef struct {
	v  *vhost
	ex *exchangeEntity
}

// delayedState is the broker's scheduler state.
type delayedState struct {
	// mu guards byID and transient (a leaf lock).
	mu        sync.Mutex
	byID      map[uint64]delayedRef
	transient uint64
	// seq orders messages of one due time.
	seq atomic.Uint64
	// next is the earliest due time the scheduler sleeps towards
	// (math.MaxInt64 when none); a store completion with an earlier one
	// lowers it and wakes the scheduler.
	next atomic.Int64
	// wake has room for one signal.
	wake chan struct{}
	// sweep asks the scheduler to delete the messages of deleted exchanges.
	sweep atomic.Bool
	// confirmed is signalled when a target confirms a copy the
	// scheduler routed (firer).
	confirmed chan struct{}
	// rounds counts the scheduler's store reads (tests: it must sleep
	// between due times, not poll).
	rounds atomic.Int64
	// epoch anchors clock (set once).
	epochOnce sync.Once
	epoch     time.Time
	// late counts routed messages by lateness (latenessBounds).
	late [len(latenessBounds) + 1]atomic.Int64
}

// latenessBounds are the upper bounds, in ms, of the buckets in which the
// scheduler counts how late it routed delayed messages; the last bucket
// has none.
var latenessBounds = [...]int64{0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000}

// noteLate counts a message routed ms after its due time.
func (d *delayedState) noteLate(ms int64) {
	i := 0
	for i < len(latenessBounds) && ms > latenessBounds[i] {
		i++
	}
	d.late[i].Add(1)
}

// DelayedLateness reports how late the scheduler routed delayed messages
// since the broker started: counts[i] messages were routed at most
// bounds[i] ms after their due time (and more than bounds[i-1]); the last
// count is those later than every bound.
func (b *Broker) DelayedLateness() (bounds, counts []int64) {
	counts = make([]int64, len(b.delayed.late))
	for i := range counts {
		counts[i] = b.delayed.late[i].Load()
	}
	return latenessBounds[:], counts
}

// clock is the scheduler's time in unix ms (rounded up with up): the wall
// clock when the broker first asked, plus the monotonic time since. Due
// times are set and compared on it, so that a message is never routed
// sooner after its publish than its delay, even where the wall clock runs
// fast or steps; a restart sets it to the wall clock again.
func (d *delayedState) clock(up bool) int64 {
	ns := d.nanoClock()
	if up {
		ns += int64(time.Millisecond) - 1
	}
	return ns / int64(time.Millisecond)
}

// nanoClock is the scheduler's time in unix ns (clock).
func (d *delayedState) nanoClock() int64 {
	d.epochOnce.Do(func() { d.epoch = time.Now() })
	return d.epoch.UnixNano() + int64(time.Since(d.epoch))
}

// transientDelayedID marks the ids given to transient exchanges.
const transientDelayedID = 1 << 63

func (d *delayedState) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// noteDue tells the scheduler of a message due at due, now durable.
func (d *delayedState) noteDue(due int64) {
	if d.lower(due) {
		d.signal()
	}
}

// lower sets next to due if that is earlier, and reports whether it did.
func (d *delayedState) lower(due int64) bool {
	for {
		cur := d.next.Load()
		if due >= cur {
			return false
		}
		if d.next.CompareAndSwap(cur, due) {
			return true
		}
	}
}

// attachDelayed gives a new delayed exchange its id. Call before ex is
// visible, after its storeID is set.
func (b *Broker) attachDelayed(v *vhost, ex *exchangeEntity) {
	if ex.plug == nil || (ex.plug.delay == nil && ex.plug.dedup == nil) {
		return
	}
	d := &b.delayed
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byID == nil {
		d.byID = make(map[uint64]delayedRef)
	}
	id := ex.storeID
	if !ex.durable || id == 0 {
		d.transient++
		id = transientDelayedID | d.transient
	}
	ex.plug.id = id
	if ex.plug.dedup != nil {
		ex.plug.dedup.id = id
	}
	d.byID[id] = delayedRef{v: v, ex: ex}
}

// detachDelayed forgets a deleted delayed exchange; the scheduler deletes
// its messages.
func (b *Broker) detachDelayed(ex *exchangeEntity) {
	if ex.plug == nil || (ex.plug.delay == nil && ex.plug.dedup == nil) {
		return
	}
	d := &b.delayed
	d.mu.Lock()
	if r, ok := d.byID[ex.plug.id]; ok && r.ex == ex {
		delete(d.byID, ex.plug.id)
	}
	d.mu.Unlock()
	if ex.plug.delay != nil {
		ex.plug.delay.waiting.Store(0)
	}
	d.sweep.Store(true)
	if d.wake != nil {
		d.signal()
	}
}

// delayOf reads the x-delay header: a positive integer, else false.
func delayOf(header []byte) (int64, bool) {
	if len(header) < 14 || header[12]&byte(amqp.FlagHeaders>>8) == 0 {
		return 0, false
	}
	v, ok := headersOf(header)[headerDelay]
	if !ok {
		return 0, false
	}
	d, ok := argInt(v)
	if !ok {
		if u, isU := v.(uint64); isU {
			d, ok = int64(min(u, math.MaxInt64)), true
		}
	}
	return d, ok && d > 0
}

// delayPublish stores msg, published to delayed exchange ex, for later
// when it has a positive x-delay, and reports whether it did. A non-zero
// confirmSeq is held until the message is durable.
func (ch *channel) delayPublish(ex *exchangeEntity, msg *queue.Message, confirmSeq uint64) bool {
	b := ch.c.b
	st := b.cfg.Store
	if st == nil {
		return false
	}
	delay, ok := delayOf(msg.Header)
	if !ok {
		return false
	}
	de := ex.plug.delay
	now := b.delayed.clock(true)
	due := now + delay
	if delay > math.MaxInt64-now {
		due = math.MaxInt64 >> 1
	}
	m := &store.Delayed{
		Key:   store.DelayedKey{Due: due, Seq: b.delayed.seq.Add(1), Exchange: ex.plug.id},
		VHost: ch.c.vhost.name, Exchange: ex.name, RoutingKey: msg.RoutingKey,
		Header: msg.Header, Body: msg.Body,
	}
	if confirmSeq != 0 {
		ch.confirms.hold(confirmSeq)
	}
	st.AppendDelayed(m, func(err error) {
		if err == nil {
			de.waiting.Add(1)
			b.delayed.noteDue(due)
		}
		if confirmSeq != 0 {
			ch.journaled(confirmSeq, err)
		}
	})
	return true
}

// recoverDelayed counts the stored delayed messages of each delayed
// exchange, deletes those of exchanges that are gone, and sets the
// sequence past the highest stored. Call after the definitions are
// installed, before serving.
func (b *Broker) recoverDelayed() error {
	st := b.cfg.Store
	if st == nil {
		return nil
	}
	d := &b.delayed
	var maxSeq uint64
	orphans := 0
	err := st.DelayedKeys(func(k store.DelayedKey) {
		maxSeq = max(maxSeq, k.Seq)
		d.mu.Lock()
		r, ok := d.byID[k.Exchange]
		d.mu.Unlock()
		if ok && r.ex.plug.delay != nil {
			r.ex.plug.delay.waiting.Add(1)
		} else if !ok {
			orphans++
		}
	})
	if err != nil {
		return err
	}
	d.seq.Store(maxSeq)
	d.mu.Lock()
	var caches []*dedupCache
	for _, r := range d.byID {
		if r.ex.plug.dedup != nil {
			caches = append(caches, r.ex.plug.dedup)
		}
	}
	d.mu.Unlock()
	for _, c := range caches {
		if err := b.loadDedup(c); err != nil {
			return err
		}
	}
	if err := st.DropDedup(b.dedupGone()); err != nil {
		return err
	}
	if orphans > 0 {
		n, err := st.DropDelayed(b.delayedGone)
		if err != nil {
			return err
		}
		b.log.Info("dropped delayed messages of exchanges that are gone", zap.Int("messages", n))
	}
	return nil
}

// delayedGone reports whether no delayed exchange has id.
func (b *Broker) delayedGone(id uint64) bool {
	d := &b.delayed
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.byID[id]
	return !ok
}

// runDelayed is the scheduler: it routes delayed messages when they are
// due until stop is closed. Started and waited for by Serve.
func (b *Broker) runDelayed(stop <-chan struct{}) {
	st := b.cfg.Store
	if st == nil {
		return
	}
	d := &b.delayed
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	firers := make(map[*vhost]*firer)
	// ahead is what the last round read ahead (fireDue); a signal (a
	// message stored with an earlier due time) or a sweep drops it.
	var ahead []*store.Delayed
	for {
		if d.sweep.Swap(false) {
			ahead = nil
			if _, err := st.DropDelayed(b.delayedGone); err != nil {
				b.log.Error("deleting delayed messages of deleted exchanges", zap.Error(err))
			}
			if err := st.DropDedup(b.dedupGone()); err != nil {
				b.log.Error("deleting deduplication caches of deleted exchanges", zap.Error(err))
			}
		}
		// Completions from here on lower next and wake us.
		d.next.Store(math.MaxInt64)
		d.rounds.Add(1)
		next, read, err := b.fireDue(st, firers, stop, ahead)
		ahead = read
		if err != nil {
			b.log.Error("routing delayed messages", zap.Error(err))
			next, ahead = d.clock(false)+1000, nil
		}
		// Without a signal: the scheduler itself sleeps towards it, to
		// the due millisecond; with nothing read ahead, to a little before
		// it, to read ahead then.
		if ahead == nil && next != math.MaxInt64 && next > d.clock(false)+delayedLookahead/2 {
			next -= delayedLookahead / 2
		}
		d.lower(next)
		// To the start of the due millisecond, in ns: a message due at
		// ms D is due once clock(false) reaches D.
		wait := time.Hour
		if next := d.next.Load(); next != math.MaxInt64 {
			wait = time.Duration(next*int64(time.Millisecond) - d.nanoClock())
		}
		timer.Reset(max(wait, 0))
		select {
		case <-stop:
			return
		case <-d.wake:
			ahead = nil
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-timer.C:
		}
	}
}

// delayedInFlight is how many batches' deletions fireDue leaves in flight
// while it reads and routes the next.
const delayedInFlight = 32

// delayedUnsettled bounds the messages fireDue has routed whose targets
// have not all confirmed them yet (their bodies stay in memory until).
const delayedUnsettled = 2 * delayedBatch

// delayedStopGrace is how long the scheduler, stopping, still waits for
// the confirms of what it routed: a record whose copies are not
// confirmed stays, and is routed again after the restart.
const delayedStopGrace = 2 * time.Second

// delayedLookahead: before it sleeps, the scheduler reads the messages due
// within this many ms (one batch at most), so that at their time it
// routes them from memory: a store read waits for the group commit in
// progress, which under load is most of a burst's lateness.
const delayedLookahead = 200

// delayedBatchBytes bounds the bodies of a batch (and of the look-ahead).
const delayedBatchBytes = 8 << 20

// errDelayedUnconfirmed is returned by fireDue when a target did not
// confirm a routed copy: its record stays, to be routed again.
var errDelayedUnconfirmed = errors.New("broker: a delayed message's target did not confirm it")

// firer is the scheduler's channel on one vhost. A message it routes to
// a queue on another node, a replicated one or a stream is a publish with
// a confirm on the channel's own tracker (confirm.go): the confirm comes
// once every queue the message went to has it safe (a durable queue's
// journal write, a remote node's or a replicated group's confirm), and
// only then is the message's record deleted. A message routed only to
// this node's own (classic) queues needs no confirm: their journal
// writes are queued to the store's one writer before the deletion.
type firer struct {
	ch *channel
	// waiting is the messages routed and not settled yet, in the order
	// of their confirm sequence numbers, from head.
	waiting []*store.Delayed
	head    int
}

// newFirer makes the scheduler's channel on v, confirming to d.
func (b *Broker) newFirer(v *vhost) (*firer, error) {
	ch, err := b.mgmtChannel(v.name, "")
	if err != nil {
		return nil, err
	}
	ch.confirm = true
	ch.confirms.notify = b.delayed.confirmed
	ch.confirms.settles = errRejectPublish
	return &firer{ch: ch}, nil
}

// firing is one fireDue's routed messages on their way to deletion.
type firing struct {
	b       *Broker
	st      *store.Store
	firers  map[*vhost]*firer
	stop    <-chan struct{}
	notify  <-chan struct{}
	settled []*store.Delayed // confirmed: to delete
	routed  int              // routed, not settled
	// unconfirmed is set when a target failed to confirm a copy.
	unconfirmed bool
	deletes     []chan error // in flight, oldest first
	failed      error        // of a deletion
}

// collect takes the settled routings of every firer. A message not
// confirmed counts as waiting in its exchange again.
func (f *firing) collect() {
	var kept []*store.Delayed
	for _, fr := range f.firers { // order does not matter: deletions are by key
		fr.ch.confirms.take(func(_ uint64, ok bool) { // confirmTracker.mu held
			m := fr.waiting[fr.head]
			fr.waiting[fr.head] = nil
			fr.head++
			f.routed--
			if ok {
				f.settled = append(f.settled, m)
			} else {
				kept = append(kept, m)
			}
		})
		if fr.head == len(fr.waiting) {
			fr.waiting, fr.head = fr.waiting[:0], 0
		}
	}
	for _, m := range kept {
		f.unconfirmed = true
		f.b.delayedWaiting(m.Key.Exchange, 1)
	}
}

// settle waits until at most limit routed messages are unconfirmed (once
// stop is closed, for delayedStopGrace at most), then deletes the
// settled ones' records, leaving at most keep deletions in flight.
func (f *firing) settle(limit, keep int) {
	var grace <-chan time.Time
	stop := f.stop
	for f.collect(); f.routed > limit; f.collect() {
		select {
		case <-f.notify:
		case <-stop:
			t := time.NewTimer(delayedStopGrace)
			defer t.Stop()
			grace, stop = t.C, nil
		case <-grace:
			limit = f.routed
		}
	}
	if len(f.settled) > 0 {
		done := make(chan error, 1)
		f.st.RemoveDelayedAsync(f.settled, func(err error) { done <- err })
		f.settled = nil
		f.deletes = append(f.deletes, done)
	}
	for len(f.deletes) > keep {
		if err := <-f.deletes[0]; err != nil && f.failed == nil {
			f.failed = err
		}
		f.deletes = f.deletes[1:]
	}
}

// err is what the firing failed with: a deletion's error, else
// errDelayedUnconfirmed when a copy was not confirmed.
func (f *firing) err() error {
	if f.failed == nil && f.unconfirmed {
		return errDelayedUnconfirmed
	}
	return f.failed
}

// fireDue routes every delayed message due by now, in due order: first
// those of ahead (read ahead by the last call, in key order), then what
// the store has. It returns the due time of the next message
// (math.MaxInt64 for none) and the messages due within delayedLookahead,
// read ahead. A message's record is deleted once its routed copies are
// confirmed (firer), without waiting: the next read starts after the
// last key routed; fireDue waits for every confirm and deletion before it
// reads from the first key again (for the look-ahead), so that a message
// is never read twice. A message a target did not confirm stays, and
// fireDue returns errDelayedUnconfirmed once it has routed the rest.
func (b *Broker) fireDue(st *store.Store, firers map[*vhost]*firer, stop <-chan struct{}, ahead []*store.Delayed) (int64, []*store.Delayed, error) {
	d := &b.delayed
	f := &firing{b: b, st: st, firers: firers, stop: stop, notify: d.confirmed}
	var after *store.DelayedKey
	defer f.settle(0, 0)
	fire := func(batch []*store.Delayed) {
		for _, m := range batch {
			if fr := b.fireDelayed(m, firers); fr != nil {
				fr.waiting = append(fr.waiting, m)
				f.routed++
			} else {
				f.settled = append(f.settled, m)
			}
		}
		last := batch[len(batch)-1].Key
		after = &last
		f.settle(delayedUnsettled, delayedInFlight)
	}
	now := d.clock(false)
	i := 0
	for i < len(ahead) && ahead[i].Key.Due <= now {
		i++
	}
	if i > 0 {
		fire(ahead[:i])
	}
	if i < len(ahead) || (i > 0 && len(ahead) < delayedBatch) {
		// The rest of the look-ahead is not due yet, or it held all there
		// was within its window: nothing else is due before it.
		f.settle(0, 0)
		if err := f.err(); err != nil {
			return 0, nil, err
		}
		if i < len(ahead) {
			return ahead[i].Key.Due, ahead[i:], nil
		}
		return b.nextDue(st, nil)
	}
	for {
		select {
		case <-stop:
			return math.MaxInt64, nil, nil
		default:
		}
		batch, err := readDelayed(st, after, d.clock(false))
		if err != nil {
			return 0, nil, err
		}
		if len(batch) == 0 {
			break
		}
		fire(batch)
		if f.failed != nil {
			return 0, nil, f.failed
		}
		if len(batch) < delayedBatch {
			break
		}
	}
	f.settle(0, 0)
	if err := f.err(); err != nil {
		return 0, nil, err
	}
	ahead, err := readDelayed(st, nil, d.clock(false)+delayedLookahead)
	if err != nil {
		return 0, nil, err
	}
	if len(ahead) == 0 {
		return b.nextDue(st, nil)
	}
	return ahead[0].Key.Due, ahead, nil
}

// nextDue is the due time of the first stored delayed message.
func (b *Broker) nextDue(st *store.Store, failed error) (int64, []*store.Delayed, error) {
	if failed != nil {
		return 0, nil, failed
	}
	k, ok, err := st.NextDelayed()
	if err != nil || !ok {
		return math.MaxInt64, nil, err
	}
	return k.Due, nil, nil
}

// readDelayed reads a batch of the delayed messages due by until, after
// key after (from the first when nil): at most delayedBatch of them and
// about delayedBatchBytes of bodies.
func readDelayed(st *store.Store, after *store.DelayedKey, until int64) ([]*store.Delayed, error) {
	var batch []*store.Delayed
	bytes := 0
	err := st.DueDelayedAfter(after, until, delayedBatch, func(m *store.Delayed) error {
		batch = append(batch, m)
		if bytes += len(m.Body) + len(m.Header); bytes >= delayedBatchBytes {
			return store.ErrStopScan
		}
		return nil
	})
	return batch, err
}

// fireDelayed routes one due message through its exchange, if that
// exchange is still there. When a copy goes to a queue that confirms it
// on its own (on another node, replicated, a stream) it is a publish
// with a confirm on its vhost's firer, which it returns; nil means
// nothing to wait for.
func (b *Broker) fireDelayed(m *store.Delayed, firers map[*vhost]*firer) *firer {
	d := &b.delayed
	d.mu.Lock()
	r, ok := d.byID[m.Key.Exchange]
	d.mu.Unlock()
	if !ok || r.ex.plug.delay == nil {
		return nil
	}
	r.ex.plug.delay.waiting.Add(-1)
	if b.vhost(r.v.name) != r.v {
		return nil
	}
	fr := firers[r.v]
	if fr == nil {
		var err error
		if fr, err = b.newFirer(r.v); err != nil {
			return nil
		}
		firers[r.v] = fr
	}
	ch := fr.ch
	mode, prio := peekModePriority(m.Header)
	msg := &queue.Message{
		Exchange: m.Exchange, RoutingKey: m.RoutingKey, Header: m.Header, Body: m.Body,
		Persistent: mode == 2, Priority: prio,
	}
	targets, msg, ok := ch.resolve(r.ex, msg)
	if !ok {
		return nil
	}
	// Copies in this node's queues need no confirm: their journal writes
	// are queued to the store's writer before the record's deletion,
	// which is therefore never durable before them. Those on another
	// node, in a replicated group or in a stream (written by its own
	// goroutine) are waited for.
	seq := uint64(0)
	for _, qe := range targets {
		if qe.home != nil || qe.repl != nil || qe.stream != nil {
			ch.confirmSeq++
			seq = ch.confirmSeq
			ch.confirms.add(seq, 1)
			defer ch.confirms.done(seq, nil)
			break
		}
	}
	routed, _ := ch.deliverTo(targets, msg, seq)
	d.noteLate(d.clock(false) - m.Key.Due)
	clear(targets)
	ch.targets = targets[:0]
	if !routed {
		b.log.Debug("delayed message unroutable at its due time, dropped", zap.String("exchange", r.ex.name))
	}
	if seq == 0 {
		return nil
	}
	return fr
}

// delayedWaiting adds n to the count of messages waiting in the delayed
// exchange with id, if it is still there.
func (b *Broker) delayedWaiting(id uint64, n int64) {
	d := &b.delayed
	d.mu.Lock()
	r, ok := d.byID[id]
	d.mu.Unlock()
	if ok && r.ex.plug.delay != nil {
		r.ex.plug.delay.waiting.Add(n)
	}
}

// DelayedCount is the number of messages waiting in a delayed exchange
// (0 for another exchange).
func (e *exchangeEntity) delayedCount() int64 {
	if e.plug == nil || e.plug.delay == nil {
		return 0
	}
	return e.plug.delay.waiting.Load()
}
