package broker

import (
	"fmt"
	"maps"
	"regexp"
	"slices"

	"github.com/warrenmq/warren/store"
)

// The apply of the definition commands for users, permissions, topic
// permissions, policies and global parameters (see defapply.go). The
// handlers (admin.go, policy.go, globals.go) validate patterns and values
// before proposing; the apply checks what depends on the state (the user,
// the vhost) and assigns the ids.

func (b *Broker) applyPutUser(c *defCmd) DefResult {
	b.mu.Lock()
	var id uint64
	existed := false
	var limits map[string]int64
	if u := b.users[c.Name]; u != nil {
		id, existed, limits = u.storeID, true, maps.Clone(u.limits)
	}
	b.mu.Unlock()
	if id == 0 {
		id = b.peekID(store.KindUser)
	}
	hash, tags := slices.Clone(c.Hash), slices.Clone(c.Tags)
	rec := &store.User{ID: id, Name: c.Name, PasswordHash: hash, HashAlgorithm: c.HashAlgorithm, Tags: tags, Limits: limits}
	if err := b.storePut(rec); err != nil {
		return DefResult{err: err}
	}
	b.takeID(store.KindUser, id)
	b.mu.Lock()
	u := b.users[c.Name]
	if u == nil {
		u = &user{name: c.Name}
		b.users[c.Name] = u
	}
	u.hash, u.algorithm, u.tags, u.storeID = hash, c.HashAlgorithm, tags, id
	b.mu.Unlock()
	return DefResult{id: id, existed: existed}
}

// applyDeleteUser deletes a user and its permissions; its connections are
// closed with 320 once defMu is released.
func (b *Broker) applyDeleteUser(c *defCmd) (DefResult, func()) {
	name := c.Name
	b.mu.Lock()
	u := b.users[name]
	if u == nil {
		b.mu.Unlock()
		return DefResult{err: fmt.Errorf("user %q: %w", name, ErrNotFound)}, nil
	}
	var dels []store.DefRef
	for _, p := range u.perms {
		if p.storeID != 0 {
			dels = append(dels, store.DefRef{Kind: store.KindPermission, ID: p.storeID})
		}
	}
	for _, tp := range u.topicPerms {
		if tp.storeID != 0 {
			dels = append(dels, store.DefRef{Kind: store.KindTopicPermission, ID: tp.storeID})
		}
	}
	if u.storeID != 0 {
		dels = append(dels, store.DefRef{Kind: store.KindUser, ID: u.storeID})
	}
	b.mu.Unlock()
	if err := b.storeDefs(nil, dels); err != nil {
		return DefResult{err: fmt.Errorf("broker: deleting user %q: %w", name, err)}, nil
	}
	b.mu.Lock()
	delete(b.users, name)
	b.noteChannelLimitsLocked()
	b.permGen.Add(1)
	var conns []*conn
	for c := range b.conns {
		if c.userName() == name {
			conns = append(conns, c)
		}
	}
	b.mu.Unlock()
	return DefResult{id: u.storeID, deleted: []string{"user " + name}}, func() {
		for _, c := range conns {
			c.forceClose(fmt.Sprintf("user '%s' is deleted", name))
		}
	}
}

// userAndVHost finds the user and checks the vhost of a permission
// command. Hold b.mu.
func (b *Broker) userAndVHostLocked(username, vhostName string) (*user, error) {
	u := b.users[username]
	switch {
	case u == nil:
		return nil, fmt.Errorf("user %q: %w", username, ErrNotFound)
	case b.vhosts[vhostName] == nil:
		return nil, fmt.Errorf("vhost %q: %w", vhostName, ErrNotFound)
	}
	return u, nil
}

