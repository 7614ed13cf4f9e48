package broker

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/warrenmq/warren/store"
)

// Administration of vhosts, users and permissions. These methods are what
// the management API and `warren ctl` call. With a store, each change is
// stored (one batch) before it is made in memory: a change that fails to
// store returns the error and changes nothing.

var (
	// ErrExists means the named object exists already.
	ErrExists = errors.New("broker: already exists")
	// ErrNotFound means the named object does not exist.
	ErrNotFound = errors.New("broker: not found")
)

// VHostInfo describes a vhost.
type VHostInfo struct {
	Name string
}

// UserInfo describes a user.
type UserInfo struct {
	Name          string
	PasswordHash  []byte
	HashAlgorithm string
	Tags          []string
}

// PermissionInfo is a user's permissions on a vhost.
type PermissionInfo struct {
	User, VHost            string
	Configure, Write, Read string
}

// VHosts lists the vhosts by name.
func (b *Broker) VHosts() []VHostInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]VHostInfo, 0, len(b.vhosts))
	for name := range b.vhosts {
		out = append(out, VHostInfo{Name: name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// AddVHost creates a vhost with its predeclared exchanges.
func (b *Broker) AddVHost(name string) error {
	if name == "" {
		return fmt.Errorf("broker: empty vhost name")
	}
	b.defMu.Lock()
	defer b.defMu.Unlock()
	b.mu.Lock()
	exists := b.vhosts[name] != nil
	b.mu.Unlock()
	if exists {
		return fmt.Errorf("vhost %q: %w", name, ErrExists)
	}
	v := newVHost(b, name)
	if st := b.cfg.Store; st != nil {
		rec := &store.VHost{Name: name}
		if _, err := st.Put(rec); err != nil {
			return err
		}
		v.storeID = rec.ID
	}
	b.mu.Lock()
	b.vhosts[name] = v
	b.mu.Unlock()
	return nil
}

// DeleteVHost deletes a vhost, its exchanges, queues and messages, and the
// permissions on it; its connections are closed with 320.
func (b *Broker) DeleteVHost(name string) error {
	b.defMu.Lock()
	locked := true
	defer func() {
		if locked {
			b.defMu.Unlock()
		}
	}()
	b.mu.Lock()
	v := b.vhosts[name]
	if v == nil {
		b.mu.Unlock()
		return fmt.Errorf("vhost %q: %w", name, ErrNotFound)
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
	for _, qe := range v.queues {
		add(store.KindQueue, qe.storeID)
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
		return fmt.Errorf("broker: deleting vhost %q: %w", name, err)
	}

	v.deleted = true
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
	locked = false
	b.defMu.Unlock()
	for _, c := range conns {
		c.forceClose(fmt.Sprintf("vhost '%s' is deleted", name))
	}
	for _, d := range queues {
		for _, cons := range d.conss {
			cons.ch.serverCancel(cons)
		}
	}
	return nil
}

// Users lists the users by name.
func (b *Broker) Users() []UserInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]UserInfo, 0, len(b.users))
	for _, u := range b.users {
		out = append(out, UserInfo{Name: u.name, PasswordHash: slices.Clone(u.hash), HashAlgorithm: u.algorithm, Tags: slices.Clone(u.tags)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// PutUser creates or updates a user with a password, hashed with SHA-256
// as RabbitMQ does by default.
func (b *Broker) PutUser(name, password string, tags []string) error {
	hash, err := HashPassword(HashSHA256, password)
	if err != nil {
		return err
	}
	return b.PutUserHash(name, hash, HashSHA256, tags)
}

// PutUserHash creates or updates a user from a salted password hash in
// RabbitMQ's format (as found in definitions files). An empty hash makes a
// user that cannot log in with a password.
func (b *Broker) PutUserHash(name string, hash []byte, algorithm string, tags []string) error {
	if name == "" {
		return fmt.Errorf("broker: empty user name")
	}
	if algorithm == "" {
		algorithm = HashSHA256
	}
	if algorithm != HashSHA256 && algorithm != HashSHA512 {
		return fmt.Errorf("%w: %s", ErrUnknownHashAlgorithm, algorithm)
	}
	hash, tags = slices.Clone(hash), slices.Clone(tags)
	b.defMu.Lock()
	defer b.defMu.Unlock()
	b.mu.Lock()
	var id uint64
	if u := b.users[name]; u != nil {
		id = u.storeID
	}
	b.mu.Unlock()
	if st := b.cfg.Store; st != nil {
		rec := &store.User{ID: id, Name: name, PasswordHash: hash, HashAlgorithm: algorithm, Tags: tags}
		if _, err := st.Put(rec); err != nil {
			return err
		}
		id = rec.ID
	}
	b.mu.Lock()
	u := b.users[name]
	if u == nil {
		u = &user{name: name}
		b.users[name] = u
	}
	u.hash, u.algorithm, u.tags, u.storeID = hash, algorithm, tags, id
	b.mu.Unlock()
	return nil
}

// DeleteUser deletes a user and its permissions, and closes its
// connections with 320.
func (b *Broker) DeleteUser(name string) error {
	b.defMu.Lock()
	defer b.defMu.Unlock()
	b.mu.Lock()
	u := b.users[name]
	if u == nil {
		b.mu.Unlock()
		return fmt.Errorf("user %q: %w", name, ErrNotFound)
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
		return fmt.Errorf("broker: deleting user %q: %w", name, err)
	}
	b.mu.Lock()
	delete(b.users, name)
	b.permGen.Add(1)
	var conns []*conn
	for c := range b.conns {
		if c.userName() == name {
			conns = append(conns, c)
		}
	}
	b.mu.Unlock()
	for _, c := range conns {
		c.forceClose(fmt.Sprintf("user '%s' is deleted", name))
	}
	return nil
}

// Permissions lists every user's permissions, by user then vhost.
func (b *Broker) Permissions() []PermissionInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []PermissionInfo
	for _, u := range b.users {
		for v, p := range u.perms {
			out = append(out, PermissionInfo{User: u.name, VHost: v, Configure: p.configure, Write: p.write, Read: p.read})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].User != out[j].User {
			return out[i].User < out[j].User
		}
		return out[i].VHost < out[j].VHost
	})
	return out
}

// SetPermissions sets a user's configure, write and read patterns on a
// vhost (regular expressions, as in RabbitMQ).
func (b *Broker) SetPermissions(username, vhostName, configure, write, read string) error {
	if err := validatePatterns(configure, write, read); err != nil {
		return fmt.Errorf("broker: invalid permission pattern: %w", err)
	}
	b.defMu.Lock()
	defer b.defMu.Unlock()
	b.mu.Lock()
	u := b.users[username]
	switch {
	case u == nil:
		b.mu.Unlock()
		return fmt.Errorf("user %q: %w", username, ErrNotFound)
	case b.vhosts[vhostName] == nil:
		b.mu.Unlock()
		return fmt.Errorf("vhost %q: %w", vhostName, ErrNotFound)
	}
	p := permission{configure: configure, write: write, read: read, storeID: u.perms[vhostName].storeID}
	b.mu.Unlock()
	if st := b.cfg.Store; st != nil {
		rec := &store.Permission{ID: p.storeID, User: username, VHost: vhostName, Configure: configure, Write: write, Read: read}
		if _, err := st.Put(rec); err != nil {
			return err
		}
		p.storeID = rec.ID
	}
	b.mu.Lock()
	u.setPermission(vhostName, p)
	b.permGen.Add(1)
	b.mu.Unlock()
	return nil
}

// ClearPermissions removes a user's permissions on a vhost.
func (b *Broker) ClearPermissions(username, vhostName string) error {
	b.defMu.Lock()
	defer b.defMu.Unlock()
	b.mu.Lock()
	u := b.users[username]
	if u == nil {
		b.mu.Unlock()
		return fmt.Errorf("user %q: %w", username, ErrNotFound)
	}
	p, ok := u.perms[vhostName]
	b.mu.Unlock()
	if !ok {
		return fmt.Errorf("permissions of %q on %q: %w", username, vhostName, ErrNotFound)
	}
	if st := b.cfg.Store; st != nil && p.storeID != 0 {
		if err := st.Delete(store.KindPermission, p.storeID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	b.mu.Lock()
	delete(u.perms, vhostName)
	b.permGen.Add(1)
	b.mu.Unlock()
	return nil
}

// TopicPermissionInfo is a user's topic permission on an exchange of a
// vhost: regular expressions on routing keys, which may use the variables
// {username} and {vhost}.
type TopicPermissionInfo struct {
	User, VHost, Exchange string
	Write, Read           string
}

// TopicPermissions lists every user's topic permissions, by user, vhost
// and exchange.
func (b *Broker) TopicPermissions() []TopicPermissionInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []TopicPermissionInfo
	for _, u := range b.users {
		for k, tp := range u.topicPerms {
			out = append(out, TopicPermissionInfo{User: u.name, VHost: k.vhost, Exchange: k.exchange, Write: tp.write, Read: tp.read})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.User != b.User {
			return a.User < b.User
		}
		if a.VHost != b.VHost {
			return a.VHost < b.VHost
		}
		return a.Exchange < b.Exchange
	})
	return out
}

// SetTopicPermissions sets a user's write and read routing-key patterns on
// a topic exchange of a vhost (the exchange need not exist yet), as
// rabbitmqctl set_topic_permissions does.
func (b *Broker) SetTopicPermissions(username, vhostName, exchangeName, write, read string) error {
	tp, err := newTopicPermission(username, vhostName, write, read)
	if err != nil {
		return fmt.Errorf("broker: invalid topic permission pattern: %w", err)
	}
	b.defMu.Lock()
	defer b.defMu.Unlock()
	b.mu.Lock()
	u := b.users[username]
	switch {
	case u == nil:
		b.mu.Unlock()
		return fmt.Errorf("user %q: %w", username, ErrNotFound)
	case b.vhosts[vhostName] == nil:
		b.mu.Unlock()
		return fmt.Errorf("vhost %q: %w", vhostName, ErrNotFound)
	}
	k := topicPermKey{vhostName, exchangeName}
	tp.storeID = u.topicPerms[k].storeID
	b.mu.Unlock()
	if st := b.cfg.Store; st != nil {
		rec := &store.TopicPermission{ID: tp.storeID, User: username, VHost: vhostName, Exchange: exchangeName, Write: write, Read: read}
		if _, err := st.Put(rec); err != nil {
			return err
		}
		tp.storeID = rec.ID
	}
	b.mu.Lock()
	if u.topicPerms == nil {
		u.topicPerms = make(map[topicPermKey]topicPermission)
	}
	u.topicPerms[k] = tp
	b.permGen.Add(1)
	b.mu.Unlock()
	return nil
}

// ClearTopicPermissions removes a user's topic permission on an exchange
// of a vhost.
func (b *Broker) ClearTopicPermissions(username, vhostName, exchangeName string) error {
	b.defMu.Lock()
	defer b.defMu.Unlock()
	b.mu.Lock()
	u := b.users[username]
	if u == nil {
		b.mu.Unlock()
		return fmt.Errorf("user %q: %w", username, ErrNotFound)
	}
	k := topicPermKey{vhostName, exchangeName}
	tp, ok := u.topicPerms[k]
	b.mu.Unlock()
	if !ok {
		return fmt.Errorf("topic permission of %q on %q in %q: %w", username, exchangeName, vhostName, ErrNotFound)
	}
	if st := b.cfg.Store; st != nil && tp.storeID != 0 {
		if err := st.Delete(store.KindTopicPermission, tp.storeID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	b.mu.Lock()
	delete(u.topicPerms, k)
	b.permGen.Add(1)
	b.mu.Unlock()
	return nil
}

// canAccessVHost reports whether u has permissions on the vhost (any
// permissions entry grants access, as in RabbitMQ).
func (b *Broker) canAccessVHost(u *user, vhostName string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := u.perms[vhostName]
	return ok
}

// vhostName and userName are the connection's vhost and user (empty
// before connection.open). Hold Broker.mu.
func (c *conn) vhostName() string { return c.vhostNm }

func (c *conn) userName() string { return c.userNm }

// userHasTag reports whether u has tag.
func (b *Broker) userHasTag(u *user, tag string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Contains(u.tags, tag)
}
