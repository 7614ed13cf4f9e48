package broker

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/exchange"
	"github.com/warrenmq/warren/store"
)

// The definitions snapshot: the definitions export in RabbitMQ's JSON
// (users with their limits, vhosts, permissions, topic_permissions, parameters,
// global_parameters, policies, queues, exchanges, bindings) plus what it
// lacks to rebuild the same state: each object's id ("warren_id"), the
// arguments as an encoded AMQP table ("warren_arguments", exact where the
// JSON "arguments" lose integer widths), exclusive queues and their owner,
// operator policies, and the id counters ("warren_last_ids"). Every list is
// sorted, so two brokers with the same definitions give the same bytes.

type snapshotDefs struct {
	RabbitVersion    string            `json:"rabbit_version"`
	ProductName      string            `json:"product_name"`
	Users            []snapUser        `json:"users"`
	VHosts           []snapVHost       `json:"vhosts"`
	Permissions      []snapPermission  `json:"permissions"`
	TopicPermissions []snapTopicPerm   `json:"topic_permissions"`
	Parameters       []struct{}        `json:"parameters"`
	GlobalParameters []snapGlobal      `json:"global_parameters"`
	Policies         []snapPolicy      `json:"policies"`
	OperatorPolicies []snapPolicy      `json:"warren_operator_policies"`
	Queues           []snapQueue       `json:"queues"`
	Exchanges        []snapExchange    `json:"exchanges"`
	Bindings         []snapBinding     `json:"bindings"`
	LastIDs          map[string]uint64 `json:"warren_last_ids"`
	Owners           map[string]uint64 `json:"warren_exclusive_owners,omitempty"`
}

type snapUser struct {
	Name             string           `json:"name"`
	PasswordHash     []byte           `json:"password_hash"`
	HashingAlgorithm string           `json:"hashing_algorithm"`
	Tags             []string         `json:"tags"`
	Limits           map[string]int64 `json:"limits"`
	ID               uint64           `json:"warren_id"`
}

type snapVHost struct {
	Name   string           `json:"name"`
	Limits map[string]int64 `json:"warren_limits,omitempty"`
	ID     uint64           `json:"warren_id"`
}

type snapPermission struct {
	User      string `json:"user"`
	VHost     string `json:"vhost"`
	Configure string `json:"configure"`
	Write     string `json:"write"`
	Read      string `json:"read"`
	ID        uint64 `json:"warren_id"`
}

type snapTopicPerm struct {
	User     string `json:"user"`
	VHost    string `json:"vhost"`
	Exchange string `json:"exchange"`
	Write    string `json:"write"`
	Read     string `json:"read"`
	ID       uint64 `json:"warren_id"`
}

type snapGlobal struct {
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value"`
	ID    uint64          `json:"warren_id"`
}

type snapPolicy struct {
	VHost      string          `json:"vhost"`
	Name       string          `json:"name"`
	Pattern    string          `json:"pattern"`
	ApplyTo    string          `json:"apply-to"`
	Definition json.RawMessage `json:"definition"`
	Priority   int             `json:"priority"`
	ID         uint64          `json:"warren_id"`
}

type snapQueue struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Type       string         `json:"type"`
	Arguments  map[string]any `json:"arguments"`
	Exclusive  bool           `json:"warren_exclusive,omitempty"`
	RawArgs    []byte         `json:"warren_arguments,omitempty"`
	ID         uint64         `json:"warren_id"`
	Node       string         `json:"node,omitempty"`
}

type snapExchange struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Type       string         `json:"type"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Internal   bool           `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
	RawArgs    []byte         `json:"warren_arguments,omitempty"`
	ID         uint64         `json:"warren_id"`
}

type snapBinding struct {
	Source          string         `json:"source"`
	VHost           string         `json:"vhost"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destination_type"`
	RoutingKey      string         `json:"routing_key"`
	Arguments       map[string]any `json:"arguments"`
	RawArgs         []byte         `json:"warren_arguments,omitempty"`
	ID              uint64         `json:"warren_id"`
}

