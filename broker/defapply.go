package broker

import (
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/exchange"
	"github.com/warrenmq/warren/store"
)

// The apply of definition commands (defcmd.go): the one place where
// vhosts, exchanges, queues and bindings (here) and users, permissions,
// policies and global parameters (defapply_admin.go) change. Each apply
// holds Broker.defMu, reads what it needs under vhost.mu (read) or
// Broker.mu, writes its records as one store batch holding defMu alone
// (defstore.go), and only then changes memory under the write locks: a
// failed write changes nothing, and nothing is visible before it is
// stored. Its decisions depend on the definitions state and the command
// only. What it starts or stops on this node besides (queue timers, stream
// goroutines, consumer cancellations, connections closed, messages
// dropped) follows the change.

// ApplyDefinition applies an encoded definition command; it implements
// DefinitionMachine. Calls are serialised on b.defMu.
func (b *Broker) ApplyDefinition(enc []byte) DefResult {
	c, err := decodeDefCmd(enc)
	if err != nil {
		return DefResult{err: err}
	}
	b.defMu.Lock()
	r, after := b.applyLocked(c)
	b.defMu.Unlock()
	if after != nil {
		after()
	}
	return r
}

// applyLocked applies c; after, when not nil, is to run once b.defMu is
// released. Hold b.defMu.
func (b *Broker) applyLocked(c *defCmd) (DefResult, func()) {
	switch c.Op {
	case opAddVHost:
		return b.applyAddVHost(c), nil
	case opDeleteVHost:
		return b.applyDeleteVHost(c)
	case opDeclareExchange:
		return b.applyDeclareExchange(c), nil
	case opDeleteExchange:
		return b.applyDeleteExchange(c), nil
	case opDeclareQueue:
		return b.applyDeclareQueue(c), nil
	case opDeleteQueue:
		return b.applyDeleteQueue(c), nil
	case opBind, opUnbind:
		return b.applyBind(c), nil
	case opPutUser:
		return b.applyPutUser(c), nil
	case opDeleteUser:
		return b.applyDeleteUser(c)
	case opSetPermissions:
		return b.applySetPermissions(c), nil
	case opClearPermissions:
		return b.applyClearPermissions(c), nil
	case opSetTopicPermissions:
		return b.applySetTopicPermissions(c), nil
	case opClearTopicPermissions:
		return b.applyClearTopicPermissions(c), nil
	case opSetPolicy:
		return b.applySetPolicy(c), nil
	case opClearPolicy:
		return b.applyClearPolicy(c), nil
	case opSetGlobal:
		return b.applySetGlobal(c), nil
	case opDeleteGlobal:
		return b.applyDeleteGlobal(c), nil
	case opSetUserLimits, opClearUserLimits:
		return b.applyUserLimits(c), nil
	case opSetVHostLimits, opClearVHostLimits:
		return b.applyVHostLimits(c), nil
	}
	return DefResult{err: fmt.Errorf("broker: unknown definition command %s", c.Op)}, nil
}

// liveVHost is the vhost a command names (the instance c.VHostID when
// set), or the error a client in a deleted vhost gets (320, as its
// connection is being closed for).
func (b *Broker) liveVHost(c *defCmd, cls, mth uint16) (*vhost, error) {
	name := c.VHost
	b.mu.Lock()
	v := b.vhosts[name]
	b.mu.Unlock()
	if v == nil || (c.VHostID != 0 && v.storeID != c.VHostID) {
		return nil, amqp.Errorf(amqp.ConnectionForced, cls, mth, "vhost '%s' is deleted", name)
	}
	return v, nil
}

func (b *Broker) applyAddVHost(c *defCmd) DefResult {
	b.mu.Lock()
	exists := b.vhosts[c.Name] != nil
	b.mu.Unlock()
	if exists {
		return DefResult{existed: true, err: fmt.Errorf("vhost %q: %w", c.Name, ErrExists)}
	}
	v := newVHost(b, c.Name)
	v.storeID = b.peekID(store.KindVHost)
	if err := b.storePut(&store.VHost{ID: v.storeID, Name: c.Name}); err != nil {
		return DefResult{err: err}
	}
	b.takeID(store.KindVHost, v.storeID)
	b.mu.Lock()
	b.vhosts[c.Name] = v
	b.mu.Unlock()
	return DefResult{id: v.storeID, v: v}
}

