package broker

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/exchange"
	"github.com/warrenmq/warren/queue"
	"github.com/warrenmq/warren/store"
)

// Durability: with a store configured, durable exchanges, queues and
// bindings, users, vhosts, permissions and topic permissions are written
// to it, and
// persistent messages routed to durable queues are journaled before they
// are confirmed. Without one, everything lives in memory.
//
// Definition changes are serialised by Broker.defMu (taken before vhost.mu)
// so that the synchronous store write happens with no vhost lock held and
// publishers keep routing meanwhile. Each change is stored first, as one
// store batch, and made in memory only once stored: a queue or exchange is
// visible (and a queue journals under its store id) only once its record
// is on disk, and a change whose write fails is answered with an error
// (541) and leaves memory as it was. Nothing but a defMu holder changes the
// topology, so what the change planned under vhost.mu (read) before its
// write is still what it applies after.

// bindingKey identifies a binding for its store record.
type bindingKey struct {
	source, dest string
	destIsEx     bool
	key, args    string
}

// encodeArgs encodes the arguments of a definition for its store record.
func encodeArgs(t amqp.Table) ([]byte, error) {
	if len(t) == 0 {
		return nil, nil
	}
	b, err := t.AppendTo(nil)
	if err != nil {
		return nil, fmt.Errorf("encoding arguments: %w", err)
	}
	return b, nil
}

func decodeArgs(b []byte) amqp.Table {
	if len(b) == 0 {
		return nil
	}
	t, _, err := amqp.DecodeTable(b)
	if err != nil {
		return nil
	}
	return t
}

// newBindingKey is b's key in vhost.bindingIDs. Arguments that do not
// encode (refused before such a binding is stored) key as "".
func newBindingKey(b exchange.Binding, source string) bindingKey {
	args, _ := encodeArgs(b.Args)
	return bindingKey{
		source:   source,
		dest:     b.Destination.Name,
		destIsEx: b.Destination.Kind == exchange.DestExchange,
		key:      b.Key,
		args:     string(args),
	}
}

// recover loads the definitions and the messages of durable queues. On a
// store that holds no vhost and no user it creates the default ones.
func (b *Broker) recover() error {
	st := b.cfg.Store
	if st == nil {
		return nil
	}
	defs, err := st.LoadDefinitions()
	if err != nil {
		return fmt.Errorf("broker: loading definitions: %w", err)
	}
	if defs.Corrupt > 0 {
		b.log.Warn("skipped corrupt definition records", zap.Int("count", defs.Corrupt))
	}
	applied, err := st.DefinitionsApplied()
	if err != nil {
		return fmt.Errorf("broker: loading definitions: %w", err)
	}
	b.storedApplied.Store(applied)
	if len(defs.VHosts) == 0 && len(defs.Users) == 0 {
		b.defMu.Lock()
		for k, id := range st.LastIDs() {
			b.takeID(k, id)
		}
		b.defMu.Unlock()
		return b.seedDefaults()
	}
	b.defMu.Lock()
	defer b.defMu.Unlock()
	b.mu.Lock()
	err = b.installDefinitionsLocked(defs, st.LastIDs(), true, nil)
	b.mu.Unlock()
	if err != nil {
		return err
	}
	return b.recoverDelayed()
}