func (b *Broker) applySetPermissions(c *defCmd) DefResult {
	b.mu.Lock()
	u, err := b.userAndVHostLocked(c.User, c.VHost)
	if err != nil {
		b.mu.Unlock()
		return DefResult{err: err}
	}
	p := permission{configure: c.Configure, write: c.Write, read: c.Read, storeID: u.perms[c.VHost].storeID}
	b.mu.Unlock()
	existed := p.storeID != 0
	if p.storeID == 0 {
		p.storeID = b.peekID(store.KindPermission)
	}
	rec := &store.Permission{ID: p.storeID, User: c.User, VHost: c.VHost, Configure: c.Configure, Write: c.Write, Read: c.Read}
	if err := b.storePut(rec); err != nil {
		return DefResult{err: err}
	}
	b.takeID(store.KindPermission, p.storeID)
	b.mu.Lock()
	u.setPermission(c.VHost, p)
	b.permGen.Add(1)
	b.mu.Unlock()
	return DefResult{id: p.storeID, existed: existed}
}

func (b *Broker) applyClearPermissions(c *defCmd) DefResult {
	b.mu.Lock()
	u := b.users[c.User]
	if u == nil {
		b.mu.Unlock()
		return DefResult{err: fmt.Errorf("user %q: %w", c.User, ErrNotFound)}
	}
	p, ok := u.perms[c.VHost]
	b.mu.Unlock()
	if !ok {
		return DefResult{err: fmt.Errorf("permissions of %q on %q: %w", c.User, c.VHost, ErrNotFound)}
	}
	if p.storeID != 0 {
		if err := b.storeDefs(nil, []store.DefRef{{Kind: store.KindPermission, ID: p.storeID}}); err != nil {
			return DefResult{err: err}
		}
	}
	b.mu.Lock()
	delete(u.perms, c.VHost)
	b.permGen.Add(1)
	b.mu.Unlock()
	return DefResult{id: p.storeID}
}

func (b *Broker) applySetTopicPermissions(c *defCmd) DefResult {
	tp, err := newTopicPermission(c.User, c.VHost, c.Write, c.Read)
	if err != nil {
		return DefResult{err: fmt.Errorf("broker: invalid topic permission pattern: %w", err)}
	}
	b.mu.Lock()
	u, err := b.userAndVHostLocked(c.User, c.VHost)
	if err != nil {
		b.mu.Unlock()
		return DefResult{err: err}
	}
	k := topicPermKey{c.VHost, c.Exchange}
	tp.storeID = u.topicPerms[k].storeID
	b.mu.Unlock()
	existed := tp.storeID != 0
	if tp.storeID == 0 {
		tp.storeID = b.peekID(store.KindTopicPermission)
	}
	rec := &store.TopicPermission{ID: tp.storeID, User: c.User, VHost: c.VHost, Exchange: c.Exchange, Write: c.Write, Read: c.Read}
	if err := b.storePut(rec); err != nil {
		return DefResult{err: err}
	}
	b.takeID(store.KindTopicPermission, tp.storeID)
	b.mu.Lock()
	if u.topicPerms == nil {
		u.topicPerms = make(map[topicPermKey]topicPermission)
	}
	u.topicPerms[k] = tp
	b.permGen.Add(1)
	b.mu.Unlock()
	return DefResult{id: tp.storeID, existed: existed}
}

func (b *Broker) applyClearTopicPermissions(c *defCmd) DefResult {
	b.mu.Lock()
	u := b.users[c.User]
	if u == nil {
		b.mu.Unlock()
		return DefResult{err: fmt.Errorf("user %q: %w", c.User, ErrNotFound)}
	}
	k := topicPermKey{c.VHost, c.Exchange}
	tp, ok := u.topicPerms[k]
	b.mu.Unlock()
	if !ok {
		return DefResult{err: fmt.Errorf("topic permission of %q on %q in %q: %w", c.User, c.Exchange, c.VHost, ErrNotFound)}
	}
	if tp.storeID != 0 {
		if err := b.storeDefs(nil, []store.DefRef{{Kind: store.KindTopicPermission, ID: tp.storeID}}); err != nil {
			return DefResult{err: err}
		}
	}
	b.mu.Lock()
	delete(u.topicPerms, k)
	b.permGen.Add(1)
	b.mu.Unlock()
	return DefResult{id: tp.storeID}
}

