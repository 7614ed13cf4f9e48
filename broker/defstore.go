package broker

import (
	"encoding/json"
	"fmt"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/exchange"
	"github.com/warrenmq/warren/store"
)

// Persistence of definitions: the store records an applied command writes,
// and the ids it gives them. The apply (defapply.go) writes a command's
// records as one store batch (one sync) holding Broker.defMu alone, and
// changes memory only once they are stored, so a failed write changes
// nothing. Record ids come from the definitions' own counters
// (Broker.lastID, part of the definitions state and of their snapshot), not
// from the store's: every node applying the same commands gives the same
// ids. The store still keeps its counters (a Put with an id raises them),
// and a broker recovering from it goes on from them, so ids in a data dir
// written before keep their meaning and none is reused.

// peekID is the id the next record of kind gets. It is taken (takeID) once
// the record is stored; a write that fails leaves the counter as it was.
// Hold b.defMu.
func (b *Broker) peekID(kind store.Kind) uint64 { return b.lastID[kind] + 1 }

// takeID records that id of kind is used. Hold b.defMu.
func (b *Broker) takeID(kind store.Kind, id uint64) {
	b.lastID[kind] = max(b.lastID[kind], id)
}

// storeDefs writes a definition change, puts and deletions, as one store
// batch (one sync). Hold b.defMu and no vhost or queue lock: the change is
// made in memory only once it is stored, so a failed write changes nothing.
//
// A command of a replicated log (b.defQueued) is durable in that log before
// it is applied, so its store write is queued (store.UpdateAppliedQueued)
// and not waited for: the state machine applies the next command at once,
// and many commands share one sync with the log's own appends. The store
// writes queued changes in order, and ahead of any journal append made after
// them (a message to a queue just declared), and records the index of the
// last change written, so a node killed before its queued changes were
// written applies them again from its log when it restarts. A queued write
// that fails leaves the stored definitions behind memory: it is logged, no
// later change is stored (the stored state stays that of the last index
// recorded, which a restart catches up from the log, and no snapshot is
// taken: RecordDefinitionsApplied fails).
func (b *Broker) storeDefs(puts []any, dels []store.DefRef) error {
	st := b.cfg.Store
	if st == nil || (len(puts) == 0 && len(dels) == 0) {
		return nil
	}
	if !b.defQueued {
		return st.UpdateApplied(b.defIndex.Load(), puts, dels)
	}
	if b.defStoreFailed.Load() {
		return nil
	}
	index := b.defIndex.Load()
	return st.UpdateAppliedQueued(index, puts, dels, func(err error) {
		if err != nil && !b.defStoreFailed.Swap(true) {
			b.log.Error("a replicated definition change was not stored: later ones are not stored either; restart the node to store them again from the cluster's log",
				zap.Uint64("index", index), zap.Error(err))
		}
	})
}

// storePut stores one record (no-op without a store).
func (b *Broker) storePut(rec any) error { return b.storeDefs([]any{rec}, nil) }

// storeError is the channel-method error for a change that was not stored.
func storeError(what string, err error, cls, mth uint16) error {
	return amqp.Errorf(amqp.InternalError, cls, mth, "storing %s: %v", what, err)
}

// exchangeRecord is the store record of ex, a durable exchange of v.
func exchangeRecord(v *vhost, ex *exchangeEntity, args []byte) *store.Exchange {
	return &store.Exchange{ID: ex.storeID, VHost: v.name, Name: ex.name, Type: ex.typeName(), Durable: true,
		AutoDelete: ex.autoDelete, Internal: ex.internal, Args: args}
}

// queueRecord is the store record of qe, a durable queue of v.
func queueRecord(v *vhost, qe *queueEntity, args []byte) *store.Queue {
	return &store.Queue{ID: qe.storeID, VHost: v.name, Name: qe.name, Durable: true, Exclusive: qe.exclusive,
		AutoDelete: qe.autoDelete, Args: args, Type: qe.typeName(), Node: qe.node()}
}

// bindingRecord is the store record of binding bn from source in v.
func bindingRecord(id uint64, v *vhost, source string, bn exchange.Binding, args []byte) *store.Binding {
	return &store.Binding{ID: id, VHost: v.name, Source: source, Destination: bn.Destination.Name,
		DestinationIsExchange: bn.Destination.Kind == exchange.DestExchange, RoutingKey: bn.Key, Args: args}
}

// policyRecord is the store record of p, a policy of v.
func policyRecord(v *vhost, p *policy, def []byte) *store.Policy {
	return &store.Policy{ID: p.storeID, VHost: v.name, Name: p.name, Pattern: p.pattern, ApplyTo: p.applyTo,
		Priority: p.priority, Definition: def, Operator: p.operator}
}

// decodePolicyDefinition reads a policy definition's JSON: integral numbers
// become int64, others float64, as the management API gives them.
func decodePolicyDefinition(raw []byte) (map[string]any, error) {
	var def map[string]any
	if err := json.Unmarshal(raw, &def); err != nil {
		return nil, fmt.Errorf("%w: definition: %v", ErrInvalidPolicy, err)
	}
	for k, v := range def {
		if f, ok := v.(float64); ok && f == float64(int64(f)) && f > -(1<<53) && f < 1<<53 {
			def[k] = int64(f)
		}
	}
	return def, nil
}

// takeRecordIDs makes the counters go on from every id in defs. Hold
// b.defMu.
func (b *Broker) takeRecordIDs(defs *store.Definitions) {
	for _, r := range defs.VHosts {
		b.takeID(store.KindVHost, r.ID)
	}
	for _, r := range defs.Users {
		b.takeID(store.KindUser, r.ID)
	}
	for _, r := range defs.Permissions {
		b.takeID(store.KindPermission, r.ID)
	}
	for _, r := range defs.TopicPermissions {
		b.takeID(store.KindTopicPermission, r.ID)
	}
	for _, r := range defs.Exchanges {
		b.takeID(store.KindExchange, r.ID)
	}
	for _, r := range defs.Queues {
		b.takeID(store.KindQueue, r.ID)
	}
	for _, r := range defs.Bindings {
		b.takeID(store.KindBinding, r.ID)
	}
	for _, r := range defs.Policies {
		b.takeID(store.KindPolicy, r.ID)
	}
	for _, r := range defs.GlobalParameters {
		b.takeID(store.KindGlobalParameter, r.ID)
	}
}
