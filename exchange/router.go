package exchange

import "github.com/warrenmq/warren/amqp"

// DestKind says whether a Destination is a queue or an exchange.
type DestKind uint8

// Destination kinds.
const (
	DestQueue DestKind = iota
	DestExchange
)

// Destination is what a binding points at: a queue or another exchange (exchange.bind) of the
// same vhost. It is comparable and used as a map key.
type Destination struct {
	Kind DestKind
	Name string
}

// Binding ties an exchange to a Destination. Key is the binding key (ignored for matching by
// fanout and headers exchanges, yet part of the binding's identity); Args are the binding
// arguments (the match table of a headers exchange).
type Binding struct {
	Destination Destination
	Key         string
	Args        amqp.Table
}

// Router holds the bindings of one exchange and routes by its type.
//
// Bind, Unbind and RemoveDestination mutate; the caller serialises them and must not run them
// concurrently with anything else. Route, Has, Bindings and Len only read and may run concurrently
// with each other.
type Router interface {
	// Bind adds b and reports whether it was new. Binding the same destination with the same
	// key and equal arguments again is a no-op that reports false. The router keeps a shallow
	// copy of b.Args; the values inside must not be modified afterwards.
	Bind(b Binding) (added bool)

	// Unbind removes the binding with b's destination, key and equal arguments (nil and empty
	// tables are equal) and reports whether there was one.
	Unbind(b Binding) (removed bool)

	// Has reports whether Unbind(b) would remove a binding. It only reads.
	Has(b Binding) bool

	// Route appends to out the destinations that a message with routing key key and headers
	// headers (the basic properties' header table, may be nil) reaches, and returns the
	// extended slice. Each destination is appended at most once per call; out[:len(out)] is
	// left as it is (no de-duplication against it). Route never modifies the router, and does
	// not allocate when out has capacity for the result (for a topic exchange: for the
	// destinations of every matching binding before de-duplication; and the key meets at
	// most 16 distinct '#' trie nodes).
	Route(key string, headers amqp.Table, out []Destination) []Destination

	// Bindings returns a new slice of the bindings in the order they were added. The Args
	// tables are shared with the router and must not be modified.
	Bindings() []Binding

	// Len returns the number of bindings.
	Len() int

	// RemoveDestination drops every binding to d (the queue or exchange was deleted) and
	// returns how many there were.
	RemoveDestination(d Destination) int

	// Version changes whenever the bindings do (Bind, Unbind or RemoveDestination that
	// changed something): a caller may cache what it derived from the bindings (a fanout
	// exchange's destinations, resolved) and know when it is stale.
	Version() uint64
}

// NewRouter returns an empty Router for exchanges of kind k, or nil if k is not one of
// Direct, Fanout, Topic, Headers, ConsistentHash and ModulusHash.
func NewRouter(k Kind) Router {
	var idx index
	switch k {
	case Direct:
		idx = &directIndex{}
	case Fanout:
		idx = &fanoutIndex{}
	case Topic:
		idx = &topicIndex{}
	case Headers:
		idx = &headersIndex{}
	case ConsistentHash:
		idx = &hashIndex{consistent: true}
	case ModulusHash:
		idx = &hashIndex{}
	default:
		return nil
	}
	return &router{idx: idx}
}

// index is the kind-specific routing structure behind a router. add and remove are called
// once per binding that bindingSet reports as new or removed, with the stored entry (the same
// pointer for add and remove of one binding).
type index interface {
	add(e *bindingEntry)
	remove(e *bindingEntry)
	route(key string, headers amqp.Table, out []Destination) []Destination
}

// router implements Router: bindingSet owns binding identity and order, idx the routing.
type router struct {
	set     bindingSet
	idx     index
	version uint64
}

func (r *router) Bind(b Binding) bool {
	e, added := r.set.add(b)
	if added {
		r.idx.add(e)
		r.version++
	}
	return added
}

func (r *router) Unbind(b Binding) bool {
	e := r.set.remove(b)
	if e == nil {
		return false
	}
	r.idx.remove(e)
	r.version++
	return true
}

func (r *router) Has(b Binding) bool { return r.set.find(b) != nil }

func (r *router) Route(key string, headers amqp.Table, out []Destination) []Destination {
	return r.idx.route(key, headers, out)
}

func (r *router) Bindings() []Binding { return r.set.snapshot() }

func (r *router) Len() int { return r.set.len() }

func (r *router) RemoveDestination(d Destination) int {
	removed := r.set.removeDestination(d)
	for _, e := range removed {
		r.idx.remove(e)
	}
	if len(removed) > 0 {
		r.version++
	}
	return len(removed)
}

func (r *router) Version() uint64 { return r.version }
