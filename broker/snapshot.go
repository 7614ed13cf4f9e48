package broker

import (
	"fmt"
	"maps"
	"net"
	"sort"
	"strconv"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/exchange"
	"github.com/warrenmq/warren/queue"
)

// Read-only snapshots for the management API and metrics. Each one is
// taken under the locks doc.go lists, in that order, and copies out: the
// caller owns the result. The cost is O(1) per object (one short lock of
// each queue), never per message.

// MessageStats are cumulative message counters.
type MessageStats struct {
	// Publish counts messages enqueued; Deliver deliveries to consumers;
	// Get deliveries by basic.get; Redeliver deliveries of either kind
	// marked redelivered; Ack deliveries settled by clients.
	Publish, Deliver, Get, Redeliver, Ack uint64
	// DeliverNoAck and GetNoAck count the deliveries and gets (among
	// Deliver and Get) in automatic acknowledgement mode; GetEmpty the
	// basic.get calls that found nothing.
	DeliverNoAck, GetNoAck, GetEmpty uint64
}

func (s *MessageStats) add(o MessageStats) {
	s.Publish += o.Publish
	s.Deliver += o.Deliver
	s.Get += o.Get
	s.Redeliver += o.Redeliver
	s.Ack += o.Ack
	s.DeliverNoAck += o.DeliverNoAck
	s.GetNoAck += o.GetNoAck
	s.GetEmpty += o.GetEmpty
}

func (s queueStats) export() MessageStats {
	return MessageStats{
		Publish: s.publish, Deliver: s.deliver, Get: s.get, Redeliver: s.redeliver, Ack: s.ack,
		DeliverNoAck: s.deliverNoAck, GetNoAck: s.getNoAck, GetEmpty: s.getEmpty,
	}
}

// QueueInfo describes a queue.
type QueueInfo struct {
	VHost, Name                    string
	Durable, AutoDelete, Exclusive bool
	Arguments                      amqp.Table
	// Ready and Unacked count messages; ReadyBytes is the body size of
	// the ready ones.
	Ready, Unacked int
	ReadyBytes     int64
	// UnackedBytes is the body size of the unacknowledged deliveries.
	UnackedBytes int64
	// Persistent and PersistentBytes count a durable classic queue's
	// persistent messages (delivery mode 2), ready and unacknowledged,
	// and their body bytes; 0 for other queues.
	Persistent      int
	PersistentBytes int64
	// HeadTimestamp is the timestamp property of the next message to go
	// (HasHeadTimestamp false when it has none, the queue is empty or its
	// head is paged out): RabbitMQ's head_message_timestamp.
	HeadTimestamp    int64
	HasHeadTimestamp bool
	// PagedOut and PagedOutBytes count the ready messages whose bodies
	// are paged out of RAM to the store, and those bodies' bytes.
	PagedOut      int
	PagedOutBytes int64
	// DeadLettered and DeadLetteredBytes count a replicated quorum
	// queue's dead letters kept until their targets confirm them
	// (x-dead-letter-strategy at-least-once): RabbitMQ's messages_dlx.
	DeadLettered      int
	DeadLetteredBytes int64
	Consumers         int
	// Owner names the connection of an exclusive queue.
	Owner string
	Stats MessageStats
	// Stream is set for a stream queue (stream_info.go).
	Stream *StreamInfo
	// Type is the queue type: classic, quorum or stream.
	Type string
	// Node is the queue's home node in a cluster ("" on a single node);
	// for a quorum queue replicated in a data group, its group's leader.
	Node string
	// Leader, Members and Online are set for a replicated quorum queue:
	// its group's leader as this node knows it ("" when none), members,
	// and the members that are up as this node sees them. Unavailable is
	// set when fewer than a majority of the members are up.
	Leader      string
	Members     []string
	Online      []string
	Unavailable bool
	// Dedup is set for a deduplicating queue: DedupCached is the number of
	// keys its cache holds and DedupDropped the duplicates it did not
	// enqueue.
	Dedup        bool
	DedupCached  int
	DedupDropped int64
	// GroupHeader is the header of a queue with message groups, Groups
	// the number of groups it has ready or unacknowledged messages of.
	GroupHeader string
	Groups      int
	// ActiveConsumer is the tag of a single-active-consumer queue's
	// active consumer ("" when it has none, or is not such a queue).
	ActiveConsumer string
}

