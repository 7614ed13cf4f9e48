package broker

import (
	"sync"
	"sync/atomic"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/exchange"
	"github.com/warrenmq/warren/queue"
)

// vhost is a virtual host: its exchanges, queues and bindings.
type vhost struct {
	name    string
	b       *Broker
	storeID uint64
	// bindMu guards bindingIDs, the store records of durable bindings.
	// It is taken after mu when both are needed.
	bindMu     sync.Mutex
	bindingIDs map[bindingKey]uint64

	// mu guards the maps and every exchange's router.
	mu        sync.RWMutex
	exchanges map[string]*exchangeEntity
	queues    map[string]*queueEntity
	// policies are the vhost's policies (policy.go).
	policies policySet

	// limits are the vhost's limits (vhostlimits.go; Broker.mu), and
	// maxQueues their max-queues (-1: none), read when a queue is declared.
	limits    map[string]int64
	maxQueues atomic.Int64
}

// exchangeEntity is a declared exchange.
type exchangeEntity struct {
	name       string
	kind       exchange.Kind
	durable    bool
	autoDelete bool
	internal   bool
	args       amqp.Table
	// router holds the bindings whose source is this exchange (vhost.mu).
	router exchange.Router
	// storeID is the id of the exchange's store record (0 = none).
	storeID uint64
	// alternate is the alternate exchange, from the alternate-exchange
	// argument or a policy ("" = none; vhost.mu).
	alternate string
	// partitionKeys caches the partition binding keys of a super stream
	// that routes by hash (stream_super.go); bind and unbind clear it.
	partitionKeys atomic.Pointer[[]string]
	// fanout caches the destinations of a fanout exchange resolved to
	// entities, for the router version it was made at (routeLocked).
	fanout atomic.Pointer[fanoutTargets]
	// plug holds the delayed, hash and deduplication features (nil for
	// none; exchange_plug.go).
	plug *exchangePlug
	// gone is set when the exchange leaves its vhost's exchanges (deleted,
	// or replaced by another entity of its name), under vhost.mu (write):
	// a publish holding the entity checks it under the read lock instead
	// of looking the name up again.
	gone bool
}

// fanoutTargets is what a fanout exchange routes every message to: its
// bound queues and exchanges, as of router version version. complete is
// false when a destination could not be resolved: then nothing is cached.
type fanoutTargets struct {
	version  uint64
	complete bool
	queues   []*queueEntity
	exs      []*exchangeEntity
}

// queue returns the named queue or nil.
func (v *vhost) queue(name string) *queueEntity {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.queues[name]
}

// exchange returns the named exchange or nil.
func (v *vhost) exchange(name string) *exchangeEntity {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.exchanges[name]
}

// fanoutTargetsLocked returns the resolved destinations of fanout exchange
// e, or nil when they cannot be cached. They are resolved again after a
// change of e's bindings; a queue or exchange that is deleted loses its
// bindings, so nothing stale stays. Several routers may resolve at once:
// they find the same. Hold v.mu (read).
func (v *vhost) fanoutTargetsLocked(e *exchangeEntity) *fanoutTargets {
	ver := e.router.Version()
	if ft := e.fanout.Load(); ft != nil && ft.version == ver {
		if !ft.complete {
			return nil
		}
		return ft
	}
	ft := &fanoutTargets{version: ver, complete: true}
	for _, d := range e.router.Route("", nil, nil) {
		switch d.Kind {
		case exchange.DestQueue:
			q := v.queues[d.Name]
			ft.queues = append(ft.queues, q)
			ft.complete = ft.complete && q != nil
		case exchange.DestExchange:
			x := v.exchanges[d.Name]
			ft.exs = append(ft.exs, x)
			ft.complete = ft.complete && x != nil
		}
	}
	if !ft.complete {
		ft.queues, ft.exs = nil, nil
	}
	e.fanout.Store(ft)
	if !ft.complete {
		return nil
	}
	return ft
}