// applySetPolicy creates or replaces a policy; existing queues and
// exchanges take it at once.
func (b *Broker) applySetPolicy(c *defCmd) DefResult {
	v := b.vhost(c.VHost)
	if v == nil {
		return DefResult{err: fmt.Errorf("vhost %q: %w", c.VHost, ErrNotFound)}
	}
	re, err := regexp.Compile(c.Pattern)
	if err != nil {
		return DefResult{err: fmt.Errorf("%w: pattern: %v", ErrInvalidPolicy, err)}
	}
	def, err := decodePolicyDefinition(c.Definition)
	if err != nil {
		return DefResult{err: err}
	}
	p := &policy{name: c.Name, pattern: c.Pattern, applyTo: c.ApplyTo, re: re, priority: c.Priority, def: def, operator: c.Operator}
	v.mu.RLock()
	old := v.policies.get(c.Name, c.Operator)
	if old != nil {
		p.storeID = old.storeID
	}
	v.mu.RUnlock()
	if p.storeID == 0 {
		p.storeID = b.peekID(store.KindPolicy)
	}
	// Stored before it takes effect.
	if err := b.storePut(policyRecord(v, p, c.Definition)); err != nil {
		return DefResult{err: fmt.Errorf("broker: storing policy: %w", err)}
	}
	b.takeID(store.KindPolicy, p.storeID)
	v.mu.Lock()
	v.policies.of(c.Operator)[c.Name] = p
	v.mu.Unlock()
	v.applyPolicies()
	return DefResult{id: p.storeID, existed: old != nil}
}

// applyClearPolicy deletes a policy; what it set reverts at once.
func (b *Broker) applyClearPolicy(c *defCmd) DefResult {
	v := b.vhost(c.VHost)
	if v == nil {
		return DefResult{err: fmt.Errorf("vhost %q: %w", c.VHost, ErrNotFound)}
	}
	v.mu.RLock()
	p := v.policies.get(c.Name, c.Operator)
	v.mu.RUnlock()
	if p == nil {
		return DefResult{err: fmt.Errorf("policy %q in vhost %q: %w", c.Name, c.VHost, ErrNotFound)}
	}
	if p.storeID != 0 {
		if err := b.storeDefs(nil, []store.DefRef{{Kind: store.KindPolicy, ID: p.storeID}}); err != nil {
			return DefResult{err: fmt.Errorf("broker: deleting policy: %w", err)}
		}
	}
	v.mu.Lock()
	delete(v.policies.of(c.Operator), c.Name)
	v.mu.Unlock()
	v.applyPolicies()
	return DefResult{id: p.storeID, deleted: []string{"policy " + c.Name}}
}

func (b *Broker) applySetGlobal(c *defCmd) DefResult {
	b.mu.Lock()
	old := b.globals[c.Name]
	b.mu.Unlock()
	g := &globalParam{value: append([]byte(nil), c.Value...)}
	if old != nil {
		g.storeID = old.storeID
	}
	if g.storeID == 0 {
		g.storeID = b.peekID(store.KindGlobalParameter)
	}
	if err := b.storePut(&store.GlobalParameter{ID: g.storeID, Name: c.Name, Value: g.value}); err != nil {
		return DefResult{err: err}
	}
	b.takeID(store.KindGlobalParameter, g.storeID)
	b.mu.Lock()
	if b.globals == nil {
		b.globals = make(map[string]*globalParam)
	}
	b.globals[c.Name] = g
	b.mu.Unlock()
	b.notePlacement()
	return DefResult{id: g.storeID, existed: old != nil, created: old == nil}
}

func (b *Broker) applyDeleteGlobal(c *defCmd) DefResult {
	b.mu.Lock()
	g := b.globals[c.Name]
	b.mu.Unlock()
	if g == nil {
		return DefResult{}
	}
	if g.storeID != 0 {
		if err := b.storeDefs(nil, []store.DefRef{{Kind: store.KindGlobalParameter, ID: g.storeID}}); err != nil {
			return DefResult{existed: true, err: err}
		}
	}
	b.mu.Lock()
	delete(b.globals, c.Name)
	b.mu.Unlock()
	b.notePlacement()
	return DefResult{id: g.storeID, existed: true, deleted: []string{"global parameter " + c.Name}}
}