// ExchangeInfo describes an exchange.
type ExchangeInfo struct {
	VHost, Name, Type             string
	Durable, AutoDelete, Internal bool
	Arguments                     amqp.Table
	// PublishIn counts the messages published to the exchange,
	// PublishOut those it routed to at least one queue.
	PublishIn, PublishOut uint64
	// Delayed is the number of messages waiting in a delayed exchange.
	Delayed int64
	// DedupCached is the number of entries in a deduplicating exchange's
	// cache (-1 for an exchange that does not deduplicate).
	DedupCached int
}

// BindingInfo describes a binding. The default exchange's implicit
// binding to each queue is listed too, as RabbitMQ lists it.
type BindingInfo struct {
	VHost, Source, Destination string
	// DestinationIsExchange tells an exchange-to-exchange binding.
	DestinationIsExchange bool
	RoutingKey            string
	Arguments             amqp.Table
}

// ConnectionInfo describes a client connection.
type ConnectionInfo struct {
	// Name is RabbitMQ's "peer:port -> local:port".
	Name string
	ID   uint64
	// Open is false while the handshake runs; the fields below VHost are
	// zero until then.
	Open             bool
	VHost, User      string
	PeerHost, Host   string
	PeerPort, Port   int
	ConnectedAt      time.Time
	ClientProperties amqp.Table
	FrameMax         uint32
	ChannelMax       uint16
	Heartbeat        time.Duration
	Channels         int
	SendPending      int64
	// RecvOct and SendOct count the bytes read and written, RecvCnt and
	// SendCnt the read and write calls.
	RecvOct, RecvCnt, SendOct, SendCnt uint64
}

// ChannelInfo describes a channel.
type ChannelInfo struct {
	Connection   string
	ConnectionID uint64
	Number       uint16
	VHost, User  string
	Consumers    int
	Unacked      int
	// GlobalPrefetch is the channel-wide prefetch (0 = none); Prefetch
	// the one given to new consumers.
	GlobalPrefetch int
	Prefetch       int
	// Confirm and Transactional tell the channel's mode.
	Confirm, Transactional bool
	// Unconfirmed counts publishes awaiting a confirm.
	Unconfirmed int
	Stats       ChannelStats
	// Published counts the channel's publishes by exchange name: all of
	// them, and those routed to a queue.
	Published map[string][2]uint64
}

// ConsumerInfo describes a consumer.
type ConsumerInfo struct {
	VHost, Queue, Tag string
	Connection        string
	Channel           uint16
	AckRequired       bool
	Exclusive         bool
	Prefetch          int
	Priority          int
	Unacked           int
	// For stream consumers: x-stream-consumer-name, the next offset to
	// deliver, and whether it is the active member of its group.
	IsStream     bool
	StreamName   string
	StreamOffset uint64
	Active       bool
}

// Overview counts the broker's objects and sums its message counters.
type Overview struct {
	Connections, Channels, Queues, Exchanges, Consumers, VHosts int
	Ready, Unacked                                              int
	ReadyBytes                                                  int64
	// Totals include the counters of deleted queues: they never decrease.
	Totals MessageStats
}

// connName is RabbitMQ's name for a connection.
// connName is RabbitMQ's name of a connection, "peer:port -> local:port"
// (conn.name, set when it is accepted).
func connName(c *conn) string {
	if c.name == "" && c.nc != nil {
		return nameConn(c.nc)
	}
	return c.name
}

func nameConn(nc net.Conn) string {
	return nc.RemoteAddr().String() + " -> " + nc.LocalAddr().String()
}