// installDefinitionsLocked replaces the definitions in memory with defs:
// at recovery (recovering) from the store, with the messages of durable
// queues, or from a snapshot. The id counters go on from lastIDs and from
// the ids in defs. The queues in keep (by "vhost\x00name") stay as they
// are where defs lists them with the same id (a snapshot restored over a
// node's queues, defrestore.go). Hold b.defMu and b.mu.
func (b *Broker) installDefinitionsLocked(defs *store.Definitions, lastIDs map[store.Kind]uint64, recovering bool, keep map[string]*queueEntity) error {
	st := b.cfg.Store
	clear(b.vhosts)
	clear(b.users)
	b.lastID = [len(b.lastID)]uint64{}
	for k, id := range lastIDs {
		if int(k) < len(b.lastID) {
			b.takeID(k, id)
		}
	}
	defer b.takeRecordIDs(defs)
	for _, v := range defs.VHosts {
		vh := newVHost(b, v.Name)
		vh.storeID = v.ID
		vh.setLimitsLocked(v.Limits)
		b.vhosts[v.Name] = vh
	}
	b.recoverPolicies(defs.Policies)
	b.recoverGlobalsLocked(defs.GlobalParameters)
	for _, u := range defs.Users {
		b.users[u.Name] = &user{name: u.Name, hash: u.PasswordHash, algorithm: u.HashAlgorithm, tags: u.Tags,
			limits: u.Limits, storeID: u.ID}
	}
	b.noteChannelLimitsLocked()
	for _, ex := range defs.Exchanges {
		v := b.vhosts[ex.VHost]
		if v == nil {
			continue
		}
		xt, err := parseExchangeType(ex.Type, decodeArgs(ex.Args), amqp.ClassExchange, 10)
		if err != nil {
			b.log.Warn("skipped exchange of unknown type", zap.String("exchange", ex.Name), zap.String("type", ex.Type), zap.Error(err))
			continue
		}
		e := &exchangeEntity{
			name: ex.Name, kind: xt.kind, plug: xt.plug, durable: ex.Durable || recovering, autoDelete: ex.AutoDelete, internal: ex.Internal,
			args: decodeArgs(ex.Args), router: exchange.NewRouter(xt.kind),
			alternate: v.alternateFor(ex.Name, decodeArgs(ex.Args)),
		}
		if e.durable {
			e.storeID = ex.ID
		}
		b.attachDelayed(v, e)
		if old := v.exchanges[ex.Name]; old != nil {
			old.gone = true
		}
		v.exchanges[ex.Name] = e
	}
	for _, q := range defs.Queues {
		v := b.vhosts[q.VHost]
		if v == nil || (recovering && q.Exclusive) {
			// Exclusive queues die with their connection, and so with the node.
			if recovering {
				if err := b.dropQueueRecord(q.ID); err != nil {
					return err
				}
			}
			continue
		}
		if kq := keep[q.VHost+"\x00"+q.Name]; kq != nil && kq.id == q.ID {
			// A queue of this node that a snapshot restore keeps, with
			// its messages (restoreDefinitions).
			kq.mu.Lock()
			kq.vhost = v
			kq.mu.Unlock()
			v.queues[q.Name] = kq
			continue
		}
		qe := &queueEntity{
			name: q.Name, vhost: v, durable: q.Durable || recovering, autoDelete: q.AutoDelete,
			exclusive: q.Exclusive, args: decodeArgs(q.Args), id: q.ID,
		}
		if qe.durable {
			qe.storeID, qe.stored = q.ID, true
		}
		qe.initFeatures(v.recoveredSettings(q.Name, qe.args))
		qe.homeNode = q.Node
		if !qe.setRepl(q.Node) && !b.local(q.Node) {
			qe.home = &remoteHome{node: q.Node, peer: b.peer(q.Node)}
		}
		v.queues[q.Name] = qe
		if qe.home != nil || qe.repl != nil {
			continue
		}
		if !recovering {
			qe.armUnusedLocked()
			if qe.stream != nil {
				qe.stream.start(b)
			}
			continue
		}
		if qe.stream != nil {
			if err := b.recoverStream(qe); err != nil {
				return fmt.Errorf("broker: recovering stream %q: %w", q.Name, err)
			}
			continue
		}
		now := nowMs()
		keep, keepBytes := b.pageWindow()
		grouped := qe.q.Config().GroupHeader != "" // never paged out (queue/groups.go)
		stats, err := st.ScanQueue(q.ID, func(seq uint64, m *store.Message) error {
			_, prio := peekModePriority(m.Header)
			msg := &queue.Message{
				Exchange: m.Exchange, RoutingKey: m.RoutingKey,
				Header: m.Header, Body: m.Body, Persistent: true, Priority: prio,
			}
			e := queue.Entry{
				Msg:         msg,
				Seq:         seq,
				Redelivered: m.Deliveries > 0,
				Deliveries:  m.Deliveries,
				Expires:     recoveredExpires(qe.recoveredExpiry(msg, now), m.Expires),
			}
			if qe.dedup != nil {
				if k, _, ok := queue.DedupKeyOf(m.Header); ok {
					qe.q.Dedup().Add(k, seq, 0, nil) // in the queue: no window
				}
			}
			if n, bytes := qe.q.Resident(); !grouped && (n >= keep || bytes+int64(len(m.Body)) > keepBytes) {
				// Beyond the window only the index stays in RAM.
				e.Msg, e.Size = nil, len(m.Body)
				qe.q.RestorePaged(e, prio)
				return nil
			}
			qe.q.Restore(e)
			return nil
		})
		if err != nil {
			return fmt.Errorf("broker: recovering queue %q: %w", q.Name, err)
		}
		if stats.Corrupt > 0 {
			b.log.Warn("skipped corrupt message records", zap.String("queue", q.Name), zap.Int("count", stats.Corrupt))
		}
		if err := b.loadQueueDedup(qe, now); err != nil {
			return fmt.Errorf("broker: recovering the deduplication cache of queue %q: %w", q.Name, err)
		}
		b.log.Debug("recovered queue", zap.String("queue", q.Name), zap.Int("messages", stats.Messages))
		qe.armExpiryLocked()
		qe.armUnusedLocked()
	}
	for _, bd := range defs.Bindings {
		v := b.vhosts[bd.VHost]
		if v == nil {
			continue
		}
		src := v.exchanges[bd.Source]
		kind := exchange.DestQueue
		if bd.DestinationIsExchange {
			kind = exchange.DestExchange
		}
		_, destOK := v.queues[bd.Destination]
		if kind == exchange.DestExchange {
			_, destOK = v.exchanges[bd.Destination]
		}
		if src == nil || !destOK {
			if !recovering {
				continue
			}
			if err := st.Delete(store.KindBinding, bd.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
				b.log.Warn("deleting the record of a binding whose ends are gone", zap.Uint64("id", bd.ID), zap.Error(err))
			}
			continue
		}
		bn := exchange.Binding{Destination: exchange.Destination{Kind: kind, Name: bd.Destination}, Key: bd.RoutingKey, Args: decodeArgs(bd.Args)}
		src.router.Bind(bn)
		if bd.ID != 0 {
			v.bindingIDs[newBindingKey(bn, bd.Source)] = bd.ID
		}
	}
	for _, p := range defs.Permissions {
		if u := b.users[p.User]; u != nil {
			u.setPermission(p.VHost, permission{configure: p.Configure, write: p.Write, read: p.Read, storeID: p.ID})
		}
	}
	for _, p := range defs.TopicPermissions {
		u := b.users[p.User]
		if u == nil || b.vhosts[p.VHost] == nil {
			continue
		}
		tp, err := newTopicPermission(p.User, p.VHost, p.Write, p.Read)
		if err != nil {
			b.log.Warn("skipped topic permission with an invalid pattern", zap.String("user", p.User),
				zap.String("vhost", p.VHost), zap.String("exchange", p.Exchange), zap.Error(err))
			continue
		}
		tp.storeID = p.ID
		if u.topicPerms == nil {
			u.topicPerms = make(map[topicPermKey]topicPermission)
		}
		u.topicPerms[topicPermKey{p.VHost, p.Exchange}] = tp
	}
	return nil
}