// queueEntity is a declared queue and the lock that serialises its state.
type queueEntity struct {
	// The fields a publish touches come first, to share a cache line or
	// two: a fanout to thousands of queues pays a cache miss for every
	// line it touches in every queue.
	mu sync.Mutex
	// deleted is set once the queue is gone; holders of a stale pointer
	// check it under mu.
	deleted bool
	durable bool
	// quorum is set for a quorum queue (quorum.go): every message is
	// journaled, redeliveries carry x-delivery-count.
	quorum bool
	// at makes publishes, deliveries, gets and returns use the queue's *At
	// variants: the queue has a TTL, a length limit, a dead-letter exchange
	// or a delivery limit, or a message with an expiration was published to
	// it. Plain queues keep the fast paths (mu).
	at bool
	q  *queue.Queue
	// stream is set for a stream queue (stream.go); q is then unused.
	stream *streamState
	vhost  *vhost
	// stats counts what passed through the queue, for management (mu).
	stats queueStats
	// qv is the queue q points to, kept in the entity so that a publish
	// finds the lock and the queue's state side by side in memory.
	qv queue.Queue

	name       string
	exclusive  bool
	autoDelete bool
	args       amqp.Table
	// owner is the connection of an exclusive queue, when it is on this
	// node; ownerID is its id (conn.id), which the definitions keep.
	owner   *conn
	ownerID uint64
	// id is the queue's id in the definitions, assigned when it is
	// declared; a durable queue's record has it too (storeID).
	id uint64

	// hadConsumer arms auto-delete: it fires when the last consumer of a
	// queue that had one goes.
	hadConsumer bool
	// storeID is the id of the queue's store record (0 = none).
	storeID uint64
	// effects is the scratch buffer of applyLocked's effects (mu).
	effects []queue.Effect
	// deliveries is the scratch buffer of dispatchLocked's deliveries
	// (mu).
	deliveries []queue.Delivery
	// seqs is the scratch buffer of the message ids one settle command
	// names (settleRunLocked; mu).
	seqs []uint64
	// consumers is the consumers of q by id, as its deliveries name them
	// (mu).
	consumers map[queue.ConsumerID]*consumer
	// drained, when not nil, is closed once the queue's backlog falls
	// below flowLow: publishers held back by flow control wait on it.
	drained chan struct{}
	// fx is the queue's arguments and policies as the broker applies them,
	// and their timers (queueargs.go; mu).
	fx queueFeatures
	// dedup is the cache of a deduplicating queue (queue_dedup.go), nil
	// otherwise. Guarded by mu.
	dedup *queueDedup
	// pageID names qe's spilled messages in the store, 0 until it first
	// spills; paging is set while its pager goroutine runs (paging.go; mu).
	pageID uint64
	paging bool
	// stored is set once a message of the queue may be in the store: it
	// was journaled, or the queue was recovered from the store (mu).
	stored bool
	// home is set on a remote entry: the queue lives on another node
	// (link.go). Set before the entry is visible, never changed.
	home *remoteHome
	// homeNode is the queue's node as placed ("" on a single node).
	homeNode string
	// repl is set on a quorum queue replicated in a data group
	// (quorumrepl.go). Set before the entry is visible, never changed.
	repl *replQueue
}

// node is the name of the queue's home node ("" on a single node).
func (qe *queueEntity) node() string { return qe.homeNode }

func newVHost(b *Broker, name string) *vhost {
	v := &vhost{
		name:       name,
		b:          b,
		bindingIDs: make(map[bindingKey]uint64),
		exchanges:  make(map[string]*exchangeEntity),
		queues:     make(map[string]*queueEntity),
	}
	v.maxQueues.Store(-1)
	v.exchanges[""] = &exchangeEntity{name: "", kind: exchange.Direct, durable: true, router: exchange.NewRouter(exchange.Direct)}
	for _, d := range []struct {
		name string
		kind exchange.Kind
	}{
		{"amq.direct", exchange.Direct},
		{"amq.fanout", exchange.Fanout},
		{"amq.topic", exchange.Topic},
		{"amq.headers", exchange.Headers},
		{"amq.match", exchange.Headers},
	} {
		v.exchanges[d.name] = &exchangeEntity{name: d.name, kind: d.kind, durable: true, router: exchange.NewRouter(d.kind)}
	}
	return v
}