func splitAddr(a net.Addr) (string, int) {
	if a == nil {
		return "", 0
	}
	h, p, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String(), 0
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

// vhostList returns the named vhost, or every vhost by name when name is
// empty. An unknown name is ErrNotFound.
func (b *Broker) vhostList(name string) ([]*vhost, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if name != "" {
		v := b.vhosts[name]
		if v == nil {
			return nil, fmt.Errorf("vhost %q: %w", name, ErrNotFound)
		}
		return []*vhost{v}, nil
	}
	out := make([]*vhost, 0, len(b.vhosts))
	for _, v := range b.vhosts {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// HasVHost reports whether the vhost exists.
func (b *Broker) HasVHost(name string) bool { return b.vhost(name) != nil }

// queueEntities returns the queues of v sorted by name.
func (v *vhost) queueEntities() []*queueEntity {
	v.mu.RLock()
	qs := make([]*queueEntity, 0, len(v.queues))
	for _, qe := range v.queues {
		qs = append(qs, qe)
	}
	v.mu.RUnlock()
	sort.Slice(qs, func(i, j int) bool { return qs[i].name < qs[j].name })
	return qs
}

// info copies the queue's state; ok is false once it was deleted.
func (qe *queueEntity) info() (QueueInfo, bool) {
	qi := QueueInfo{
		VHost: qe.vhost.name, Name: qe.name, Durable: qe.durable, AutoDelete: qe.autoDelete,
		Exclusive: qe.exclusive, Arguments: maps.Clone(qe.args), Node: qe.homeNode,
	}
	if qe.owner != nil {
		qi.Owner = connName(qe.owner)
	}
	if qe.repl != nil {
		return qe.replInfo(qi)
	}
	qe.mu.Lock()
	defer qe.mu.Unlock()
	if qe.deleted {
		return qi, false
	}
	qi.Ready, qi.Unacked, qi.ReadyBytes = qe.q.Ready(), qe.q.Unacked(), qe.q.ReadyBytes()
	qi.UnackedBytes = qe.q.UnackedBytes()
	qi.Persistent, qi.PersistentBytes = qe.q.Persistent()
	qi.PagedOut, qi.PagedOutBytes = qe.q.Paged()
	if m := qe.q.HeadMessage(); m != nil && qe.stream == nil {
		ts, ok := amqp.PeekTimestamp(m.Header)
		qi.HeadTimestamp, qi.HasHeadTimestamp = int64(ts), ok
	}
	qi.Type = qe.typeName()
	qi.Consumers = qe.q.ConsumerCount()
	qi.Stats = qe.stats.export()
	if qe.stream != nil {
		qe.streamInfoLocked(&qi)
	}
	if d := qe.q.Dedup(); qe.dedup != nil && d != nil {
		qi.Dedup, qi.DedupCached, qi.DedupDropped = true, d.Len(), d.Dropped
	}
	qi.GroupHeader, qi.Groups = qe.q.Config().GroupHeader, qe.q.Groups()
	if c := qe.q.ActiveConsumer(); c != nil {
		qi.ActiveConsumer = c.Tag
	}
	return qi, true
}

// Queues lists the queues of a vhost, or of every vhost when vhostName
// is empty, by vhost then name.
func (b *Broker) Queues(vhostName string) ([]QueueInfo, error) {
	vs, err := b.vhostList(vhostName)
	if err != nil {
		return nil, err
	}
	var out []QueueInfo
	for _, v := range vs {
		for _, qe := range v.queueEntities() {
			if qi, ok := qe.info(); ok {
				out = append(out, qi)
			}
		}
	}
	return out, nil
}

// Queue describes one queue.
func (b *Broker) Queue(vhostName, name string) (QueueInfo, error) {
	v := b.vhost(vhostName)
	if v == nil {
		return QueueInfo{}, fmt.Errorf("vhost %q: %w", vhostName, ErrNotFound)
	}
	qe := v.queue(name)
	if qe == nil && b.syncDefinitions() {
		qe = v.queue(name)
	}
	if qe != nil {
		if qi, ok := qe.info(); ok {
			return qi, nil
		}
	}
	return QueueInfo{}, fmt.Errorf("queue %q in vhost %q: %w", name, vhostName, ErrNotFound)
}

func exchangeInfo(v *vhost, ex *exchangeEntity, counts map[exKey][2]uint64) ExchangeInfo {
	c := counts[exKey{v.name, ex.name}]
	xi := ExchangeInfo{
		VHost: v.name, Name: ex.name, Type: ex.typeName(), Durable: ex.durable,
		AutoDelete: ex.autoDelete, Internal: ex.internal, Arguments: maps.Clone(ex.args),
		PublishIn: c[0], PublishOut: c[1], Delayed: ex.delayedCount(), DedupCached: -1,
	}
	if ex.plug != nil && ex.plug.dedup != nil {
		xi.DedupCached = ex.plug.dedup.len()
	}
	return xi
}

// Exchanges lists the exchanges of a vhost (every vhost when empty), by
// vhost then name; the default exchange is named "".
func (b *Broker) Exchanges(vhostName string) ([]ExchangeInfo, error) {
	vs, err := b.vhostList(vhostName)
	if err != nil {
		return nil, err
	}
	var out []ExchangeInfo
	counts := b.exchangeTotals()
	for _, v := range vs {
		v.mu.RLock()
		start := len(out)
		for _, ex := range v.exchanges {
			out = append(out, exchangeInfo(v, ex, counts))
		}
		v.mu.RUnlock()
		part := out[start:]
		sort.Slice(part, func(i, j int) bool { return part[i].Name < part[j].Name })
	}
	return out, nil
}

// Exchange describes one exchange.
func (b *Broker) Exchange(vhostName, name string) (ExchangeInfo, error) {
	v := b.vhost(vhostName)
	if v == nil {
		return ExchangeInfo{}, fmt.Errorf("vhost %q: %w", vhostName, ErrNotFound)
	}
	if v.exchange(name) == nil {
		b.syncDefinitions()
	}
	counts := b.exchangeTotals()
	v.mu.RLock()
	defer v.mu.RUnlock()
	ex := v.exchanges[name]
	if ex == nil {
		return ExchangeInfo{}, fmt.Errorf("exchange %q in vhost %q: %w", name, vhostName, ErrNotFound)
	}
	return exchangeInfo(v, ex, counts), nil
}

// Bindings lists the bindings of a vhost (every vhost when empty): first
// the default exchange's implicit ones, then by source exchange in the
// order they were made.
func (b *Broker) Bindings(vhostName string) ([]BindingInfo, error) {
	vs, err := b.vhostList(vhostName)
	if err != nil {
		return nil, err
	}
	var out []BindingInfo
	for _, v := range vs {
		v.mu.RLock()
		qnames := make([]string, 0, len(v.queues))
		for n := range v.queues {
			qnames = append(qnames, n)
		}
		sort.Strings(qnames)
		for _, n := range qnames {
			out = append(out, BindingInfo{VHost: v.name, Destination: n, RoutingKey: n})
		}
		exs := make([]*exchangeEntity, 0, len(v.exchanges))
		for _, ex := range v.exchanges {
			exs = append(exs, ex)
		}
		sort.Slice(exs, func(i, j int) bool { return exs[i].name < exs[j].name })
		for _, ex := range exs {
			for _, bn := range ex.router.Bindings() {
				out = append(out, BindingInfo{
					VHost: v.name, Source: ex.name, Destination: bn.Destination.Name,
					DestinationIsExchange: bn.Destination.Kind == exchange.DestExchange,
					RoutingKey:            bn.Key, Arguments: maps.Clone(bn.Args),
				})
			}
		}
		v.mu.RUnlock()
	}
	return out, nil
}

// Connections lists the client connections by id.
func (b *Broker) Connections() []ConnectionInfo {
	perConn := make(map[*conn]int)
	for _, ch := range b.mgmt.channels() {
		perConn[ch.c]++
	}
	b.mu.Lock()
	out := make([]ConnectionInfo, 0, len(b.conns))
	for c := range b.conns {
		ci := ConnectionInfo{Name: connName(c), ID: c.id, ConnectedAt: c.connectedAt, SendPending: c.out.pending.Load(), Channels: perConn[c]}
		ci.RecvOct, ci.RecvCnt = c.rd.octets.recvOct.Load(), c.rd.octets.recvCnt.Load()
		ci.SendOct, ci.SendCnt = c.rd.octets.sendOct.Load(), c.rd.octets.sendCnt.Load()
		ci.PeerHost, ci.PeerPort = splitAddr(c.nc.RemoteAddr())
		ci.Host, ci.Port = splitAddr(c.nc.LocalAddr())
		// The reader sets these during the handshake, before it names
		// the vhost under Broker.mu: reading them under mu once the
		// vhost is named is ordered after those writes.
		if c.vhostNm != "" {
			ci.Open = true
			ci.VHost, ci.User = c.vhostNm, c.userNm
			ci.ClientProperties = maps.Clone(c.clientProps)
			ci.FrameMax, ci.ChannelMax, ci.Heartbeat = c.frameMax, c.channelMax, c.heartbeat
		}
		out = append(out, ci)
	}
	b.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// ConnectionCount is the number of client connections, open or opening.
func (b *Broker) ConnectionCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.conns)
}

// ConnectionOctets are a connection's name and byte counters.
type ConnectionOctets struct {
	Name             string
	RecvOct, SendOct uint64
}

// ConnectionsOctets lists every connection's byte counters, in no order:
// what the management API's sampler reads every few seconds, without the
// copies of a listing (Connections).
func (b *Broker) ConnectionsOctets() []ConnectionOctets {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]ConnectionOctets, 0, len(b.conns))
	for c := range b.conns {
		out = append(out, ConnectionOctets{Name: connName(c), RecvOct: c.rd.octets.recvOct.Load(), SendOct: c.rd.octets.sendOct.Load()})
	}
	return out
}