// applyDeleteVHost deletes a vhost, its exchanges, queues and messages,
// and the permissions on it; its connections are closed with 320 and its
// consumers cancelled once defMu is released.
func (b *Broker) applyDeleteVHost(c *defCmd) (DefResult, func()) {
	name := c.Name
	b.mu.Lock()
	v := b.vhosts[name]
	if v == nil {
		b.mu.Unlock()
		return DefResult{err: fmt.Errorf("vhost %q: %w", name, ErrNotFound)}, nil
	}
	// Every record of the vhost goes in one store batch, before anything
	// changes in memory.
	var dels []store.DefRef
	add := func(kind store.Kind, id uint64) {
		if id != 0 {
			dels = append(dels, store.DefRef{Kind: kind, ID: id})
		}
	}
	for _, u := range b.users {
		if p, ok := u.perms[name]; ok {
			add(store.KindPermission, p.storeID)
		}
		for k, tp := range u.topicPerms {
			if k.vhost == name {
				add(store.KindTopicPermission, tp.storeID)
			}
		}
	}
	b.mu.Unlock()
	v.mu.RLock()
	var deleted []string
	for _, qe := range v.queues {
		add(store.KindQueue, qe.storeID)
		deleted = append(deleted, "queue "+qe.name)
	}
	for _, ex := range v.exchanges {
		add(store.KindExchange, ex.storeID)
	}
	for _, set := range []map[string]*policy{v.policies.user, v.policies.operator} {
		for _, p := range set {
			add(store.KindPolicy, p.storeID)
		}
	}
	v.bindMu.Lock()
	for _, id := range v.bindingIDs {
		add(store.KindBinding, id)
	}
	v.bindMu.Unlock()
	v.mu.RUnlock()
	add(store.KindVHost, v.storeID)
	if err := b.storeDefs(nil, dels); err != nil {
		return DefResult{err: fmt.Errorf("broker: deleting vhost %q: %w", name, err)}, nil
	}

	b.mu.Lock()
	delete(b.vhosts, name)
	var conns []*conn
	for c := range b.conns {
		if c.vhostName() == name {
			conns = append(conns, c)
		}
	}
	for _, u := range b.users {
		delete(u.perms, name)
		for k := range u.topicPerms {
			if k.vhost == name {
				delete(u.topicPerms, k)
			}
		}
	}
	b.permGen.Add(1)
	b.mu.Unlock()
	type dropped struct {
		qe    *queueEntity
		conss []*consumer
	}
	var queues []dropped
	v.mu.Lock()
	for _, qe := range v.queues {
		_, conss := v.dropQueueLocked(qe, false)
		queues = append(queues, dropped{qe, conss})
	}
	for _, ex := range v.exchanges {
		if v.exchanges[ex.name] == ex {
			v.deleteExchangeLocked(ex)
		}
	}
	v.mu.Unlock()
	v.bindMu.Lock()
	clear(v.bindingIDs)
	v.bindMu.Unlock()
	for _, d := range queues {
		if d.qe.stream != nil {
			b.dropStream(d.qe)
		}
		b.dropQueueData(d.qe)
	}
	slices.Sort(deleted)
	return DefResult{id: v.storeID, deleted: deleted}, func() {
		for _, c := range conns {
			c.forceClose(fmt.Sprintf("vhost '%s' is deleted", name))
		}
		for _, d := range queues {
			for _, cons := range d.conss {
				cons.serverCancel()
			}
		}
	}
}