// routeLocked appends to out every queue that a message published to ex
// with key reaches, each at most once, following exchange-to-exchange
// bindings and alternate exchanges (cycles are harmless). headers is
// called at most once, and only when a headers exchange is on the way.
// Called again with the out it returned (more routing keys of one
// message), it adds only queues not yet in out. rs is the caller's
// scratch, used by one routing at a time. Hold v.mu (read).
//
// The cost is linear in the destinations met: an exchange's Route reports
// each destination once, so the queues of the first exchange that routes
// anywhere go in unchecked; only those met after them are checked against
// out, in constant time each (routeScratch.seenQueue).
func (v *vhost) routeLocked(ex *exchangeEntity, key string, headers func() amqp.Table, out []*queueEntity, rs *routeScratch) []*queueEntity {
	if len(out) == 0 && rs.indexed > 0 {
		rs.reset()
	}
	if ex.name == "" {
		if q := v.queues[key]; q != nil && !(len(out) > 0 && rs.seenQueue(out, q)) {
			out = append(out, q)
		}
		return out
	}
	// check is set once out holds queues that the exchange now routing
	// did not report itself.
	check := len(out) > 0
	var hdrs amqp.Table
	hdrsDone := false
	rs.visitedReset()
	stack := append(rs.stack[:0], ex)
	for len(stack) > 0 {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if !rs.visit(e) {
			continue
		}
		if e.kind == exchange.Headers && !hdrsDone {
			hdrs = headers()
			hdrsDone = true
		}
		n := len(out)
		if e.kind == exchange.Fanout {
			if ft := v.fanoutTargetsLocked(e); ft != nil {
				if check {
					for _, q := range ft.queues {
						if !rs.seenQueue(out, q) {
							out = append(out, q)
						}
					}
				} else {
					out = append(out, ft.queues...)
				}
				for _, x := range ft.exs {
					if !rs.visited(x) {
						stack = append(stack, x)
					}
				}
				if len(ft.queues) == 0 && len(ft.exs) == 0 {
					stack = v.alternateLocked(e, rs, stack)
				}
				check = check || len(out) > n
				continue
			}
		}
		rk := key
		if len(e.args) > 0 {
			rk = superStreamKey(e, key)
			if e.plug.hashOn() {
				rk = e.plug.hashValue(headers, rs.header)
			}
		}
		ds := e.router.Route(rk, hdrs, rs.dests[:0])
		if len(ds) == 0 {
			stack = v.alternateLocked(e, rs, stack)
		}
		for i := range ds {
			d := &ds[i]
			switch d.Kind {
			case exchange.DestQueue:
				if q := v.queues[d.Name]; q != nil && !(check && rs.seenQueue(out, q)) {
					out = append(out, q)
				}
			case exchange.DestExchange:
				if x := v.exchanges[d.Name]; x != nil && !rs.visited(x) {
					stack = append(stack, x)
				}
			}
		}
		check = check || len(out) > n
		rs.dests = ds[:0]
	}
	rs.stack = stack[:0]
	return out
}

// alternateLocked pushes the alternate exchange of e, which routed a
// message nowhere, onto stack (rabbit_exchange:process_alternate).
func (v *vhost) alternateLocked(e *exchangeEntity, rs *routeScratch, stack []*exchangeEntity) []*exchangeEntity {
	if e.alternate != "" {
		if x := v.exchanges[e.alternate]; x != nil && !rs.visited(x) {
			stack = append(stack, x)
		}
	}
	return stack
}

// routeScratch is routeLocked's working memory, kept between routings so
// that routing allocates nothing once it has grown: a channel's reader
// owns one, dead-lettering takes one from routeScratchPool.
type routeScratch struct {
	dests []exchange.Destination
	stack []*exchangeEntity
	// exs are the exchanges visited by the routing in progress; exSet
	// holds them too once there are more than smallSet.
	exs   []*exchangeEntity
	exSet map[*exchangeEntity]struct{}
	// qSet holds out[:indexed] once out has more than smallSet queues:
	// out is looked up there, not scanned.
	qSet    map[*queueEntity]struct{}
	indexed int
	// header is the content header of the message being routed, when the
	// caller has it (for a consistent-hash exchange's hash-property).
	header []byte
}