// ChannelCounters are an open channel's connection name, number and
// counters.
type ChannelCounters struct {
	Connection string
	Number     uint16
	Stats      ChannelStats
}

// ChannelsCounters lists the counters of every open channel, in no
// order: Channels' Stats without the rest, for the sampler.
func (b *Broker) ChannelsCounters() []ChannelCounters {
	chs := b.mgmt.channels()
	out := make([]ChannelCounters, 0, len(chs))
	for _, ch := range chs {
		ch.mu.Lock()
		closed := ch.closed
		st := ch.countersLocked()
		ch.mu.Unlock()
		if !closed {
			out = append(out, ChannelCounters{Connection: connName(ch.c), Number: ch.id, Stats: st})
		}
	}
	return out
}

// Connection describes the named connection.
func (b *Broker) Connection(name string) (ConnectionInfo, error) {
	for _, ci := range b.Connections() {
		if ci.Name == name {
			return ci, nil
		}
	}
	return ConnectionInfo{}, fmt.Errorf("connection %q: %w", name, ErrNotFound)
}

// CloseConnection closes the named connection with 320
// CONNECTION_FORCED and reason as its text, as the management API does.
func (b *Broker) CloseConnection(name, reason string) error {
	b.mu.Lock()
	var found *conn
	for c := range b.conns {
		if connName(c) == name {
			found = c
			break
		}
	}
	b.mu.Unlock()
	if found == nil {
		return fmt.Errorf("connection %q: %w", name, ErrNotFound)
	}
	if reason == "" {
		reason = "Closed via management plugin"
	}
	found.forceClose(reason)
	return nil
}

