package broker

import "github.com/warrenmq/warren/amqp"

// SetMethodHook makes every broker of the process call f before it handles
// a channel method (on the connection's reader); nil removes it.
func SetMethodHook(f func(amqp.Method)) {
	if f == nil {
		testMethodHook.Store(nil)
		return
	}
	testMethodHook.Store(&f)
}

// SetWriteHook makes every connection's writer call f, with the client's
// connection_name, before each flush; nil removes it.
func SetWriteHook(f func(connectionName string)) {
	if f == nil {
		testWriteHook.Store(nil)
		return
	}
	testWriteHook.Store(&f)
}

// OutboundHeld reports whether the reader of connection id is held until
// its outbound buffer drains.
func (b *Broker) OutboundHeld(id uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.conns {
		if c.id == id {
			return c.outHeld.Load()
		}
	}
	return false
}

// DelayedRounds is how many times the delayed-message scheduler has read
// the store.
func (b *Broker) DelayedRounds() int64 { return b.delayed.rounds.Load() }

// QueueExpiry reads x-expires as queue name's state machine holds it: its
// Config.Expires and ExpiresAt.
func (b *Broker) QueueExpiry(vhost, name string) (expires, expiresAt int64, ok bool) {
	b.mu.Lock()
	v := b.vhosts[vhost]
	b.mu.Unlock()
	if v == nil {
		return 0, 0, false
	}
	v.mu.RLock()
	qe := v.queues[name]
	v.mu.RUnlock()
	if qe == nil {
		return 0, 0, false
	}
	qe.mu.Lock()
	defer qe.mu.Unlock()
	return qe.q.Config().Expires, qe.q.ExpiresAt(), true
}

// QueueMayHoldData reports whether deleting queue name of vhost would
// clear its messages from the store (mayHoldData).
func (b *Broker) QueueMayHoldData(vhost, name string) (may, ok bool) {
	b.mu.Lock()
	v := b.vhosts[vhost]
	b.mu.Unlock()
	if v == nil {
		return false, false
	}
	v.mu.RLock()
	qe := v.queues[name]
	v.mu.RUnlock()
	if qe == nil {
		return false, false
	}
	return qe.mayHoldData(), true
}

// DelayedLateMax is the latest the scheduler routed a delayed message, in
// ms, since it was last asked.
func (b *Broker) DelayedLateMax() int64 { return b.delayed.lateMax.Swap(0) }

// SetDelayedWindowCount bounds the delayed-message scheduler's window to n
// messages until the test ends. Call before starting a broker.
func SetDelayedWindowCount(t interface{ Cleanup(func()) }, n int) {
	old := delayedWindowCount
	delayedWindowCount = n
	t.Cleanup(func() { delayedWindowCount = old })
}
