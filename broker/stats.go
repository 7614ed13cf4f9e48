package broker

import (
	"crypto/tls"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Message statistics for the management API and metrics. Each queue
// counts what passes through it in plain integers under its own lock
// (queueEntity.mu), which the hot path holds anyway: there is no central
// collector. Channels count deliveries and gets under their own mu (held
// by deliver and get anyway); what only the channel's reader does
// (publishes, acks, empty gets) it counts in atomics nobody else writes,
// one uncontended add per message. Connections count the bytes of each
// read and write call. Readers (snapshot.go, this file) copy the counters
// under the same locks; rates are computed by whoever samples them.

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
	// deliverNoAck and getNoAck count the deliveries and gets (among
	// deliver and get) in automatic acknowledgement mode; getEmpty the
	// basic.get calls that found the queue empty.
	deliverNoAck, getNoAck, getEmpty uint64
}

// countDelivery records one delivery to a consumer. Hold the queue's mu.
func (s *queueStats) countDelivery(noAck, redelivered bool) {
	s.deliver++
	if noAck {
		s.deliverNoAck++
	}
	if redelivered {
		s.redeliver++
	}
}

// countGet records one basic.get delivery. Hold the queue's mu.
func (s *queueStats) countGet(noAck, redelivered bool) {
	s.get++
	if noAck {
		s.getNoAck++
	}
	if redelivered {
		s.redeliver++
	}
}

// chanStats are a channel's cumulative counters, as RabbitMQ's channel
// message_stats.
type chanStats struct {
	// Written by the channel's reader only.
	ack, returnUnroutable, dropUnroutable, getEmpty atomic.Uint64

	// Guarded by the channel's mu.
	deliver, deliverNoAck, get, getNoAck, redeliver uint64

	// lastEx and lastExCounts cache the exchange last published to
	// (reader only).
	lastEx       *exchangeEntity
	lastExCounts *exchangeCounts
	// exMu (a leaf lock) guards exchanges: the counts of each exchange
	// the channel published to. The reader adds entries; snapshots read.
	exMu      sync.Mutex
	exchanges map[*exchangeEntity]*exchangeCounts
}

// exchangeCounts are one channel's publishes through one exchange: in
// counts them all, out those routed to at least one queue. The channel's
// reader alone writes them.
type exchangeCounts struct{ in, out atomic.Uint64 }

// exchange returns the counts of ex. Reader goroutine.
func (s *chanStats) exchange(ex *exchangeEntity) *exchangeCounts {
	if ex == s.lastEx {
		return s.lastExCounts
	}
	s.exMu.Lock()
	xc := s.exchanges[ex]
	if xc == nil {
		if s.exchanges == nil {
			s.exchanges = make(map[*exchangeEntity]*exchangeCounts)
		}
		xc = new(exchangeCounts)
		s.exchanges[ex] = xc
	}
	s.exMu.Unlock()
	s.lastEx, s.lastExCounts = ex, xc
	return xc
}

// countDeliveryLocked records a delivery to a consumer. Hold ch.mu.
func (s *chanStats) countDeliveryLocked(noAck, redelivered bool) {
	if noAck {
		s.deliverNoAck++
	} else {
		s.deliver++
	}
	if redelivered {
		s.redeliver++
	}
}

// countGetLocked records a basic.get delivery. Hold ch.mu.
func (s *chanStats) countGetLocked(noAck, redelivered bool) {
	if noAck {
		s.getNoAck++
	} else {
		s.get++
	}
	if redelivered {
		s.redeliver++
	}
}

// ChannelStats are the cumulative counters of a channel, or their sum
// over channels, as RabbitMQ's channel message_stats name them.
type ChannelStats struct {
	// Publish counts messages published; Confirm publishes confirmed
	// (acked or nacked); ReturnUnroutable and DropUnroutable unroutable
	// publishes returned (mandatory) or dropped.
	Publish, Confirm, ReturnUnroutable, DropUnroutable uint64
	// Deliver and DeliverNoAck count deliveries to consumers in manual and
	// automatic acknowledgement mode; Get, GetNoAck and GetEmpty basic.get
	// calls; Redeliver deliveries marked redelivered; Ack acknowledgements.
	Deliver, DeliverNoAck, Get, GetNoAck, GetEmpty, Redeliver, Ack uint64
}

