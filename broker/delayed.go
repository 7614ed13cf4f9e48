package broker

import (
	"cmp"
	"math"
	"slices"
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
// One scheduler goroutine per broker (runDelayed) routes each message at
// its due time from its window (delayedState.win: every stored message
// due up to winEnd, in memory, refilled from the store ahead of time by
// a goroutine of its own), through the exchange as a publish made then
// (its type, bindings, alternate exchange, the queues' TTLs and limits),
// and deletes it once the queues it went to have their copies safe
// (firing, firer), without waiting. A copy not confirmed keeps the
// record, routed again a second later or after a restart: at-least-once,
// duplicates only then. Nothing per waiting message stays in memory but
// the window's (at most delayedWindowCount messages, delayedWindowBytes,
// typically those due within seconds) and delayedUnsettled awaiting
// confirms.
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

// delayedBatch bounds the window (delayedWindowCount) and, twice over,
// the messages awaiting confirms (delayedUnsettled).
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
	// wake has room for one signal: a message stored ahead of the
	// window's first, or an exchange deleted.
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
	// late counts routed messages by lateness (latenessBounds); lateMax
	// is the latest, in ms.
	late    [len(latenessBounds) + 1]atomic.Int64
	lateMax atomic.Int64
	lateSum atomic.Int64 // ms

	// winMu guards the window (a leaf lock): win holds every stored
	// message whose key is at most winEnd and that the scheduler has not
	// taken yet, in key order (a heap), their bodies winBytes.
	winMu    sync.Mutex
	win      delayedHeap
	winBytes int
	winEnd   store.DelayedKey
	// refill is the store read in progress (nil for none): the messages
	// stored meanwhile after winEnd are noted in it.
	refill *delayedRefill
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
	d.lateSum.Add(max(ms, 0))
	for cur := d.lateMax.Load(); ms > cur && !d.lateMax.CompareAndSwap(cur, ms); cur = d.lateMax.Load() {
	}
}