// Channels lists the open channels by connection and number.
func (b *Broker) Channels() []ChannelInfo {
	chs := b.mgmt.channels()
	out := make([]ChannelInfo, 0, len(chs))
	for _, ch := range chs {
		// Channels exist only on open connections: vhost and user were
		// set before the channel was registered.
		c := ch.c
		ci := ChannelInfo{
			Connection: connName(c), ConnectionID: c.id, Number: ch.id,
			GlobalPrefetch: int(ch.globalPrefetch.Load()),
			Prefetch:       int(ch.shown.prefetch.Load()),
			Confirm:        ch.shown.confirm.Load(),
			Transactional:  ch.shown.tx.Load(),
		}
		if c.vhost != nil {
			ci.VHost = c.vhost.name
		}
		if c.user != nil {
			ci.User = c.user.name
		}
		ch.mu.Lock()
		closed := ch.closed
		ci.Consumers, ci.Unacked = len(ch.consumers), ch.unacked.len()
		ci.Stats, ci.Published = ch.statsLocked()
		ch.mu.Unlock()
		ci.Unconfirmed = ch.unconfirmed()
		if !closed {
			out = append(out, ci)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ConnectionID != out[j].ConnectionID {
			return out[i].ConnectionID < out[j].ConnectionID
		}
		return out[i].Number < out[j].Number
	})
	return out
}

// Consumers lists the consumers of a vhost's queues (every vhost when
// empty), by vhost, queue and registration.
func (b *Broker) Consumers(vhostName string) ([]ConsumerInfo, error) {
	vs, err := b.vhostList(vhostName)
	if err != nil {
		return nil, err
	}
	var out []ConsumerInfo
	for _, v := range vs {
		for _, qe := range v.queueEntities() {
			out = qe.appendConsumers(out)
		}
	}
	return out, nil
}

func (qe *queueEntity) appendConsumers(out []ConsumerInfo) []ConsumerInfo {
	if qe.repl != nil {
		// A replicated queue's or stream's consumers are in its data
		// group's state on this node (quorumrepl.go, streamrepl.go).
		return qe.vhost.b.appendReplConsumers(qe, out)
	}
	qe.mu.Lock()
	defer qe.mu.Unlock()
	if qe.deleted {
		return out
	}
	if qe.stream != nil {
		return qe.appendStreamConsumersLocked(out)
	}
	for _, qc := range qe.q.Consumers() {
		cons, ok := qe.consumers[qc.ID]
		if !ok {
			continue
		}
		conn, chID := "", uint16(0)
		if cons.link != nil {
			conn = "node link from " + cons.link.peer
		} else {
			conn, chID = connName(cons.ch.c), cons.ch.id
		}
		out = append(out, ConsumerInfo{
			VHost: qe.vhost.name, Queue: qe.name, Tag: qc.Tag,
			Connection: conn, Channel: chID,
			AckRequired: !qc.NoAck, Exclusive: qc.Exclusive, Prefetch: qc.Prefetch,
			Priority: qc.Priority, Unacked: qc.Unacked(),
		})
	}
	return out
}