func (s *ChannelStats) add(o ChannelStats) {
	s.Publish += o.Publish
	s.Confirm += o.Confirm
	s.ReturnUnroutable += o.ReturnUnroutable
	s.DropUnroutable += o.DropUnroutable
	s.Deliver += o.Deliver
	s.DeliverNoAck += o.DeliverNoAck
	s.Get += o.Get
	s.GetNoAck += o.GetNoAck
	s.GetEmpty += o.GetEmpty
	s.Redeliver += o.Redeliver
	s.Ack += o.Ack
}

// Churn counts objects opened and closed since the broker started, as
// RabbitMQ's churn_rates.
type Churn struct {
	ConnectionsOpened, ConnectionsClosed uint64
	ChannelsOpened, ChannelsClosed       uint64
	// QueuesDeclared counts queue.declare calls, QueuesCreated those that
	// created a queue; QueuesDeleted counts deleted queues.
	QueuesDeclared, QueuesCreated, QueuesDeleted uint64
}

// exKey names an exchange across vhosts.
type exKey struct{ vhost, name string }

// octets are a connection's socket counters: bytes and read or write
// calls. The reader writes the recv ones, the writer the send ones.
type octets struct {
	recvOct, recvCnt, sendOct, sendCnt atomic.Uint64
}

// mgmtState is the broker-wide state the management side needs beyond
// the vhosts: the open channels, churn counters, and the counters of
// deleted queues, closed channels and closed connections (so that totals
// never go backwards).
type mgmtState struct {
	// retired holds the summed counters of deleted queues.
	retiredPublish, retiredDeliver, retiredGet, retiredAck, retiredRedeliver atomic.Uint64
	retiredDeliverNoAck, retiredGetNoAck, retiredGetEmpty                    atomic.Uint64

	connsOpened, connsClosed, chansOpened, chansClosed atomic.Uint64
	queuesDeclared, queuesCreated, queuesDeleted       atomic.Uint64

	// mu (a leaf lock) guards the fields below.
	mu    sync.Mutex
	chans map[*channel]struct{}
	// retiredChans sums the counters of closed channels; retiredEx their
	// exchange counts (in, out); retiredOctets the octets of closed
	// connections per vhost (recv, send).
	retiredChans  ChannelStats
	retiredEx     map[exKey][2]uint64
	retiredOctets map[string][2]uint64
}

// retire adds the counters of a deleted queue to the broker totals.
func (m *mgmtState) retire(s queueStats) {
	m.retiredPublish.Add(s.publish)
	m.retiredDeliver.Add(s.deliver)
	m.retiredGet.Add(s.get)
	m.retiredAck.Add(s.ack)
	m.retiredRedeliver.Add(s.redeliver)
	m.retiredDeliverNoAck.Add(s.deliverNoAck)
	m.retiredGetNoAck.Add(s.getNoAck)
	m.retiredGetEmpty.Add(s.getEmpty)
	m.queuesDeleted.Add(1)
}

// addChannel records an open channel; any goroutine.
func (m *mgmtState) addChannel(ch *channel) {
	m.chansOpened.Add(1)
	m.mu.Lock()
	if m.chans == nil {
		m.chans = make(map[*channel]struct{})
	}
	m.chans[ch] = struct{}{}
	m.mu.Unlock()
}

// removeChannel forgets a channel that shut down, keeping its counters
// in the totals. Hold ch.mu.
func (m *mgmtState) removeChannel(ch *channel) {
	st, ex := ch.statsLocked()
	vh := ""
	if ch.c.vhost != nil {
		vh = ch.c.vhost.name
	}
	m.chansClosed.Add(1)
	m.mu.Lock()
	delete(m.chans, ch)
	m.retiredChans.add(st)
	if len(ex) > 0 && m.retiredEx == nil {
		m.retiredEx = make(map[exKey][2]uint64)
	}
	for name, c := range ex {
		k := exKey{vh, name}
		r := m.retiredEx[k]
		m.retiredEx[k] = [2]uint64{r[0] + c[0], r[1] + c[1]}
	}
	m.mu.Unlock()
}

