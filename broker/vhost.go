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
	// deleted is set once DeleteVHost has removed the vhost (Broker.defMu):
	// its connections, until they close, can define nothing in it.
	deleted bool

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
}

// queueEntity is a declared queue and the lock that serialises its state.
type queueEntity struct {
	name       string
	vhost      *vhost
	durable    bool
	exclusive  bool
	autoDelete bool
	args       amqp.Table
	// owner is the connection of an exclusive queue.
	owner *conn

	mu sync.Mutex
	q  *queue.Queue
	// deleted is set once the queue is gone; holders of a stale pointer
	// check it under mu.
	deleted bool
	// hadConsumer arms auto-delete: it fires when the last consumer of a
	// queue that had one goes.
	hadConsumer bool
	// storeID is the id of the queue's store record (0 = none).
	storeID uint64
	scratch []queue.Delivery
	// drained, when not nil, is closed once the queue's backlog falls
	// below flowLow: publishers held back by flow control wait on it.
	drained chan struct{}
	// stats counts what passed through the queue, for management (mu).
	stats queueStats
	// fx is the queue's arguments and policies as the broker applies them,
	// and their timers (queueargs.go; mu).
	fx queueFeatures
	// pageID names qe's spilled messages in the store, 0 until it first
	// spills; paging is set while its pager goroutine runs (paging.go; mu).
	pageID uint64
	paging bool
	// quorum is set for a quorum queue (quorum.go): every message is
	// journaled, redeliveries carry x-delivery-count.
	quorum bool
	// stream is set for a stream queue (stream.go); q is then unused.
	stream *streamState
}

// goneError refuses a definition change in a deleted vhost, as the
// connection is being closed for. Hold b.defMu.
func (v *vhost) goneError(cls, mth uint16) error {
	if v.deleted {
		return amqp.Errorf(amqp.ConnectionForced, cls, mth, "vhost '%s' is deleted", v.name)
	}
	return nil
}

func newVHost(b *Broker, name string) *vhost {
	v := &vhost{
		name:       name,
		b:          b,
		bindingIDs: make(map[bindingKey]uint64),
		exchanges:  make(map[string]*exchangeEntity),
		queues:     make(map[string]*queueEntity),
	}
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
// bindings (cycles are harmless). headers is called at most once, and only
// when a headers exchange is on the way. Hold v.mu (read).
func (v *vhost) routeLocked(ex *exchangeEntity, key string, headers func() amqp.Table, out []*queueEntity) []*queueEntity {
	if ex.name == "" {
		if q := v.queues[key]; q != nil {
			out = append(out, q)
		}
		return out
	}
	var dests [16]exchange.Destination
	var visitedBuf [4]*exchangeEntity
	visited := visitedBuf[:0]
	var hdrs amqp.Table
	hdrsDone := false
	pending := [8]*exchangeEntity{ex}
	stack := pending[:1]
	for len(stack) > 0 {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if containsEx(visited, e) {
			continue
		}
		visited = append(visited, e)
		if e.kind == exchange.Headers && !hdrsDone {
			hdrs = headers()
			hdrsDone = true
		}
		rk := key
		if len(e.args) > 0 {
			rk = superStreamKey(e, key)
		}
		ds := e.router.Route(rk, hdrs, dests[:0])
		if len(ds) == 0 && e.alternate != "" {
			// An exchange that routes nowhere hands the message to its
			// alternate exchange (rabbit_exchange:process_alternate).
			if x := v.exchanges[e.alternate]; x != nil && !containsEx(visited, x) {
				stack = append(stack, x)
			}
		}
		for _, d := range ds {
			switch d.Kind {
			case exchange.DestQueue:
				if q := v.queues[d.Name]; q != nil && !containsQ(out, q) {
					out = append(out, q)
				}
			case exchange.DestExchange:
				if x := v.exchanges[d.Name]; x != nil && !containsEx(visited, x) {
					stack = append(stack, x)
				}
			}
		}
	}
	return out
}

func containsEx(s []*exchangeEntity, e *exchangeEntity) bool {
	for _, x := range s {
		if x == e {
			return true
		}
	}
	return false
}

func containsQ(s []*queueEntity, q *queueEntity) bool {
	for _, x := range s {
		if x == q {
			return true
		}
	}
	return false
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
	delete(v.exchanges, e.name)
	v.removeDestinationLocked(exchange.Destination{Kind: exchange.DestExchange, Name: e.name}, true)
}