// consumerConn is the connection and channel a consumer of this node is
// fed over, as /api/consumers names them.
func consumerConn(cons *consumer) (string, uint16) {
	switch {
	case cons.link != nil:
		return "node link from " + cons.link.peer, 0
	case cons.ch != nil:
		return connName(cons.ch.c), cons.ch.id
	}
	return "", 0
}

// appendReplConsumers appends the consumers this node serves of qe, a
// replicated quorum queue or stream: those its data group's state on this
// node has, and this node's clients (or peers, over the node link) own.
// Consumers through other nodes are theirs to list.
func (b *Broker) appendReplConsumers(qe *queueEntity, out []ConsumerInfo) []ConsumerInfo {
	g := b.replStream(qe) // the group's state machine on this node
	if g == nil {
		return out
	}
	if qe.stream != nil {
		g.mu.Lock()
		defer g.mu.Unlock()
		if gs := g.streams[qe.repl.key]; gs != nil {
			out = qe.appendStreamConsumers(out, gs.s.Consumers())
		}
		return out
	}
	// The group's consumers, then this node's own among them (two locks
	// one after the other, never nested).
	type groupConsumer struct {
		id               queue.ConsumerID
		noAck, exclusive bool
		prefetch, prio   int
		unacked          int
		tag              string
	}
	var gcs []groupConsumer
	g.mu.Lock()
	if q := g.queues[qe.repl.key]; q != nil {
		for _, c := range q.Consumers() {
			gcs = append(gcs, groupConsumer{id: c.ID, noAck: c.NoAck, exclusive: c.Exclusive,
				prefetch: c.Prefetch, prio: c.Priority, unacked: c.Unacked(), tag: c.Tag})
		}
	}
	g.mu.Unlock()
	r := &b.repl
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, gc := range gcs {
		cons := r.consumers[gc.id]
		if cons == nil || cons.qe != qe {
			continue
		}
		conn, chID := consumerConn(cons)
		out = append(out, ConsumerInfo{
			VHost: qe.vhost.name, Queue: qe.name, Tag: gc.tag,
			Connection: conn, Channel: chID,
			AckRequired: !gc.noAck, Exclusive: gc.exclusive, Prefetch: gc.prefetch,
			Priority: gc.prio, Unacked: gc.unacked,
		})
	}
	return out
}

// QueueConsumers lists the consumers of one queue.
func (b *Broker) QueueConsumers(vhostName, name string) []ConsumerInfo {
	v := b.vhost(vhostName)
	if v == nil {
		return nil
	}
	v.mu.RLock()
	qe := v.queues[name]
	v.mu.RUnlock()
	if qe == nil {
		return nil
	}
	return qe.appendConsumers(nil)
}

// MessageTotals sums the message counters of every queue, deleted ones
// included.
func (b *Broker) MessageTotals() MessageStats {
	o := b.Overview()
	return o.Totals
}

// Overview counts the broker's objects and sums its counters.
func (b *Broker) Overview() Overview {
	var o Overview
	m := &b.mgmt
	o.Totals = MessageStats{
		Publish: m.retiredPublish.Load(), Deliver: m.retiredDeliver.Load(), Get: m.retiredGet.Load(),
		Redeliver: m.retiredRedeliver.Load(), Ack: m.retiredAck.Load(),
		DeliverNoAck: m.retiredDeliverNoAck.Load(), GetNoAck: m.retiredGetNoAck.Load(), GetEmpty: m.retiredGetEmpty.Load(),
	}
	o.Channels = len(m.channels())
	b.mu.Lock()
	o.Connections = len(b.conns)
	b.mu.Unlock()
	vs, _ := b.vhostList("")
	o.VHosts = len(vs)
	for _, v := range vs {
		v.mu.RLock()
		o.Exchanges += len(v.exchanges)
		v.mu.RUnlock()
		for _, qe := range v.queueEntities() {
			qe.mu.Lock()
			if !qe.deleted {
				o.Queues++
				o.Ready += qe.q.Ready()
				o.Unacked += qe.q.Unacked()
				o.ReadyBytes += qe.q.ReadyBytes()
				o.Consumers += qe.q.ConsumerCount()
				o.Totals.add(qe.stats.export())
			}
			qe.mu.Unlock()
		}
	}
	return o
}