func (b *Broker) applyDeclareExchange(c *defCmd) DefResult {
	const cls, mth = amqp.ClassExchange, 10
	v, err := b.liveVHost(c, cls, mth)
	if err != nil {
		return DefResult{err: err}
	}
	args := decodeArgs(c.Args)
	xt, err := parseExchangeType(c.Type, args, cls, mth)
	if err != nil {
		return DefResult{err: err}
	}
	v.mu.RLock()
	if ex := v.exchanges[c.Name]; ex != nil {
		m := &amqp.ExchangeDeclare{Exchange: c.Name, Type: c.Type, Durable: c.Durable, AutoDelete: c.AutoDelete,
			Internal: c.Internal, Arguments: args}
		err := equivalentExchange(ex, m, v.name)
		v.mu.RUnlock()
		return DefResult{id: ex.storeID, existed: true, v: v, err: err}
	}
	// The reserved prefix only stops creation: an existing amq.* exchange
	// may be redeclared.
	if strings.HasPrefix(c.Name, "amq.") {
		v.mu.RUnlock()
		return DefResult{err: amqp.Errorf(amqp.AccessRefused, cls, mth,
			"exchange name '%s' contains reserved prefix 'amq.*'", c.Name)}
	}
	if err := checkName(c.Name, cls, mth); err != nil {
		v.mu.RUnlock()
		return DefResult{err: err}
	}
	ex := &exchangeEntity{
		name:       c.Name,
		kind:       xt.kind,
		plug:       xt.plug,
		durable:    c.Durable,
		autoDelete: c.AutoDelete,
		internal:   c.Internal,
		args:       args,
		router:     exchange.NewRouter(xt.kind),
		alternate:  v.alternateFor(c.Name, args),
	}
	v.mu.RUnlock()
	// Stored before it is visible.
	if ex.durable {
		ex.storeID = b.peekID(store.KindExchange)
		if err := b.storePut(exchangeRecord(v, ex, c.Args)); err != nil {
			return DefResult{err: storeError("exchange", err, cls, mth)}
		}
		b.takeID(store.KindExchange, ex.storeID)
	}
	b.attachDelayed(v, ex)
	v.mu.Lock()
	if old := v.exchanges[c.Name]; old != nil {
		old.gone = true
	}
	v.exchanges[c.Name] = ex
	v.mu.Unlock()
	return DefResult{id: ex.storeID, v: v}
}

func (b *Broker) applyDeleteExchange(c *defCmd) DefResult {
	const cls, mth = amqp.ClassExchange, 20
	b.mu.Lock()
	v := b.vhosts[c.VHost]
	b.mu.Unlock()
	if v == nil || (c.VHostID != 0 && v.storeID != c.VHostID) {
		return DefResult{}
	}
	v.mu.RLock()
	ex := v.exchanges[c.Name]
	if ex == nil {
		v.mu.RUnlock()
		return DefResult{}
	}
	if c.IfUnused && ex.router.Len() > 0 {
		v.mu.RUnlock()
		return DefResult{err: amqp.Errorf(amqp.PreconditionFailed, cls, mth, "exchange '%s' in vhost '%s' in use", c.Name, v.name)}
	}
	r := v.newRemoval()
	r.deleteExchange(ex)
	keys, dels := r.records()
	v.mu.RUnlock()
	if err := b.storeDefs(nil, dels); err != nil {
		return DefResult{err: storeError("exchange deletion", err, cls, mth)}
	}
	v.mu.Lock()
	v.deleteExchangeLocked(ex)
	v.mu.Unlock()
	v.dropBindingIDs(keys)
	return DefResult{id: ex.storeID, deleted: r.deletedNames()}
}

// applyDeclareQueue creates a queue, or finds the one of that name (then
// existed is set and the declarer checks equivalence and exclusivity).
func (b *Broker) applyDeclareQueue(c *defCmd) DefResult {
	const cls, mth = amqp.ClassQueue, 10
	v, err := b.liveVHost(c, cls, mth)
	if err != nil {
		return DefResult{err: err}
	}
	args := decodeArgs(c.Args)
	v.mu.RLock()
	if qe := v.queues[c.Name]; qe != nil {
		v.mu.RUnlock()
		return DefResult{id: qe.id, existed: true, qe: qe, v: v}
	}
	if err := v.queueLimitLocked(c.Name); err != nil {
		v.mu.RUnlock()
		return DefResult{err: err}
	}
	// RabbitMQ checks the arguments of a new queue only (an existing one
	// is compared for equivalence instead).
	settings, err := parseQueueArgs(c.Name, v.name, args)
	if err == nil && (settings.stream != nil || settings.quorum) {
		err = b.checkStreamDeclare(c.Name, v.name, c.Durable, &amqp.QueueDeclare{
			Queue: c.Name, Durable: c.Durable, Exclusive: c.Exclusive, AutoDelete: c.AutoDelete, Arguments: args})
	}
	if err != nil {
		v.mu.RUnlock()
		return DefResult{err: err}
	}
	qe := &queueEntity{
		name:       c.Name,
		vhost:      v,
		durable:    c.Durable,
		exclusive:  c.Exclusive,
		autoDelete: c.AutoDelete,
		args:       args,
		id:         b.peekID(store.KindQueue),
	}
	qe.initFeatures(v.withPolicies(c.Name, args, settings))
	v.mu.RUnlock()
	qe.homeNode = c.Node
	if !qe.setRepl(c.Node) && !b.local(c.Node) {
		qe.home = &remoteHome{node: c.Node, peer: b.peer(c.Node)}
	}
	if c.Exclusive && qe.home == nil {
		qe.ownerID = c.Owner
		b.mu.Lock()
		qe.owner = b.connIDs[c.Owner]
		b.mu.Unlock()
	}
	// Stored before it is visible: a publisher that finds it journals
	// under its store id.
	if qe.durable && b.cfg.Store != nil {
		qe.storeID = qe.id
		if err := b.storePut(queueRecord(v, qe, c.Args)); err != nil {
			return DefResult{err: storeError("queue", err, cls, mth)}
		}
	}
	b.takeID(store.KindQueue, qe.id)
	v.mu.Lock()
	v.queues[c.Name] = qe
	v.mu.Unlock()
	b.mgmt.queuesCreated.Add(1)
	if qe.home != nil || qe.repl != nil {
		// Its timers and streams run on its home node.
		return DefResult{id: qe.id, qe: qe, v: v}
	}
	qe.armUnused()
	if qe.stream != nil {
		qe.stream.start(b)
	}
	return DefResult{id: qe.id, qe: qe, v: v}
}