// removeConn keeps the octets of a closed connection in its vhost's
// totals.
func (m *mgmtState) removeConn(c *conn) {
	m.connsClosed.Add(1)
	if c.vhost == nil {
		return
	}
	m.mu.Lock()
	if m.retiredOctets == nil {
		m.retiredOctets = make(map[string][2]uint64)
	}
	r := m.retiredOctets[c.vhost.name]
	m.retiredOctets[c.vhost.name] = [2]uint64{r[0] + c.rd.octets.recvOct.Load(), r[1] + c.rd.octets.sendOct.Load()}
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

// statsSnapshot copies the channel's counters. Do not hold ch.mu.
func (ch *channel) statsSnapshot() ChannelStats {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.countersLocked()
}

// statsLocked copies the channel's counters, and its publishes (in,
// out) by exchange name. Hold ch.mu (the confirm tracker's mu and exMu
// are taken inside).
func (ch *channel) statsLocked() (ChannelStats, map[string][2]uint64) {
	ex := ch.exchangeSnapshot()
	var published uint64
	for _, c := range ex {
		published += c[0]
	}
	return ch.countersWith(published), ex
}

// countersLocked copies the channel's counters, with its publishes
// summed over the exchanges without copying them by name (statsLocked).
// Hold ch.mu.
func (ch *channel) countersLocked() ChannelStats {
	s := &ch.stats
	var published uint64
	s.exMu.Lock()
	for _, c := range s.exchanges {
		published += c.in.Load()
	}
	s.exMu.Unlock()
	return ch.countersWith(published)
}

// countersWith copies the channel's counters, published being its
// publishes. Hold ch.mu.
func (ch *channel) countersWith(published uint64) ChannelStats {
	s := &ch.stats
	out := ChannelStats{
		Ack: s.ack.Load(), ReturnUnroutable: s.returnUnroutable.Load(),
		DropUnroutable: s.dropUnroutable.Load(), GetEmpty: s.getEmpty.Load(), Publish: published,
	}
	out.Deliver, out.DeliverNoAck, out.Get, out.GetNoAck, out.Redeliver = s.deliver, s.deliverNoAck, s.get, s.getNoAck, s.redeliver
	ch.confirms.mu.Lock()
	out.Confirm = ch.confirms.confirmed
	ch.confirms.mu.Unlock()
	return out
}

// unconfirmed is the number of publishes awaiting a confirm.
func (ch *channel) unconfirmed() int {
	ch.confirms.mu.Lock()
	defer ch.confirms.mu.Unlock()
	return len(ch.confirms.pending)
}

// exchangeSnapshot returns the channel's publishes (in, out) by exchange
// name.
func (ch *channel) exchangeSnapshot() map[string][2]uint64 {
	s := &ch.stats
	s.exMu.Lock()
	defer s.exMu.Unlock()
	out := make(map[string][2]uint64, len(s.exchanges))
	for ex, c := range s.exchanges {
		r := out[ex.name]
		out[ex.name] = [2]uint64{r[0] + c.in.Load(), r[1] + c.out.Load()}
	}
	return out
}

// ChannelTotals sums the counters of every channel, closed ones
// included.
func (b *Broker) ChannelTotals() ChannelStats {
	return b.channelTotals("")
}

// channelTotals sums the counters of the channels of a vhost (every
// vhost when empty); closed channels count only in the broker-wide sum.
func (b *Broker) channelTotals(vhost string) ChannelStats {
	var t ChannelStats
	for _, ch := range b.mgmt.channels() {
		if vhost != "" && (ch.c.vhost == nil || ch.c.vhost.name != vhost) {
			continue
		}
		t.add(ch.statsSnapshot())
	}
	if vhost == "" {
		b.mgmt.mu.Lock()
		t.add(b.mgmt.retiredChans)
		b.mgmt.mu.Unlock()
	}
	return t
}

// VHostStats are the counters of one vhost: its channels' message
// counters (open channels only) and its connections' octets (closed ones
// included).
type VHostStats struct {
	Channels         ChannelStats
	RecvOct, SendOct uint64
}

// VHostStats returns the counters of each vhost by name.
func (b *Broker) VHostStats() map[string]VHostStats {
	out := make(map[string]VHostStats)
	for _, ch := range b.mgmt.channels() {
		if ch.c.vhost == nil {
			continue
		}
		s := out[ch.c.vhost.name]
		s.Channels.add(ch.statsSnapshot())
		out[ch.c.vhost.name] = s
	}
	b.mu.Lock()
	for c := range b.conns {
		if c.vhostNm == "" {
			continue
		}
		s := out[c.vhostNm]
		s.RecvOct += c.rd.octets.recvOct.Load()
		s.SendOct += c.rd.octets.sendOct.Load()
		out[c.vhostNm] = s
	}
	b.mu.Unlock()
	b.mgmt.mu.Lock()
	for v, r := range b.mgmt.retiredOctets {
		s := out[v]
		s.RecvOct += r[0]
		s.SendOct += r[1]
		out[v] = s
	}
	b.mgmt.mu.Unlock()
	return out
}

// exchangeCounts sums the publishes through each exchange (in, out) of
// every channel, closed ones included.
func (b *Broker) exchangeTotals() map[exKey][2]uint64 {
	out := make(map[exKey][2]uint64)
	for _, ch := range b.mgmt.channels() {
		if ch.c.vhost == nil {
			continue
		}
		for name, c := range ch.exchangeSnapshot() {
			k := exKey{ch.c.vhost.name, name}
			r := out[k]
			out[k] = [2]uint64{r[0] + c[0], r[1] + c[1]}
		}
	}
	b.mgmt.mu.Lock()
	for k, c := range b.mgmt.retiredEx {
		r := out[k]
		out[k] = [2]uint64{r[0] + c[0], r[1] + c[1]}
	}
	b.mgmt.mu.Unlock()
	return out
}

// Churn returns the broker's churn counters.
func (b *Broker) Churn() Churn {
	m := &b.mgmt
	return Churn{
		ConnectionsOpened: m.connsOpened.Load(), ConnectionsClosed: m.connsClosed.Load(),
		ChannelsOpened: m.chansOpened.Load(), ChannelsClosed: m.chansClosed.Load(),
		QueuesDeclared: m.queuesDeclared.Load(), QueuesCreated: m.queuesCreated.Load(),
		QueuesDeleted: m.queuesDeleted.Load(),
	}
}

// Resources are the node's resource figures, as the memory and disk
// alarms see them.
type Resources struct {
	// MemUsed is the memory the Go runtime holds from the OS, less what it
	// released; MemLimit the memory high watermark (0 = none).
	MemUsed, MemLimit uint64
	// DiskFree is the free space of the data directory's file system;
	// DiskFreeLimit the disk alarm's threshold. Both are 0 without a data
	// directory.
	DiskFree, DiskFreeLimit uint64
	// DataDir is the data directory ("" = none).
	DataDir string
}

// Resources reads the node's memory and disk figures now.
func (b *Broker) Resources() Resources {
	a := &b.alarm
	a.mu.Lock()
	fraction, limit, diskLimit := a.memFraction, a.memBytes, a.diskLimit
	a.mu.Unlock()
	if limit == 0 && fraction > 0 {
		if ram := totalMemory(); ram > 0 {
			limit = uint64(fraction * float64(ram))
		}
	}
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(samples)
	var used uint64
	if samples[0].Value.Kind() == metrics.KindUint64 {
		used = samples[0].Value.Uint64()
	}
	if samples[1].Value.Kind() == metrics.KindUint64 {
		used -= min(used, samples[1].Value.Uint64())
	}
	r := Resources{MemUsed: used, MemLimit: limit, DataDir: b.cfg.DataDir}
	if dir := b.cfg.DataDir; dir != "" {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err == nil {
			r.DiskFree = uint64(st.Bavail) * uint64(st.Bsize)
			r.DiskFreeLimit = diskLimit
		}
	}
	return r
}

// AMQPSTLS is the amqps listener's TLS configuration (nil without one).
// The caller must not change it.
func (b *Broker) AMQPSTLS() *tls.Config { return b.cfg.TLS }

// CommitLatency is how long the store's last group commit took to write
// and sync (0 without a store): the time a journaled message or a log
// entry waits to be durable once its batch is taken.
func (b *Broker) CommitLatency() time.Duration {
	if b.cfg.Store == nil {
		return 0
	}
	return b.cfg.Store.CommitLatency()
}