// SnapshotDefinitions returns the definitions state (see above); it
// implements DefinitionMachine. It holds b.defMu, so it sees the state
// between two applies.
func (b *Broker) SnapshotDefinitions() ([]byte, error) {
	b.defMu.Lock()
	defer b.defMu.Unlock()
	s := snapshotDefs{RabbitVersion: Version, ProductName: "Warren", Users: []snapUser{}, VHosts: []snapVHost{},
		Permissions: []snapPermission{}, TopicPermissions: []snapTopicPerm{}, Parameters: []struct{}{},
		GlobalParameters: []snapGlobal{}, Policies: []snapPolicy{}, OperatorPolicies: []snapPolicy{},
		Queues: []snapQueue{}, Exchanges: []snapExchange{}, Bindings: []snapBinding{},
		LastIDs: make(map[string]uint64), Owners: make(map[string]uint64)}
	for k, id := range b.lastID {
		if id != 0 {
			s.LastIDs[store.Kind(k).String()] = id
		}
	}
	b.mu.Lock()
	for _, u := range b.users {
		s.Users = append(s.Users, snapUser{Name: u.name, PasswordHash: u.hash, HashingAlgorithm: u.algorithm,
			Tags: nonNil(u.tags), Limits: nonNilLimits(u.limits), ID: u.storeID})
		for vh, p := range u.perms {
			s.Permissions = append(s.Permissions, snapPermission{User: u.name, VHost: vh, Configure: p.configure,
				Write: p.write, Read: p.read, ID: p.storeID})
		}
		for k, tp := range u.topicPerms {
			s.TopicPermissions = append(s.TopicPermissions, snapTopicPerm{User: u.name, VHost: k.vhost,
				Exchange: k.exchange, Write: tp.write, Read: tp.read, ID: tp.storeID})
		}
	}
	for name, g := range b.globals {
		s.GlobalParameters = append(s.GlobalParameters, snapGlobal{Name: name, Value: g.value, ID: g.storeID})
	}
	vhosts := make([]*vhost, 0, len(b.vhosts))
	limits := make(map[*vhost]map[string]int64, len(b.vhosts))
	for _, v := range b.vhosts {
		vhosts = append(vhosts, v)
		limits[v] = maps.Clone(v.limits)
	}
	b.mu.Unlock()
	for _, v := range vhosts {
		s.VHosts = append(s.VHosts, snapVHost{Name: v.name, ID: v.storeID, Limits: limits[v]})
		if err := v.snapshotInto(&s); err != nil {
			return nil, err
		}
	}
	s.sort()
	return json.Marshal(&s)
}

// snapshotInto adds v's policies, queues, exchanges and bindings to s.
// Hold b.defMu.
func (v *vhost) snapshotInto(s *snapshotDefs) error {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, set := range []map[string]*policy{v.policies.user, v.policies.operator} {
		for _, p := range set {
			def, err := json.Marshal(p.def)
			if err != nil {
				return fmt.Errorf("broker: snapshot of policy %q: %w", p.name, err)
			}
			sp := snapPolicy{VHost: v.name, Name: p.name, Pattern: p.pattern, ApplyTo: p.applyTo,
				Definition: def, Priority: p.priority, ID: p.storeID}
			if p.operator {
				s.OperatorPolicies = append(s.OperatorPolicies, sp)
			} else {
				s.Policies = append(s.Policies, sp)
			}
		}
	}
	for _, qe := range v.queues {
		raw, err := encodeArgs(qe.args)
		if err != nil {
			return err
		}
		s.Queues = append(s.Queues, snapQueue{Name: qe.name, VHost: v.name, Durable: qe.durable,
			AutoDelete: qe.autoDelete, Type: qe.typeName(), Arguments: amqp.TableJSON(qe.args), Exclusive: qe.exclusive,
			RawArgs: raw, ID: qe.id, Node: qe.homeNode})
		if qe.exclusive {
			s.Owners[v.name+"\x00"+qe.name] = qe.ownerID
		}
	}
	v.bindMu.Lock()
	defer v.bindMu.Unlock()
	for _, ex := range v.exchanges {
		for _, bn := range ex.router.Bindings() {
			raw, err := encodeArgs(bn.Args)
			if err != nil {
				return err
			}
			dt := "queue"
			if bn.Destination.Kind == exchange.DestExchange {
				dt = "exchange"
			}
			s.Bindings = append(s.Bindings, snapBinding{Source: ex.name, VHost: v.name, Destination: bn.Destination.Name,
				DestinationType: dt, RoutingKey: bn.Key, Arguments: amqp.TableJSON(bn.Args), RawArgs: raw,
				ID: v.bindingIDs[newBindingKey(bn, ex.name)]})
		}
		if ex.name == "" || strings.HasPrefix(ex.name, "amq.") && ex.storeID == 0 {
			continue
		}
		raw, err := encodeArgs(ex.args)
		if err != nil {
			return err
		}
		s.Exchanges = append(s.Exchanges, snapExchange{Name: ex.name, VHost: v.name, Type: ex.typeName(),
			Durable: ex.durable, AutoDelete: ex.autoDelete, Internal: ex.internal, Arguments: amqp.TableJSON(ex.args),
			RawArgs: raw, ID: ex.storeID})
	}
	return nil
}