// smallSet is the size up to which a set is a slice scanned in full:
// cheaper than hashing for a few entries.
const smallSet = 16

// bigSet is the size above which a set's map is dropped after use rather
// than cleared: clearing costs its capacity, every routing.
const bigSet = 1024

var routeScratchPool = sync.Pool{New: func() any { return new(routeScratch) }}

// reset empties qSet for the routing of another message.
func (rs *routeScratch) reset() {
	if len(rs.qSet) > bigSet {
		rs.qSet = nil
	} else {
		clear(rs.qSet)
	}
	rs.indexed = 0
}

// seenQueue reports whether q is in out, which routeLocked only appends to
// (so out[:rs.indexed] are the ones in qSet).
func (rs *routeScratch) seenQueue(out []*queueEntity, q *queueEntity) bool {
	if len(out) <= smallSet {
		for _, x := range out {
			if x == q {
				return true
			}
		}
		return false
	}
	if rs.qSet == nil {
		rs.qSet = make(map[*queueEntity]struct{}, len(out))
	}
	for ; rs.indexed < len(out); rs.indexed++ {
		rs.qSet[out[rs.indexed]] = struct{}{}
	}
	_, ok := rs.qSet[q]
	return ok
}

func (rs *routeScratch) visitedReset() {
	clear(rs.exs)
	rs.exs = rs.exs[:0]
	if rs.exSet != nil {
		if len(rs.exSet) > bigSet {
			rs.exSet = nil
		} else {
			clear(rs.exSet)
		}
	}
}

// visited reports whether e was visited by the routing in progress.
func (rs *routeScratch) visited(e *exchangeEntity) bool {
	if len(rs.exs) <= smallSet {
		for _, x := range rs.exs {
			if x == e {
				return true
			}
		}
		return false
	}
	_, ok := rs.exSet[e]
	return ok
}

// visit records e as visited; false if it already was.
func (rs *routeScratch) visit(e *exchangeEntity) bool {
	if rs.visited(e) {
		return false
	}
	rs.exs = append(rs.exs, e)
	switch n := len(rs.exs); {
	case n == smallSet+1:
		if rs.exSet == nil {
			rs.exSet = make(map[*exchangeEntity]struct{}, 2*n)
		}
		for _, x := range rs.exs {
			rs.exSet[x] = struct{}{}
		}
	case n > smallSet+1:
		rs.exSet[e] = struct{}{}
	}
	return true
}

// removeDestinationLocked drops every binding to d and then, with cascade,
// every auto-delete exchange left without bindings. It changes memory
// only: the caller deleted the store records first (removal). Hold v.mu
// (write).
func (v *vhost) removeDestinationLocked(d exchange.Destination, cascade bool) {
	for _, e := range v.exchanges {
		if e.router.RemoveDestination(d) > 0 {
			e.partitionKeys.Store(nil)
			if cascade {
				v.autoDeleteLocked(e)
			}
		}
	}
}

// autoDeleteLocked deletes e if it is auto-delete and has no bindings left
// as a source. Hold v.mu (write).
func (v *vhost) autoDeleteLocked(e *exchangeEntity) {
	if !e.autoDelete || e.router.Len() > 0 || v.exchanges[e.name] != e {
		return
	}
	v.deleteExchangeLocked(e)
}

// deleteExchangeLocked removes e and every binding from or to it, in
// memory (see removeDestinationLocked). Hold v.mu (write).
func (v *vhost) deleteExchangeLocked(e *exchangeEntity) {
	if v.exchanges[e.name] == e {
		e.gone = true
	}
	delete(v.exchanges, e.name)
	v.b.detachDelayed(e)
	v.removeDestinationLocked(exchange.Destination{Kind: exchange.DestExchange, Name: e.name}, true)
}

// allVHosts returns the vhosts.
func (b *Broker) allVHosts() []*vhost {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*vhost, 0, len(b.vhosts))
	for _, v := range b.vhosts {
		out = append(out, v)
	}
	return out
}
