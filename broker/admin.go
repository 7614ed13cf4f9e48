package broker

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
)

// Administration of vhosts, users and permissions. These methods are what
// the management API and `warren ctl` call. Each validates its input and
// proposes a definition command (defcmd.go); the apply (defapply.go,
// defapply_admin.go) stores the change (one batch) before it makes it in
// memory: a change that fails to store returns the error and changes
// nothing.

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
	// Limits are the user's limits (userlimits.go); nil when none are set.
	Limits map[string]int64
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
	return b.propose(&defCmd{Op: opAddVHost, Name: name}).err
}

// DeleteVHost deletes a vhost, its exchanges, queues and messages, and the
// permissions on it; its connections are closed with 320.
func (b *Broker) DeleteVHost(name string) error {
	return b.propose(&defCmd{Op: opDeleteVHost, Name: name}).err
}

// Users lists the users by name.
func (b *Broker) Users() []UserInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]UserInfo, 0, len(b.users))
	for _, u := range b.users {
		out = append(out, UserInfo{Name: u.name, PasswordHash: slices.Clone(u.hash), HashAlgorithm: u.algorithm, Tags: slices.Clone(u.tags),
			Limits: maps.Clone(u.limits)})
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
	return b.propose(&defCmd{Op: opPutUser, Name: name, Hash: hash, HashAlgorithm: algorithm, Tags: tags}).err
}

// DeleteUser deletes a user and its permissions, and closes its
// connections with 320.
func (b *Broker) DeleteUser(name string) error {
	return b.propose(&defCmd{Op: opDeleteUser, Name: name}).err
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
	return b.propose(&defCmd{Op: opSetPermissions, User: username, VHost: vhostName, Configure: configure, Write: write, Read: read}).err
}

// ClearPermissions removes a user's permissions on a vhost.
func (b *Broker) ClearPermissions(username, vhostName string) error {
	return b.propose(&defCmd{Op: opClearPermissions, User: username, VHost: vhostName}).err
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
	if _, err := newTopicPermission(username, vhostName, write, read); err != nil {
		return fmt.Errorf("broker: invalid topic permission pattern: %w", err)
	}
	return b.propose(&defCmd{Op: opSetTopicPermissions, User: username, VHost: vhostName, Exchange: exchangeName,
		Write: write, Read: read}).err
}

// ClearTopicPermissions removes a user's topic permission on an exchange
// of a vhost.
func (b *Broker) ClearTopicPermissions(username, vhostName, exchangeName string) error {
	return b.propose(&defCmd{Op: opClearTopicPermissions, User: username, VHost: vhostName, Exchange: exchangeName}).err
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