// applyDeleteQueue removes a queue (the instance c.ID when set), its
// bindings, the auto-delete exchanges left without bindings, and its
// consumers (who are told with basic.cancel when their client understands
// it). The store records go first, as one batch; if that fails nothing
// changes and the error is 541, unless c.Force lets a transient queue go
// without the cascade.
func (b *Broker) applyDeleteQueue(c *defCmd) DefResult {
	const cls, mth = amqp.ClassQueue, 40
	b.mu.Lock()
	v := b.vhosts[c.VHost]
	b.mu.Unlock()
	if v == nil || (c.VHostID != 0 && v.storeID != c.VHostID) {
		return DefResult{}
	}
	v.mu.RLock()
	qe := v.queues[c.Name]
	if qe == nil || (c.ID != 0 && qe.id != c.ID) {
		v.mu.RUnlock()
		return DefResult{}
	}
	r := v.newRemoval()
	r.removeQueue(qe)
	keys, dels := r.records()
	v.mu.RUnlock()
	cascade := true
	if err := b.storeDefs(nil, dels); err != nil {
		if !c.Force || qe.durable {
			return DefResult{err: storeError("queue deletion", err, cls, mth)}
		}
		// A transient queue has no records of its own, nor have its
		// bindings: only the cascade's are left undone.
		b.log.Error("deleting the records of an exclusive queue's auto-delete exchanges",
			zap.String("queue", qe.name), zap.Error(err))
		keys, cascade = nil, false
	}
	v.mu.Lock()
	n, conss := v.dropQueueLocked(qe, cascade)
	v.mu.Unlock()
	v.dropBindingIDs(keys)
	if qe.stream != nil {
		b.dropStream(qe)
	} else if qe.repl != nil && b.replicated() && b.cfg.QuorumGroups.Leader(qe.repl.group) {
		// The queue's state in its group goes too, whichever node the
		// deletion came through (one with no replica of the queue cannot
		// propose to its group): the group's leader proposes it. A second
		// proposal (the deleting node's) finds nothing to delete.
		if p := b.proposer(qe.repl.group); p != nil {
			p.submit(GroupDeleteCmd(qe.repl.key), nil)
		}
	}
	if !qe.mayHoldData() {
		// Nothing of it in the store: no flush nor scan to wait for.
	} else if b.defQueued {
		// A command of a replicated log: its apply does not wait for the
		// store (storeDefs). The messages' deletion waits for a group
		// commit (store.RemoveQueue flushes first); queue ids are never
		// reused, so it may finish after the next commands are applied.
		b.drops.Add(1)
		go func() {
			defer b.drops.Done()
			b.dropQueueData(qe)
		}()
	} else {
		b.dropQueueData(qe)
	}
	for _, cons := range conss {
		cons.serverCancel()
	}
	deleted := []string{"queue " + qe.name}
	if cascade {
		deleted = append(deleted, r.deletedNames()...)
	}
	return DefResult{id: qe.id, deleted: deleted, dropped: n}
}