// DelayedLateness reports how late the scheduler routed delayed messages
// since the broker started: counts[i] messages were routed at most
// bounds[i] ms after their due time (and more than bounds[i-1]); the last
// count is those later than every bound. sumMs is their lateness summed.
func (b *Broker) DelayedLateness() (bounds, counts []int64, sumMs int64) {
	counts = make([]int64, len(b.delayed.late))
	for i := range counts {
		counts[i] = b.delayed.late[i].Load()
	}
	return latenessBounds[:], counts, b.delayed.lateSum.Load()
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

// noteStored puts m, now durable, in the window if its key is within
// it (waking the scheduler when it is the window's first), else in the
// refill in progress, if any: a message the window does not take is read
// from the store by a later refill.
func (d *delayedState) noteStored(m *store.Delayed) {
	d.winMu.Lock()
	first := false
	if !keyLess(d.winEnd, m.Key) {
		d.win.push(m)
		d.winBytes += delayedSize(m)
		first = d.win[0] == m
		d.trimLocked()
	} else if r := d.refill; r != nil && (!r.capped || m.Key.Due <= r.until) {
		r.stored = append(r.stored, m)
		if len(r.stored) > delayedWindowCount && !r.capped {
			// Far ones are left to the next refill.
			r.capped = true
			r.stored = slices.DeleteFunc(r.stored, func(m *store.Delayed) bool { return m.Key.Due > r.until })
		}
	}
	d.winMu.Unlock()
	if first {
		d.signal()
	}
}

// trimLocked keeps the window within delayedWindowCount messages and
// delayedWindowBytes: over either, it keeps its first half, in key order,
// and moves winEnd back to the last kept (the others stay in the store,
// for a later refill).
func (d *delayedState) trimLocked() {
	if len(d.win) <= delayedWindowCount && d.winBytes <= delayedWindowBytes || len(d.win) < 2 {
		return
	}
	slices.SortFunc(d.win, func(a, b *store.Delayed) int { return keyCmp(a.Key, b.Key) }) // a sorted slice is a heap
	keep := len(d.win) / 2
	clear(d.win[keep:])
	d.win = d.win[:keep]
	d.winEnd = d.win[keep-1].Key
	d.winBytes = 0
	for _, m := range d.win {
		d.winBytes += delayedSize(m)
	}
}

// delayedSize is about what m takes in memory.
func delayedSize(m *store.Delayed) int {
	return 160 + len(m.VHost) + len(m.Exchange) + len(m.RoutingKey) + len(m.Header) + len(m.Body)
}

// keyCmp orders delayed keys: by due time, then sequence.
func keyCmp(a, b store.DelayedKey) int {
	switch {
	case a.Due != b.Due:
		return cmp.Compare(a.Due, b.Due)
	case a.Seq != b.Seq:
		return cmp.Compare(a.Seq, b.Seq)
	}
	return cmp.Compare(a.Exchange, b.Exchange)
}

func keyLess(a, b store.DelayedKey) bool { return keyCmp(a, b) < 0 }

// delayedHeap is a min-heap of delayed messages by key.
type delayedHeap []*store.Delayed

func (h *delayedHeap) push(m *store.Delayed) {
	*h = append(*h, m)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !keyLess(s[i].Key, s[p].Key) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *delayedHeap) pop() *store.Delayed {
	s := *h
	m := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = nil
	s = s[:n]
	*h = s
	h.down(0)
	return m
}

func (h delayedHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && keyLess(h[r].Key, h[l].Key) {
			c = r
		}
		if !keyLess(h[c].Key, h[i].Key) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// heapify restores the heap order of h after it was filtered.
func (h delayedHeap) heapify() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
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
			b.delayed.noteStored(m)
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

// delayedWindowCount and delayedWindowBytes bound the window: the
// messages it holds and about the memory they take (a variable for
// tests; set before the broker starts).
var delayedWindowCount = delayedBatch

const delayedWindowBytes = delayedBatchBytes

// delayedHorizon (ms) is how far ahead of now a refill reads: the
// window ends there, or just before the first message stored after it.
const delayedHorizon = 10_000

// delayedRefillLead (ms): a refill starts when the window ends within
// this of now and has room for half its bounds again.
const delayedRefillLead = 2_000

// delayedRouteBatch is how many due messages the scheduler takes from the
// window at a time, routes, and hands to one deletion.
const delayedRouteBatch = 4096

// delayedRetry (ms) is how long a message a target did not confirm waits
// before it is routed again.
const delayedRetry = 1000

// delayedRefill is one store read that extends the window past from.
type delayedRefill struct {
	from            store.DelayedKey // winEnd when it started
	until           int64            // the due times it reads
	room, roomBytes int
	read            []*store.Delayed // in key order
	end             store.DelayedKey // the window's end once merged
	err             error
	// stored are the messages stored after from while it read
	// (noteStored); capped: only those due by until.
	stored []*store.Delayed
	capped bool
}

// needRefillLocked reports whether the window ends within
// delayedRefillLead of now with room for half its bounds.
func (d *delayedState) needRefillLocked(now int64) bool {
	return d.winEnd.Due < now+delayedRefillLead && len(d.win) <= delayedWindowCount/2 && d.winBytes <= delayedWindowBytes/2
}

// startRefill starts a refill of the window, up to now+delayedHorizon.
func (d *delayedState) startRefill(now int64) *delayedRefill {
	d.winMu.Lock()
	defer d.winMu.Unlock()
	r := &delayedRefill{
		from: d.winEnd, until: now + delayedHorizon,
		room: delayedWindowCount - len(d.win), roomBytes: delayedWindowBytes - d.winBytes,
	}
	d.refill = r
	return r
}

// lastKeyOf is the last key of due time due.
func lastKeyOf(due int64) store.DelayedKey {
	return store.DelayedKey{Due: due, Seq: math.MaxUint64, Exchange: math.MaxUint64}
}

// keyBefore is the key just before k (k is not the zero key).
func keyBefore(k store.DelayedKey) store.DelayedKey {
	switch {
	case k.Exchange > 0:
		k.Exchange--
	case k.Seq > 0:
		k.Seq, k.Exchange = k.Seq-1, math.MaxUint64
	default:
		k = lastKeyOf(k.Due - 1)
	}
	return k
}

// load reads the stored messages after r.from due by r.until, within the
// room the window had, and sets where the window ends: after the last
// read if the room was filled, else just before the first stored
// message due after until (at until if none). It does not wait for the
// deletion of what the scheduler routed: those keys are before from.
func (r *delayedRefill) load(st *store.Store) {
	bytes := 0
	full := false
	r.err = st.DueDelayedAfter(&r.from, r.until, r.room, func(m *store.Delayed) error {
		r.read = append(r.read, m)
		bytes += delayedSize(m)
		if len(r.read) >= r.room || bytes >= r.roomBytes {
			full = true
			return store.ErrStopScan
		}
		return nil
	})
	if r.err != nil {
		return
	}
	if full || len(r.read) >= r.room {
		r.end = r.read[len(r.read)-1].Key
		return
	}
	r.end = lastKeyOf(r.until)
	next, ok, err := st.NextDelayedAfter(r.end)
	if r.err = err; ok {
		r.end = keyBefore(next)
	}
}

// endRefill merges a refill into the window. A refill that failed, or
// that started from a window end a trim has since moved back, is
// dropped: the next one reads from the window's end again.
func (d *delayedState) endRefill(r *delayedRefill) {
	d.winMu.Lock()
	defer d.winMu.Unlock()
	d.refill = nil
	if r.err != nil || d.winEnd != r.from {
		return
	}
	end := r.end
	if r.capped && end.Due > r.until {
		end = lastKeyOf(r.until)
	}
	// A message stored while the refill read is in r.read too when its
	// write came before the read's snapshot.
	var seen map[store.DelayedKey]struct{}
	if len(r.stored) > 0 {
		seen = make(map[store.DelayedKey]struct{}, len(r.stored))
		for _, m := range r.stored {
			if !keyLess(end, m.Key) {
				seen[m.Key] = struct{}{}
				d.win.push(m)
				d.winBytes += delayedSize(m)
			}
		}
	}
	for _, m := range r.read {
		if _, dup := seen[m.Key]; !dup && !keyLess(end, m.Key) {
			d.win.push(m)
			d.winBytes += delayedSize(m)
		}
	}
	d.winEnd = end
	d.trimLocked()
}

// takeDue moves to buf the window's messages due by now, at most max, in
// key order.
func (d *delayedState) takeDue(now int64, buf []*store.Delayed, max int) []*store.Delayed {
	d.winMu.Lock()
	for len(d.win) > 0 && d.win[0].Key.Due <= now && len(buf) < max {
		m := d.win.pop()
		d.winBytes -= delayedSize(m)
		buf = append(buf, m)
	}
	d.winMu.Unlock()
	return buf
}

// putBack returns messages taken from the window (their keys are before
// its end: nothing stored later sorts before them).
func (d *delayedState) putBack(ms []*store.Delayed) {
	d.winMu.Lock()
	for _, m := range ms {
		d.win.push(m)
		d.winBytes += delayedSize(m)
	}
	d.winMu.Unlock()
}

// dropGone drops from the window the messages of exchanges that are gone.
func (d *delayedState) dropGone(gone func(id uint64) bool) {
	d.winMu.Lock()
	d.win = slices.DeleteFunc(d.win, func(m *store.Delayed) bool { return gone(m.Key.Exchange) })
	d.win.heapify()
	d.winBytes = 0
	for _, m := range d.win {
		d.winBytes += delayedSize(m)
	}
	d.winMu.Unlock()
}

// wakeAt is when the scheduler has work: the window's first message's
// due time, or, with refill set, the window's end less the refill lead.
func (d *delayedState) wakeAt(refill bool) int64 {
	d.winMu.Lock()
	defer d.winMu.Unlock()
	t := int64(math.MaxInt64)
	if len(d.win) > 0 {
		t = d.win[0].Key.Due
	}
	if refill && len(d.win) <= delayedWindowCount/2 && d.winBytes <= delayedWindowBytes/2 {
		t = min(t, d.winEnd.Due-delayedRefillLead)
	}
	return t
}

// runDelayed is the scheduler: it routes delayed messages when they are
// due until stop is closed. Started and waited for by Serve.
//
// It routes from the window (delayedState.win): every stored message
// due up to winEnd, in memory and in key order. A message stored within
// the window goes straight into it (noteStored); a refill, on its own
// goroutine, reads the store past winEnd when the window nears its end
// (delayedRefillLead), so that what comes due is in memory before its
// time and the due path has no store read. Routed messages' records are
// deleted once confirmed (firing), without the scheduler waiting for the
// deletion; a refill never reads them again, being after them.
func (b *Broker) runDelayed(stop <-chan struct{}) {
	st := b.cfg.Store
	if st == nil {
		return
	}
	d := &b.delayed
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	f := &firing{b: b, st: st, firers: make(map[*vhost]*firer), stop: stop, notify: d.confirmed}
	refilled := make(chan *delayedRefill, 1)
	var (
		refill      *delayedRefill // in progress
		refillAfter int64          // after a failed one
		retry       []*store.Delayed
		retryAt     int64
		batch       []*store.Delayed
	)
	defer func() {
		f.settle(0, 0) // stop is closed: waits delayedStopGrace at most
		if refill != nil {
			<-refilled
		}
	}()
	startRefill := func(now int64) {
		if refill != nil || now < refillAfter {
			return
		}
		d.winMu.Lock()
		need := d.needRefillLocked(now)
		d.winMu.Unlock()
		if !need {
			return
		}
		refill = d.startRefill(now)
		d.rounds.Add(1)
		go func(r *delayedRefill) {
			r.load(st)
			refilled <- r
		}(refill)
	}
	for {
		if d.sweep.Swap(false) {
			if _, err := st.DropDelayed(b.delayedGone); err != nil {
				b.log.Error("deleting delayed messages of deleted exchanges", zap.Error(err))
			}
			if err := st.DropDedup(b.dedupGone()); err != nil {
				b.log.Error("deleting deduplication caches of deleted exchanges", zap.Error(err))
			}
			d.dropGone(b.delayedGone)
		}
		now := d.clock(false)
		if len(retry) > 0 && now >= retryAt {
			d.putBack(retry)
			clear(retry)
			retry = retry[:0]
			clear(f.blocked)
		}
		for {
			batch = d.takeDue(now, batch[:0], delayedRouteBatch)
			if len(batch) == 0 {
				break
			}
			f.fire(batch)
			clear(batch)
			now = d.clock(false)
			startRefill(now)
			select {
			case <-stop:
				return
			default:
			}
		}
		// Delete what is confirmed, without waiting for the rest.
		f.settle(f.routed, delayedInFlight)
		if f.failed != nil {
			b.log.Error("deleting routed delayed messages (routed again after a restart)", zap.Error(f.failed))
			f.failed = nil
		}
		if len(f.kept) > 0 {
			if len(retry) == 0 {
				// Not pushed back by later ones: messages coming due
				// all the time must not hold the first back forever.
				retryAt = now + delayedRetry
			}
			retry = append(retry, f.kept...)
			clear(f.kept)
			f.kept = f.kept[:0]
		}
		startRefill(now)
		next := d.wakeAt(refill == nil && now >= refillAfter)
		if refill == nil && now < refillAfter {
			next = min(next, refillAfter)
		}
		if len(retry) > 0 {
			next = min(next, retryAt)
		}
		// To the start of the due millisecond, in ns: a message due at
		// ms D is due once clock(false) reaches D.
		wait := time.Hour
		if next != math.MaxInt64 {
			wait = min(time.Duration(next*int64(time.Millisecond)-d.nanoClock()), time.Hour)
		}
		timer.Reset(max(wait, 0))
		select {
		case <-stop:
			return
		case <-d.wake:
		case <-f.notify:
		case r := <-refilled:
			refill = nil
			d.endRefill(r)
			if r.err != nil {
				b.log.Error("reading delayed messages", zap.Error(r.err))
				refillAfter = d.clock(false) + delayedRetry
			}
		case <-timer.C:
		}
		timer.Stop()
	}
}

// delayedInFlight is how many batches' deletions the scheduler leaves in
// flight while it routes the next.
const delayedInFlight = 32

// delayedUnsettled bounds the messages the scheduler has routed whose
// targets have not all confirmed them yet (their bodies stay in memory
// until).
const delayedUnsettled = 2 * delayedBatch

// delayedStopGrace is how long the scheduler, stopping, still waits for
// the confirms of what it routed: a record whose copies are not
// confirmed stays, and is routed again after the restart.
const delayedStopGrace = 2 * time.Second

// delayedBatchBytes bounds the bodies of a refill (the window).
const delayedBatchBytes = 8 << 20

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

// firing is the scheduler's routed messages on their way to deletion.
type firing struct {
	b       *Broker
	st      *store.Store
	firers  map[*vhost]*firer
	stop    <-chan struct{}
	notify  <-chan struct{}
	settled []*store.Delayed // confirmed: to delete
	routed  int              // routed, not settled
	// kept are those a target failed to confirm: to route again.
	kept    []*store.Delayed
	deletes []chan error // in flight, oldest first
	failed  error        // of a deletion
	// group is routed messages not enqueued yet (flushGroup).
	group routeGroup
	// blocked is the queues holdBack held messages back for, until
	// those are routed again.
	blocked map[*queueEntity]bool
}

// fire routes batch, due messages in key order, and settles.
func (f *firing) fire(batch []*store.Delayed) {
	b := f.b
	d := &b.delayed
	var (
		id  uint64
		ref delayedRef
		ok  bool
	)
	for i, m := range batch {
		if i == 0 || m.Key.Exchange != id {
			id = m.Key.Exchange
			d.mu.Lock()
			ref, ok = d.byID[id]
			d.mu.Unlock()
		}
		if !ok {
			f.settled = append(f.settled, m)
			continue
		}
		f.fireDelayed(m, ref)
	}
	f.flushGroup() // before the deletion of its records
	f.settle(delayedUnsettled, delayedInFlight)
}

// collect takes the settled routings of every firer. A message not
// confirmed counts as waiting in its exchange again.
func (f *firing) collect() {
	for _, fr := range f.firers { // order does not matter: deletions are by key
		fr.ch.confirms.take(func(_ uint64, ok bool) { // confirmTracker.mu held
			m := fr.waiting[fr.head]
			fr.waiting[fr.head] = nil
			fr.head++
			f.routed--
			if ok {
				f.settled = append(f.settled, m)
			} else {
				f.kept = append(f.kept, m)
				f.b.delayedWaiting(m.Key.Exchange, 1)
			}
		})
		if fr.head == len(fr.waiting) {
			fr.waiting, fr.head = fr.waiting[:0], 0
		}
	}
}

// settle waits until at most limit routed messages are unconfirmed (once
// stop is closed, for delayedStopGrace at most), then deletes the
// settled ones' records, leaving at most keep deletions in flight. A
// deletion waits for the store's sync, so the settled records gather
// while one is in flight and go in the next (at once with keep 0, or
// once they reach a window's bounds): the scheduler routing a message or
// two each millisecond neither starts a deletion per message nor waits
// for syncs it does not need to.
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
	f.reap(len(f.deletes))
	if len(f.settled) > 0 && (len(f.deletes) == 0 || keep == 0 || f.settledFull()) {
		done := make(chan error, 1)
		notify := f.b.delayed.confirmed
		f.st.RemoveDelayedAsync(f.settled, func(err error) {
			done <- err
			select { // the scheduler starts the next deletion
			case notify <- struct{}{}:
			default:
			}
		})
		f.settled = nil
		f.deletes = append(f.deletes, done)
	}
	f.reap(keep)
}

// settledFull reports whether the settled records waiting for their
// deletion (and holding their bodies) reach a window's bounds.
func (f *firing) settledFull() bool {
	if len(f.settled) >= delayedBatch {
		return true
	}
	n := 0
	for _, m := range f.settled {
		if n += delayedSize(m); n >= delayedBatchBytes {
			return true
		}
	}
	return false
}

// reap takes the deletions done, oldest first, waiting for the oldest
// while more than keep are in flight.
func (f *firing) reap(keep int) {
	for len(f.deletes) > 0 {
		var err error
		if len(f.deletes) > keep {
			err = <-f.deletes[0]
		} else {
			select {
			case err = <-f.deletes[0]:
			default:
				return
			}
		}
		if err != nil && f.failed == nil {
			f.failed = err
		}
		f.deletes[0] = nil
		f.deletes = f.deletes[1:]
	}
}

// fireDelayed routes one due message through its exchange, if that
// exchange is still there. A message that goes only to this node's own
// queues joins f's group (flushGroup), to be enqueued with the messages
// before it that go to the same queues under one lock per queue, and its
// record is deleted after that; one copy of which goes to a queue that
// confirms it on its own (on another node, replicated, a stream) is a
// publish with a confirm on its vhost's firer, its record deleted once
// confirmed.
func (f *firing) fireDelayed(m *store.Delayed, r delayedRef) {
	b := f.b
	d := &b.delayed
	if r.ex.plug.delay == nil {
		f.settled = append(f.settled, m)
		return
	}
	r.ex.plug.delay.waiting.Add(-1)
	if b.vhost(r.v.name) != r.v {
		f.settled = append(f.settled, m)
		return
	}
	fr := f.firers[r.v]
	if fr == nil {
		var err error
		if fr, err = b.newFirer(r.v); err != nil {
			f.settled = append(f.settled, m)
			return
		}
		f.firers[r.v] = fr
	}
	ch := fr.ch
	mode, prio := peekModePriority(m.Header)
	msg := &queue.Message{
		Exchange: m.Exchange, RoutingKey: m.RoutingKey, Header: m.Header, Body: m.Body,
		Persistent: mode == 2, Priority: prio,
	}
	targets, msg, ok := ch.resolve(r.ex, msg)
	if !ok {
		f.settled = append(f.settled, m)
		return
	}
	defer func() {
		clear(targets)
		ch.targets = targets[:0]
	}()
	if f.holdBack(targets) {
		// A target cannot take it yet: routed again with the retries,
		// in due order with the others held back for the same queues.
		r.ex.plug.delay.waiting.Add(1)
		f.kept = append(f.kept, m)
		return
	}
	f.settled = append(f.settled, m)
	if len(targets) == 0 {
		b.log.Debug("delayed message unroutable at its due time, dropped", zap.String("exchange", r.ex.name))
		return
	}
	// Copies in this node's queues need no confirm: their journal writes
	// are queued to the store's writer before the record's deletion,
	// which is therefore never durable before them. Those on another
	// node, in a replicated group or in a stream (written by its own
	// goroutine) are waited for.
	confirm := false
	for _, qe := range targets {
		if qe.home != nil || qe.repl != nil || qe.stream != nil {
			confirm = true
			break
		}
	}
	g := &f.group
	if !confirm {
		if len(g.msgs) > 0 && (g.ch != ch || len(g.msgs) >= delayedGroup || !sameQueues(g.targets, targets)) {
			f.flushGroup()
		}
		if len(g.msgs) == 0 {
			g.ch = ch
			g.targets = append(g.targets[:0], targets...)
		}
		g.msgs = append(g.msgs, msg)
		g.dues = append(g.dues, m.Key.Due)
		return
	}
	f.settled = f.settled[:len(f.settled)-1]
	f.flushGroup() // in order
	ch.confirmSeq++
	seq := ch.confirmSeq
	ch.confirms.add(seq, 1)
	routed, _ := ch.deliverTo(targets, msg, seq)
	ch.confirms.done(seq, nil)
	d.noteLate(d.clock(false) - m.Key.Due)
	if !routed {
		b.log.Debug("delayed message unroutable at its due time, dropped", zap.String("exchange", r.ex.name))
	}
	fr.waiting = append(fr.waiting, m)
	f.routed++
}

// holdBack reports whether a message going to targets must wait for the
// retries: one of them is a replicated queue whose data group this node
// cannot propose to yet (a node starting: its groups start after its
// scheduler), or was held back since the last retry. Routing it now would
// have it nacked and routed again after the messages due after it.
func (f *firing) holdBack(targets []*queueEntity) bool {
	for _, qe := range targets {
		if qe.repl == nil {
			continue
		}
		if f.blocked[qe] {
			return true
		}
		if _, away := f.b.replAway(qe.repl.group); away {
			continue
		}
		if f.b.proposer(qe.repl.group) == nil {
			if f.blocked == nil {
				f.blocked = make(map[*queueEntity]bool)
			}
			f.blocked[qe] = true
			return true
		}
	}
	return false
}

// delayedGroup bounds the messages enqueued under one queue lock.
const delayedGroup = 1024

// routeGroup is due messages going to the same queues of this node,
// enqueued together (flushGroup).
type routeGroup struct {
	ch      *channel
	targets []*queueEntity
	msgs    []*queue.Message
	dues    []int64
}

// flushGroup enqueues f's group: queue by queue, each message in due
// order, under one lock acquisition per queue, dispatching to consumers
// after the last (as a batch of publishes does, batch.go).
func (f *firing) flushGroup() {
	g := &f.group
	if len(g.msgs) == 0 {
		return
	}
	ch := g.ch
	var (
		now      int64
		throttle chan struct{}
		dead     []*queueEntity
		routed   bool
	)
	for _, qe := range g.targets {
		qe.mu.Lock()
		if !qe.deleted {
			routed = true
			for i, msg := range g.msgs {
				if ch.enqueueLocked(qe, msg, messageTTL(msg.Header), &now, 0, i == len(g.msgs)-1, &throttle) &&
					(len(dead) == 0 || dead[len(dead)-1] != qe) {
					dead = append(dead, qe)
				}
			}
		}
		qe.mu.Unlock()
	}
	for _, qe := range dead {
		qe.flushDead()
	}
	d := &f.b.delayed
	t := d.clock(false)
	for _, due := range g.dues {
		d.noteLate(t - due)
	}
	if !routed {
		f.b.log.Debug("delayed messages unroutable at their due time (their queues deleted), dropped", zap.Int("messages", len(g.msgs)))
	}
	clear(g.msgs)
	g.msgs = g.msgs[:0]
	g.dues = g.dues[:0]
	clear(g.targets)
	g.targets = g.targets[:0]
	g.ch = nil
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
