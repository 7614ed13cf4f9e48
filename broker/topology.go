package broker

import (
	"slices"

	"github.com/warrenmq/warren/exchange"
	"github.com/warrenmq/warren/store"
)

// removal plans what a topology change takes away, before anything is
// changed: the queue deleted, the destinations whose bindings go, the
// exchanges deleted (asked for, or auto-delete ones left without
// bindings), and so the store records to delete. The change deletes them
// as one store batch with no vhost lock held and then applies itself in
// memory (removeDestinationLocked, autoDeleteLocked, deleteExchangeLocked),
// which comes to the same result because only Broker.defMu holders change
// the topology. Build it with b.defMu and v.mu (read) held.
type removal struct {
	v     *vhost
	queue *queueEntity
	// dests are the queues and exchanges whose bindings go.
	dests map[exchange.Destination]bool
	// gone are the exchanges deleted, by name.
	gone map[string]*exchangeEntity
	// auto are the vhost's auto-delete exchanges, the only ones a removal
	// can delete by itself; taken counts the bindings taken from each and
	// binds caches their bindings.
	auto  []*exchangeEntity
	taken map[*exchangeEntity]int
	binds map[*exchangeEntity][]exchange.Binding
	// unbound is the binding an unbind takes.
	unbound    bindingKey
	hasUnbound bool
}

func (v *vhost) newRemoval() *removal {
	r := &removal{v: v, dests: make(map[exchange.Destination]bool), gone: make(map[string]*exchangeEntity)}
	for _, e := range v.exchanges {
		if e.autoDelete {
			r.auto = append(r.auto, e)
		}
	}
	return r
}

// removeQueue plans the deletion of qe.
func (r *removal) removeQueue(qe *queueEntity) {
	r.queue = qe
	r.removeDest(exchange.Destination{Kind: exchange.DestQueue, Name: qe.name})
}

// removeDest plans dropping every binding to d, as removeDestinationLocked.
func (r *removal) removeDest(d exchange.Destination) {
	if r.dests[d] {
		return
	}
	r.dests[d] = true
	for _, e := range r.auto {
		if r.gone[e.name] == e {
			continue
		}
		bs, ok := r.binds[e]
		if !ok {
			bs = e.router.Bindings()
			if r.binds == nil {
				r.binds = make(map[*exchangeEntity][]exchange.Binding)
			}
			r.binds[e] = bs
		}
		n := 0
		for _, b := range bs {
			if b.Destination == d {
				n++
			}
		}
		if n > 0 {
			r.take(e, n)
		}
	}
}

// unbind plans taking the binding k, which exists, from e.
func (r *removal) unbind(e *exchangeEntity, k bindingKey) {
	r.unbound, r.hasUnbound = k, true
	r.take(e, 1)
}

// take counts n bindings taken from e and plans e's deletion if it is
// auto-delete and has none left, as autoDeleteLocked.
func (r *removal) take(e *exchangeEntity, n int) {
	if r.taken == nil {
		r.taken = make(map[*exchangeEntity]int)
	}
	r.taken[e] += n
	if e.autoDelete && e.router.Len()-r.taken[e] <= 0 && r.v.exchanges[e.name] == e {
		r.deleteExchange(e)
	}
}

// deleteExchange plans the deletion of e and of every binding from or to
// it, as deleteExchangeLocked.
func (r *removal) deleteExchange(e *exchangeEntity) {
	if r.gone[e.name] == e {
		return
	}
	r.gone[e.name] = e
	r.removeDest(exchange.Destination{Kind: exchange.DestExchange, Name: e.name})
}

// records returns the keys of the binding records the removal deletes and
// every store record it deletes.
func (r *removal) records() (keys []bindingKey, dels []store.DefRef) {
	if r.queue != nil && r.queue.storeID != 0 {
		dels = append(dels, store.DefRef{Kind: store.KindQueue, ID: r.queue.storeID})
	}
	for _, e := range r.gone {
		if e.storeID != 0 {
			dels = append(dels, store.DefRef{Kind: store.KindExchange, ID: e.storeID})
		}
	}
	v := r.v
	v.bindMu.Lock()
	defer v.bindMu.Unlock()
	for k, id := range v.bindingIDs {
		kind := exchange.DestQueue
		if k.destIsEx {
			kind = exchange.DestExchange
		}
		if r.dests[exchange.Destination{Kind: kind, Name: k.dest}] || r.gone[k.source] != nil || (r.hasUnbound && k == r.unbound) {
			keys = append(keys, k)
			dels = append(dels, store.DefRef{Kind: store.KindBinding, ID: id})
		}
	}
	return keys, dels
}

// dropBindingIDs forgets the binding records keys, which are deleted.
func (v *vhost) dropBindingIDs(keys []bindingKey) {
	if len(keys) == 0 {
		return
	}
	v.bindMu.Lock()
	for _, k := range keys {
		delete(v.bindingIDs, k)
	}
	v.bindMu.Unlock()
}

// deletedNames names the exchanges the removal deletes, in order:
// "exchange <name>".
func (r *removal) deletedNames() []string {
	var out []string
	for name := range r.gone {
		out = append(out, "exchange "+name)
	}
	slices.Sort(out)
	return out
}