func (b *Broker) dropQueueRecord(id uint64) error {
	st := b.cfg.Store
	if err := st.RemoveQueue(id); err != nil {
		return err
	}
	if err := st.Delete(store.KindQueue, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// seedDefaults stores the default vhost and user of a new store.
func (b *Broker) seedDefaults() error {
	st := b.cfg.Store
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, v := range b.vhosts {
		rec := &store.VHost{ID: v.storeID, Name: v.name}
		if _, err := st.Put(rec); err != nil {
			return err
		}
		v.storeID = rec.ID
	}
	for _, u := range b.users {
		rec := &store.User{ID: u.storeID, Name: u.name, PasswordHash: u.hash, HashAlgorithm: u.algorithm, Tags: u.tags}
		if _, err := st.Put(rec); err != nil {
			return err
		}
		u.storeID = rec.ID
		for vname, p := range u.perms {
			prec := &store.Permission{ID: p.storeID, User: u.name, VHost: vname, Configure: p.configure, Write: p.write, Read: p.read}
			if _, err := st.Put(prec); err != nil {
				return err
			}
			p.storeID = prec.ID
			u.perms[vname] = p
		}
	}
	return nil
}

// dropQueueData deletes the journaled and spilled messages of qe, whose
// record is deleted. No lock held.
func (b *Broker) dropQueueData(qe *queueEntity) {
	st := b.cfg.Store
	if st == nil || !qe.mayHoldData() {
		return
	}
	if qe.storeID != 0 {
		if err := st.RemoveQueue(qe.storeID); err != nil {
			b.log.Error("deleting queue messages", zap.String("queue", qe.name), zap.Error(err))
		}
	}
	qe.mu.Lock()
	pageID := qe.pageID
	qe.mu.Unlock()
	if pageID != 0 {
		if err := st.RemoveSpilled(pageID); err != nil {
			b.log.Error("deleting spilled messages", zap.String("queue", qe.name), zap.Error(err))
		}
	}
}

// mayHoldData reports whether the store may hold messages of qe: not for
// a remote entry (they are on its home node), nor for a classic queue
// that never journaled a message nor spilled one. A deletion skips the
// store's flush and scan (dropQueueData) for the others.
func (qe *queueEntity) mayHoldData() bool {
	if qe.home != nil {
		return false
	}
	if qe.repl != nil || qe.stream != nil {
		return true
	}
	qe.mu.Lock()
	defer qe.mu.Unlock()
	return qe.stored || qe.pageID != 0
}

// addBindingID keeps the record id of the binding k (none when id is 0).
func (v *vhost) addBindingID(k bindingKey, id uint64) {
	if id == 0 {
		return
	}
	v.bindMu.Lock()
	v.bindingIDs[k] = id
	v.bindMu.Unlock()
}

// journal writes a persistent message bound for a durable queue; done
// runs once it is on disk. Hold qe.mu (journal order = queue order).
//
// expires (unix ms, 0 = none) is kept with the message so that its TTL
// keeps counting across a restart.
func (b *Broker) journal(qe *queueEntity, seq uint64, msg *queue.Message, expires int64, done func(error)) bool {
	st := b.cfg.Store
	if !qe.journaled(msg) {
		return false
	}
	qe.stored = true
	st.Append(qe.storeID, seq, &store.Message{
		Exchange: msg.Exchange, RoutingKey: msg.RoutingKey, Header: msg.Header, Body: msg.Body, Expires: expires,
	}, done)
	return true
}

// appendFailed is the store's report that message seq of the queue with
// store id queueID could not be journaled (its publisher, if confirming,
// got a nack): the queue lets it go, so that what it holds is what a
// restart recovers. Journal writer goroutine: the work is handed to a
// goroutine of its own (counted with the pagers, which Close waits for),
// as the writer must not take queue locks.
func (b *Broker) appendFailed(queueID, seq uint64, err error) {
	b.goPager(func() { b.dropUnjournaled(queueID, seq, err) })
}

// dropUnjournaled removes message seq, not journaled, from the queue with
// store id queueID if it is still ready there. A message already delivered
// is left to its consumer. No lock held.
func (b *Broker) dropUnjournaled(queueID, seq uint64, err error) {
	var qe *queueEntity
	b.mu.Lock()
	for _, v := range b.vhosts {
		v.mu.RLock()
		for _, q := range v.queues {
			if q.storeID == queueID && q.durable {
				qe = q
			}
		}
		v.mu.RUnlock()
	}
	b.mu.Unlock()
	if qe == nil {
		return
	}
	qe.mu.Lock()
	dropped := !qe.deleted && qe.q.DropReady(seq)
	qe.mu.Unlock()
	b.log.Warn("message not journaled", zap.String("vhost", qe.vhost.name), zap.String("queue", qe.name),
		zap.Uint64("seq", seq), zap.Bool("dropped", dropped), zap.Error(err))
}

// unjournal removes a settled message's record: its spilled copy, or its
// journal record (a paged-out message, Msg nil, that was not spilled is
// journaled). Hold qe.mu.
func (b *Broker) unjournal(qe *queueEntity, e queue.Entry) {
	st := b.cfg.Store
	switch {
	case st == nil:
	case e.Spilled:
		st.Unspill(qe.pageID, e.Seq)
	case e.Msg == nil && qe.durable, e.Msg != nil && qe.journaled(e.Msg):
		st.Remove(qe.storeID, e.Seq)
	}
}

// markDelivered records a delivery of a journaled message: the first, so a
// restart reports it redelivered, and on a quorum queue or under a delivery
// limit every one, so that x-delivery-count and x-delivery-limit go on
// counting after a restart. The store batches the marks (no sync of their
// own) and writes only the last of a message's marks pending. Hold qe.mu.
func (b *Broker) markDelivered(qe *queueEntity, e queue.Entry) {
	if st := b.cfg.Store; qe.journaled(e.Msg) && (e.Deliveries == 1 || qe.quorum || qe.q.Config().DeliveryLimit >= 0) {
		st.MarkDelivered(qe.storeID, e.Seq, e.Deliveries)
	}
}

// journalDelivery records a delivery of a journaled message: a no-ack
// delivery settles it, a first delivery marks it. Hold qe.mu.
func (qe *queueEntity) journalDelivery(noAck bool, e *queue.Entry) {
	b := qe.vhost.b
	if !qe.journaled(e.Msg) {
		return
	}
	if noAck {
		b.unjournal(qe, *e)
	} else {
		b.markDelivered(qe, *e)
	}
}

// recoveredExpires prefers the expiry journaled with a message; records
// without one get it recomputed from the recovery time.
func recoveredExpires(recomputed, journaled int64) int64 {
	if journaled > 0 {
		return journaled
	}
	return recomputed
}