// applyBind binds (opBind) or unbinds a queue, or an exchange when
// c.ToExchange, to c.Source: the checks in RabbitMQ's order (source,
// destination, exclusive access for c.Owner, arguments), then the store,
// then memory. As in RabbitMQ, unbinding is idempotent: a source,
// destination or binding that does not exist is no error, and exclusive
// access is checked only for a binding there is to remove.
func (b *Broker) applyBind(c *defCmd) DefResult {
	bind := c.Op == opBind
	cls, mth := uint16(amqp.ClassQueue), uint16(20)
	switch {
	case c.ToExchange && bind:
		cls, mth = amqp.ClassExchange, 30
	case c.ToExchange:
		cls, mth = amqp.ClassExchange, 40
	case !bind:
		mth = 50
	}
	v, err := b.liveVHost(c, cls, mth)
	if err != nil {
		return DefResult{err: err}
	}
	args := decodeArgs(c.Args)
	v.mu.RLock()
	ex := v.exchanges[c.Source]
	if ex == nil {
		v.mu.RUnlock()
		if !bind {
			return DefResult{} // as RabbitMQ: unbinding what does not exist is done
		}
		return DefResult{err: notFoundExchange(c.Source, v.name, cls, mth)}
	}
	var durable, locked bool
	var lockedName string
	dest := exchange.Destination{Kind: exchange.DestQueue, Name: c.Dest}
	if c.ToExchange {
		d := v.exchanges[c.Dest]
		if d == nil {
			v.mu.RUnlock()
			if !bind {
				return DefResult{}
			}
			return DefResult{err: notFoundExchange(c.Dest, v.name, cls, mth)}
		}
		dest.Kind = exchange.DestExchange
		durable = ex.durable && d.durable
	} else {
		qe := v.queues[c.Dest]
		if qe == nil {
			v.mu.RUnlock()
			if !bind {
				return DefResult{}
			}
			return DefResult{err: notFoundQueue(c.Dest, v.name, cls, mth)}
		}
		locked, lockedName = qe.exclusive && qe.ownerID != c.Owner, qe.name
		durable = ex.durable && qe.durable
	}
	if locked && bind {
		v.mu.RUnlock()
		return DefResult{err: resourceLocked(lockedName, v.name, cls, mth)}
	}
	if bind {
		if err := validateBindArgs(ex, c.Key, args, bind, cls, mth); err != nil {
			v.mu.RUnlock()
			return DefResult{err: err}
		}
	}
	bn := exchange.Binding{Destination: dest, Key: c.Key, Args: args}
	k := newBindingKey(bn, c.Source)
	if bind {
		exists := ex.router.Has(bn)
		v.mu.RUnlock()
		if exists {
			return DefResult{existed: true}
		}
		var id uint64
		if durable {
			v.bindMu.Lock()
			_, recorded := v.bindingIDs[k]
			v.bindMu.Unlock()
			if !recorded {
				id = b.peekID(store.KindBinding)
				if err := b.storePut(bindingRecord(id, v, c.Source, bn, c.Args)); err != nil {
					return DefResult{err: storeError("binding", err, cls, mth)}
				}
				b.takeID(store.KindBinding, id)
			}
		}
		v.mu.Lock()
		ex.partitionKeys.Store(nil)
		ex.router.Bind(bn)
		v.mu.Unlock()
		v.addBindingID(k, id)
		return DefResult{id: id}
	}
	if !ex.router.Has(bn) {
		v.mu.RUnlock()
		return DefResult{}
	}
	// RabbitMQ checks exclusive access to the queue only for a binding
	// there is to remove.
	if locked {
		v.mu.RUnlock()
		return DefResult{err: resourceLocked(lockedName, v.name, cls, mth)}
	}
	r := v.newRemoval()
	r.unbind(ex, k)
	keys, dels := r.records()
	v.mu.RUnlock()
	if err := b.storeDefs(nil, dels); err != nil {
		return DefResult{err: storeError("unbinding", err, cls, mth)}
	}
	v.mu.Lock()
	ex.partitionKeys.Store(nil)
	ex.router.Unbind(bn)
	v.autoDeleteLocked(ex)
	v.mu.Unlock()
	v.dropBindingIDs(keys)
	return DefResult{deleted: r.deletedNames()}
}