func (s *snapshotDefs) sort() {
	slices.SortFunc(s.Users, func(a, b snapUser) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(s.VHosts, func(a, b snapVHost) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(s.Permissions, func(a, b snapPermission) int {
		return strings.Compare(a.User+"\x00"+a.VHost, b.User+"\x00"+b.VHost)
	})
	slices.SortFunc(s.TopicPermissions, func(a, b snapTopicPerm) int {
		return strings.Compare(a.User+"\x00"+a.VHost+"\x00"+a.Exchange, b.User+"\x00"+b.VHost+"\x00"+b.Exchange)
	})
	slices.SortFunc(s.GlobalParameters, func(a, b snapGlobal) int { return strings.Compare(a.Name, b.Name) })
	byName := func(a, b snapPolicy) int { return strings.Compare(a.VHost+"\x00"+a.Name, b.VHost+"\x00"+b.Name) }
	slices.SortFunc(s.Policies, byName)
	slices.SortFunc(s.OperatorPolicies, byName)
	slices.SortFunc(s.Queues, func(a, b snapQueue) int { return strings.Compare(a.VHost+"\x00"+a.Name, b.VHost+"\x00"+b.Name) })
	slices.SortFunc(s.Exchanges, func(a, b snapExchange) int {
		return strings.Compare(a.VHost+"\x00"+a.Name, b.VHost+"\x00"+b.Name)
	})
	key := func(x snapBinding) string {
		return strings.Join([]string{x.VHost, x.Source, x.DestinationType, x.Destination, x.RoutingKey, string(x.RawArgs)}, "\x00")
	}
	slices.SortFunc(s.Bindings, func(a, b snapBinding) int { return strings.Compare(key(a), key(b)) })
}

// RestoreDefinitions replaces the broker's definitions with a snapshot
// made by SnapshotDefinitions; it implements DefinitionMachine. Call it
// before the broker serves, on a broker without queues; it stands for the
// recovery from the store, which Listen then skips. With a store, the
// snapshot's records are written to it (one batch), which is meant for a
// store that holds no definitions yet.
func (b *Broker) RestoreDefinitions(snap []byte) error {
	b.recoverOnce.Do(func() {})
	return b.restoreDefinitions(snap, 0, nil)
}

// restoreDefinitions is RestoreDefinitions that also deletes the store
// records dels and records index as the last command applied, in the
// snapshot's store write.
func (b *Broker) restoreDefinitions(snap []byte, index uint64, dels []store.DefRef) error {
	var s snapshotDefs
	if err := json.Unmarshal(snap, &s); err != nil {
		return fmt.Errorf("broker: reading a definitions snapshot: %w", err)
	}
	defs := &store.Definitions{}
	lastIDs := make(map[store.Kind]uint64)
	for name, id := range s.LastIDs {
		for k := store.KindVHost; int(k) < len(b.lastID); k++ {
			if k.String() == name {
				lastIDs[k] = id
			}
		}
	}
	for _, x := range s.VHosts {
		defs.VHosts = append(defs.VHosts, store.VHost{ID: x.ID, Name: x.Name, Limits: nilIfEmpty(x.Limits)})
	}
	for _, x := range s.Users {
		defs.Users = append(defs.Users, store.User{ID: x.ID, Name: x.Name, PasswordHash: x.PasswordHash,
			HashAlgorithm: x.HashingAlgorithm, Tags: x.Tags, Limits: nilIfEmpty(x.Limits)})
	}
	for _, x := range s.Permissions {
		defs.Permissions = append(defs.Permissions, store.Permission{ID: x.ID, User: x.User, VHost: x.VHost,
			Configure: x.Configure, Write: x.Write, Read: x.Read})
	}
	for _, x := range s.TopicPermissions {
		defs.TopicPermissions = append(defs.TopicPermissions, store.TopicPermission{ID: x.ID, User: x.User,
			VHost: x.VHost, Exchange: x.Exchange, Write: x.Write, Read: x.Read})
	}
	for _, x := range s.GlobalParameters {
		defs.GlobalParameters = append(defs.GlobalParameters, store.GlobalParameter{ID: x.ID, Name: x.Name, Value: x.Value})
	}
	for i, list := range [][]snapPolicy{s.Policies, s.OperatorPolicies} {
		for _, x := range list {
			defs.Policies = append(defs.Policies, store.Policy{ID: x.ID, VHost: x.VHost, Name: x.Name, Pattern: x.Pattern,
				ApplyTo: x.ApplyTo, Priority: x.Priority, Definition: x.Definition, Operator: i == 1})
		}
	}
	for _, x := range s.Exchanges {
		defs.Exchanges = append(defs.Exchanges, store.Exchange{ID: x.ID, VHost: x.VHost, Name: x.Name, Type: x.Type,
			Durable: x.Durable, AutoDelete: x.AutoDelete, Internal: x.Internal, Args: x.RawArgs})
	}
	for _, x := range s.Queues {
		defs.Queues = append(defs.Queues, store.Queue{ID: x.ID, VHost: x.VHost, Name: x.Name, Durable: x.Durable,
			Exclusive: x.Exclusive, AutoDelete: x.AutoDelete, Args: x.RawArgs, Type: x.Type, Node: x.Node})
	}
	for _, x := range s.Bindings {
		defs.Bindings = append(defs.Bindings, store.Binding{ID: x.ID, VHost: x.VHost, Source: x.Source,
			Destination: x.Destination, DestinationIsExchange: x.DestinationType == "exchange",
			RoutingKey: x.RoutingKey, Args: x.RawArgs})
	}
	b.defMu.Lock()
	defer b.defMu.Unlock()
	if dels != nil {
		dels = staleRecords(dels, snapshotRecords(defs))
	}
	plan := b.planQueueRestore(defs)
	b.defIndex.Store(index)
	err := b.storeDefs(snapshotRecords(defs), dels)
	b.defIndex.Store(0)
	if err != nil {
		return fmt.Errorf("broker: storing a definitions snapshot: %w", err)
	}
	conss := plan.dropLocked(b)
	b.mu.Lock()
	err = b.installDefinitionsLocked(defs, lastIDs, false, plan.keep)
	b.mu.Unlock()
	if err != nil {
		return err
	}
	plan.finish(b, conss)
	for key, owner := range s.Owners {
		vname, qname, _ := strings.Cut(key, "\x00")
		if v := b.vhost(vname); v != nil {
			v.mu.RLock()
			if qe := v.queues[qname]; qe != nil {
				qe.ownerID = owner
			}
			v.mu.RUnlock()
		}
	}
	return nil
}

// snapshotRecords are the store records of a restored snapshot: those of
// the durable exchanges, queues and bindings and all the others.
func snapshotRecords(d *store.Definitions) []any {
	var out []any
	for i := range d.VHosts {
		out = append(out, &d.VHosts[i])
	}
	for i := range d.Users {
		out = append(out, &d.Users[i])
	}
	for i := range d.Permissions {
		out = append(out, &d.Permissions[i])
	}
	for i := range d.TopicPermissions {
		out = append(out, &d.TopicPermissions[i])
	}
	for i := range d.GlobalParameters {
		out = append(out, &d.GlobalParameters[i])
	}
	for i := range d.Policies {
		out = append(out, &d.Policies[i])
	}
	for i := range d.Exchanges {
		if d.Exchanges[i].Durable {
			out = append(out, &d.Exchanges[i])
		}
	}
	for i := range d.Queues {
		if d.Queues[i].Durable {
			out = append(out, &d.Queues[i])
		}
	}
	for i := range d.Bindings {
		if d.Bindings[i].ID != 0 {
			out = append(out, &d.Bindings[i])
		}
	}
	return out
}

// nonNilLimits is limits, {} in JSON when there are none.
func nonNilLimits(l map[string]int64) map[string]int64 {
	if l == nil {
		return map[string]int64{}
	}
	return l
}

// nilIfEmpty is l, nil when empty (as a user without limits holds them).
func nilIfEmpty(l map[string]int64) map[string]int64 {
	if len(l) == 0 {
		return nil
	}
	return l
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
