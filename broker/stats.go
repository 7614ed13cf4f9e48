package broker

import (
	"sync"
	"sync/atomic"
)

// Message statistics for the management API and metrics. Each queue
// counts what passes through it in plain integers under its own lock
// (queueEntity.mu), which the hot path holds anyway: there is no central
// collector and no atomic operation per message. Readers (snapshot.go)
// copy the counters under the same lock; rates are computed by whoever
// samples them.

// queueStats are the cumulative counters of one queue. Guarded by the
// queue's mu.
type queueStats struct {
	// publish counts messages enqueued.
	publish uint64
	// deliver counts deliveries to consumers, get those by basic.get (and
	// the management API's get), redeliver those of either kind that were
	// marked redelivered.
	deliver, get, redeliver uint64
	// ack counts deliveries settled by the client (ack, or reject and nack
	// without requeue).
	ack uint64
}

// countDelivery records one delivery to a consumer. Hold the queue's mu.
func (s *queueStats) countDelivery(redelivered bool) {
	s.deliver++
	if redelivered {
		s.redeliver++
	}
}

// countGet records one basic.get delivery. Hold the queue's mu.
func (s *queueStats) countGet(redelivered bool) {
	s.get++
	if redelivered {
		s.redeliver++
	}
}

// mgmtState is the broker-wide state the management side needs beyond
// the vhosts: the open channels, and the counters of deleted queues (so
// that broker totals never go backwards).
type mgmtState struct {
	// retired holds the summed counters of deleted queues.
	retiredPublish, retiredDeliver, retiredGet, retiredAck, retiredRedeliver atomic.Uint64

	// mu (a leaf lock) guards chans.
	mu    sync.Mutex
	chans map[*channel]struct{}
}

// retire adds the counters of a deleted queue to the broker totals.
func (m *mgmtState) retire(s queueStats) {
	m.retiredPublish.Add(s.publish)
	m.retiredDeliver.Add(s.deliver)
	m.retiredGet.Add(s.get)
	m.retiredAck.Add(s.ack)
	m.retiredRedeliver.Add(s.redeliver)
}

// addChannel records an open channel; any goroutine.
func (m *mgmtState) addChannel(ch *channel) {
	m.mu.Lock()
	if m.chans == nil {
		m.chans = make(map[*channel]struct{})
	}
	m.chans[ch] = struct{}{}
	m.mu.Unlock()
}

// removeChannel forgets a channel that shut down; any goroutine.
func (m *mgmtState) removeChannel(ch *channel) {
	m.mu.Lock()
	delete(m.chans, ch)
	m.mu.Unlock()
}

// channels returns the open channels.
func (m *mgmtState) channels() []*channel {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*channel, 0, len(m.chans))
	for ch := range m.chans {
		out = append(out, ch)
	}
	return out
}
