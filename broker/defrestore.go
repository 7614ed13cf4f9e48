package broker

import (
	"errors"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/store"
)

// A definitions snapshot restored on a node that has queues: a node that
// fell behind its log's snapshot (it was down, or cut off, while the
// others compacted their logs) catches up from the snapshot, which is the
// cluster's truth for definitions. The queues of this node (a classic
// queue or a stream whose home it is, with its messages in its store) that
// the snapshot lists with the same id are kept as they are, messages,
// consumers and timers included; a queue the snapshot does not list (with
// that id) goes as a deletion through the log would have taken it (its
// consumers cancelled, its messages deleted from the store), and the
// snapshot's queues that the node lacks are created. The entries of remote
// queues and of replicated ones (quorum queues and replicated streams),
// whose state is on their home node or in their data group (which catches
// up by itself), are rebuilt from the snapshot. Exchanges, bindings,
// policies, vhosts, users and parameters are replaced.
//
// The vhosts are rebuilt, so the node's client connections, which hold
// the vhost they opened, are closed (320 CONNECTION_FORCED) once the
// snapshot is in place: their exclusive queues go through the log as for
// any closed connection, and the clients reconnect to the new state.

// queueRestore plans what a snapshot restore does with the node's queues.
type queueRestore struct {
	// keep are the queues kept, by vhost and name ("vhost\x00name").
	keep map[string]*queueEntity
	// drop are the queue entries of queues the snapshot does not list,
	// with the vhost holding them: deleted as the log would have.
	drop []droppedQueue
	// retire are the entries of remote and replicated queues the snapshot
	// lists, which it replaces (their state is on their home node or in
	// their data group).
	retire []*queueEntity
}

type droppedQueue struct {
	v  *vhost
	qe *queueEntity
}

// planQueueRestore sorts the node's queues for a restore of defs. Hold
// b.defMu.
func (b *Broker) planQueueRestore(defs *store.Definitions) *queueRestore {
	listed := make(map[string]uint64, len(defs.Queues))
	own := make(map[string]bool)
	for _, q := range defs.Queues {
		k := q.VHost + "\x00" + q.Name
		listed[k] = q.ID
		if _, repl := groupOf(q.Node); b.local(q.Node) && !repl {
			own[k] = true
		}
	}
	p := &queueRestore{keep: make(map[string]*queueEntity)}
	for _, v := range b.allVHosts() {
		v.mu.RLock()
		for name, qe := range v.queues {
			k := v.name + "\x00" + name
			id, ok := listed[k]
			switch {
			case ok && id == qe.id && own[k] && qe.home == nil && qe.repl == nil:
				p.keep[k] = qe
			case ok && id == qe.id:
				// A remote entry or a replicated queue, which the
				// snapshot's entry replaces: its state is elsewhere.
				p.retire = append(p.retire, qe)
			default:
				p.drop = append(p.drop, droppedQueue{v, qe})
			}
		}
		v.mu.RUnlock()
	}
	return p
}

// dropLocked removes the queues dropped from memory, once their records
// are deleted, and returns their consumers to cancel. Hold b.defMu.
func (p *queueRestore) dropLocked(b *Broker) []*consumer {
	var conss []*consumer
	for _, d := range p.drop {
		d.v.mu.Lock()
		_, c := d.v.dropQueueLocked(d.qe, false)
		d.v.mu.Unlock()
		conss = append(conss, c...)
	}
	for _, qe := range p.retire {
		qe.mu.Lock()
		qe.stopTimersLocked()
		b.mgmt.retire(qe.stats)
		qe.mu.Unlock()
	}
	return conss
}

// finish completes a restore installed in memory: it deletes the messages
// of the queues dropped, cancels their consumers, applies the snapshot's
// policies to the queues kept and closes the client connections. Hold
// b.defMu alone.
func (p *queueRestore) finish(b *Broker, conss []*consumer) {
	for _, d := range p.drop {
		qe := d.qe
		if qe.stream != nil {
			b.dropStream(qe)
		}
		if qe.mayHoldData() {
			// As a replicated deletion: queue ids are never reused, so it
			// may finish after the next commands are applied.
			b.drops.Add(1)
			go func() {
				defer b.drops.Done()
				b.dropQueueData(qe)
			}()
		}
	}
	for _, c := range conss {
		c.serverCancel()
	}
	if len(p.keep) > 0 {
		for _, v := range b.allVHosts() {
			v.applyPolicies()
		}
	}
	if len(p.drop) > 0 || len(p.keep) > 0 || len(p.retire) > 0 {
		b.log.Warn("installed the cluster's definitions snapshot over this node's queues",
			zap.Int("queues_kept", len(p.keep)), zap.Int("queues_deleted", len(p.drop)),
			zap.Int("entries_replaced", len(p.retire)))
	}
	// The exclusive queues of this node that the snapshot brings and the
	// node did not have: their connections died with the node (as at a
	// restart, durable.go), so they go through the log.
	var orphans []droppedQueue
	for _, v := range b.allVHosts() {
		v.mu.RLock()
		for name, qe := range v.queues {
			if qe.exclusive && qe.home == nil && qe.repl == nil && p.keep[v.name+"\x00"+name] != qe {
				orphans = append(orphans, droppedQueue{v, qe})
			}
		}
		v.mu.RUnlock()
	}
	if len(orphans) > 0 {
		go func() {
			for _, o := range orphans {
				if _, err := o.v.removeQueue(o.qe, false, false, true); err != nil {
					b.log.Warn("deleting an exclusive queue whose connection is gone", zap.String("queue", o.qe.name), zap.Error(err))
				}
			}
		}()
	}
	b.mu.Lock()
	conns := make([]*conn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	b.mu.Unlock()
	for _, c := range conns {
		go c.forceClose("definitions replaced by the cluster's snapshot; reconnect")
	}
}

// errRestoreFailed marks the definitions of a node that could not install
// its log's snapshot (DefinitionsBehind).
var errRestoreFailed = errors.New("broker: this node could not install the cluster's definitions snapshot and is behind the cluster's log")

// DefinitionsBehind returns why this node's definitions are behind its
// log (the last snapshot it was sent failed to install; the log retries),
// or "" when they are not.
func (b *Broker) DefinitionsBehind() string {
	if p := b.restoreErr.Load(); p != nil {
		return *p
	}
	return ""
}
