package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
)

// Kind names a kind of definition; it is the second byte of a definition key.
type Kind uint8

// The kinds of definitions. The values are part of the on-disk key layout: never renumber.
const (
	KindVHost Kind = iota + 1
	KindUser
	KindPermission
	KindExchange
	KindQueue
	KindBinding
	KindPolicy
	KindTopicPermission
	KindGlobalParameter
	kindEnd
)

var kindNames = [...]string{"", "vhost", "user", "permission", "exchange", "queue", "binding", "policy", "topic permission", "global parameter"}

func (k Kind) String() string {
	if k.valid() {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

func (k Kind) valid() bool { return k >= KindVHost && k < kindEnd }

// VHost is a virtual host.
type VHost struct {
	ID          uint64
	Name        string
	Description string
	Tags        []string
	Limits      map[string]int64
}

// User is a user; PasswordHash is in RabbitMQ's format: salt(4) followed by the hash.
type User struct {
	ID            uint64
	Name          string
	PasswordHash  []byte
	HashAlgorithm string // "rabbit_password_hashing_sha256" or "rabbit_password_hashing_sha512"
	Tags          []string
	// Limits are the user's limits (max-connections, max-channels). A
	// record written before users had limits ends after Tags and has
	// none.
	Limits map[string]int64
}

// Permission is a user's configure/write/read patterns in a vhost.
type Permission struct {
	ID                                  uint64
	User, VHost, Configure, Write, Read string
}

// TopicPermission is a user's write and read routing-key patterns on a topic
// exchange of a vhost, as set (variables such as {username} unexpanded).
type TopicPermission struct {
	ID                                 uint64
	User, VHost, Exchange, Write, Read string
}

// GlobalParameter is a global runtime parameter (RabbitMQ's
// /api/global-parameters, e.g. cluster_name). Value is its JSON, opaque to the store.
type GlobalParameter struct {
	ID    uint64
	Name  string
	Value []byte
}

// Exchange is an exchange declaration. Args is an encoded AMQP table, opaque to the store.
type Exchange struct {
	ID                            uint64
	VHost, Name, Type             string
	Durable, AutoDelete, Internal bool
	Args                          []byte
}

// Queue is a queue declaration. Its ID keys the queue's messages in the journal.
type Queue struct {
	ID                             uint64
	VHost, Name                    string
	Durable, Exclusive, AutoDelete bool
	Args                           []byte
	Type                           string
	// Node is the queue's home node in a cluster ("" = this node).
	Node string
}

// Binding binds Source (an exchange) to Destination, a queue or an exchange.
type Binding struct {
	ID                    uint64
	VHost, Source         string
	Destination           string
	DestinationIsExchange bool
	RoutingKey            string
	Args                  []byte
}

// Policy is a policy or, with Operator set, an operator policy. Definition is JSON.
type Policy struct {
	ID                            uint64
	VHost, Name, Pattern, ApplyTo string
	Priority                      int
	Definition                    []byte
	Operator                      bool
}

// Definitions is everything LoadDefinitions found, each kind in id order.
type Definitions struct {
	VHosts      []VHost
	Users       []User
	Permissions []Permission
	Exchanges   []Exchange
	Queues      []Queue
	Bindings    []Binding
	Policies    []Policy

	TopicPermissions []TopicPermission
	GlobalParameters []GlobalParameter

	// Corrupt counts records that failed their checksum or did not decode; they are
	// left out above and logged.
	Corrupt int
}

// definition is implemented by the pointer of each definition type.
type definition interface {
	kind() Kind
	id() uint64
	setID(uint64)
	appendTo(b []byte) []byte
}

// RefOf names the definition record rec (a *VHost, *User, *Permission,
// *TopicPermission, *GlobalParameter, *Policy, *Exchange, *Queue or
// *Binding); ok is false for anything else.
func RefOf(rec any) (ref DefRef, ok bool) {
	d, ok := rec.(definition)
	if !ok || reflect.ValueOf(d).IsNil() {
		return DefRef{}, false
	}
	return DefRef{Kind: d.kind(), ID: d.id()}, true
}

func (v *VHost) kind() Kind      { return KindVHost }
func (v *VHost) id() uint64      { return v.ID }
func (v *VHost) setID(id uint64) { v.ID = id }
func (v *VHost) appendTo(b []byte) []byte {
	b = appendString(b, v.Name)
	b = appendString(b, v.Description)
	b = appendStrings(b, v.Tags)
	return appendLimits(b, v.Limits)
}

func decodeVHost(id uint64, d *decoder) VHost {
	return VHost{ID: id, Name: d.string(), Description: d.string(), Tags: d.strings(), Limits: decodeLimits(d)}
}

func (u *User) kind() Kind      { return KindUser }
func (u *User) id() uint64      { return u.ID }
func (u *User) setID(id uint64) { u.ID = id }
func (u *User) appendTo(b []byte) []byte {
	b = appendString(b, u.Name)
	b = appendBytes(b, u.PasswordHash)
	b = appendString(b, u.HashAlgorithm)
	b = appendStrings(b, u.Tags)
	if len(u.Limits) == 0 {
		return b
	}
	return appendLimits(b, u.Limits)
}

func decodeUser(id uint64, d *decoder) User {
	u := User{ID: id, Name: d.string(), PasswordHash: d.bytes(), HashAlgorithm: d.string(), Tags: d.strings()}
	if len(d.b) > 0 {
		u.Limits = decodeLimits(d)
	}
	return u
}

// appendLimits appends limits as a count and (name, value) pairs in name
// order.
func appendLimits(b []byte, limits map[string]int64) []byte {
	keys := make([]string, 0, len(limits))
	for k := range limits {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = binary.AppendVarint(b, limits[k])
	}
	return b
}

// decodeLimits reads what appendLimits wrote; nil when there are none.
func decodeLimits(d *decoder) map[string]int64 {
	n := d.count()
	if n == 0 {
		return nil
	}
	limits := make(map[string]int64, n)
	for range n {
		k := d.string()
		limits[k] = d.varint()
	}
	return limits
}

func (p *Permission) kind() Kind      { return KindPermission }
func (p *Permission) id() uint64      { return p.ID }
func (p *Permission) setID(id uint64) { p.ID = id }
func (p *Permission) appendTo(b []byte) []byte {
	b = appendString(b, p.User)
	b = appendString(b, p.VHost)
	b = appendString(b, p.Configure)
	b = appendString(b, p.Write)
	return appendString(b, p.Read)
}

func decodePermission(id uint64, d *decoder) Permission {
	return Permission{ID: id, User: d.string(), VHost: d.string(), Configure: d.string(), Write: d.string(), Read: d.string()}
}

func (p *TopicPermission) kind() Kind      { return KindTopicPermission }
func (p *TopicPermission) id() uint64      { return p.ID }
func (p *TopicPermission) setID(id uint64) { p.ID = id }
func (p *TopicPermission) appendTo(b []byte) []byte {
	b = appendString(b, p.User)
	b = appendString(b, p.VHost)
	b = appendString(b, p.Exchange)
	b = appendString(b, p.Write)
	return appendString(b, p.Read)
}

func decodeTopicPermission(id uint64, d *decoder) TopicPermission {
	return TopicPermission{ID: id, User: d.string(), VHost: d.string(), Exchange: d.string(), Write: d.string(), Read: d.string()}
}

func (g *GlobalParameter) kind() Kind      { return KindGlobalParameter }
func (g *GlobalParameter) id() uint64      { return g.ID }
func (g *GlobalParameter) setID(id uint64) { g.ID = id }
func (g *GlobalParameter) appendTo(b []byte) []byte {
	return appendBytes(appendString(b, g.Name), g.Value)
}

func decodeGlobalParameter(id uint64, d *decoder) GlobalParameter {
	return GlobalParameter{ID: id, Name: d.string(), Value: d.bytes()}
}

func (e *Exchange) kind() Kind      { return KindExchange }
func (e *Exchange) id() uint64      { return e.ID }
func (e *Exchange) setID(id uint64) { e.ID = id }
func (e *Exchange) appendTo(b []byte) []byte {
	b = appendString(b, e.VHost)
	b = appendString(b, e.Name)
	b = appendString(b, e.Type)
	b = appendBool(b, e.Durable)
	b = appendBool(b, e.AutoDelete)
	b = appendBool(b, e.Internal)
	return appendBytes(b, e.Args)
}

func decodeExchange(id uint64, d *decoder) Exchange {
	return Exchange{ID: id, VHost: d.string(), Name: d.string(), Type: d.string(),
		Durable: d.bool(), AutoDelete: d.bool(), Internal: d.bool(), Args: d.bytes()}
}

func (q *Queue) kind() Kind      { return KindQueue }
func (q *Queue) id() uint64      { return q.ID }
func (q *Queue) setID(id uint64) { q.ID = id }
func (q *Queue) appendTo(b []byte) []byte {
	b = appendString(b, q.VHost)
	b = appendString(b, q.Name)
	b = appendBool(b, q.Durable)
	b = appendBool(b, q.Exclusive)
	b = appendBool(b, q.AutoDelete)
	b = appendBytes(b, q.Args)
	b = appendString(b, q.Type)
	if q.Node != "" {
		// Appended: records written before it have none.
		b = appendString(b, q.Node)
	}
	return b
}

func decodeQueue(id uint64, d *decoder) Queue {
	q := Queue{ID: id, VHost: d.string(), Name: d.string(),
		Durable: d.bool(), Exclusive: d.bool(), AutoDelete: d.bool(), Args: d.bytes(), Type: d.string()}
	if d.err == nil && len(d.b) > 0 {
		q.Node = d.string()
	}
	return q
}

func (x *Binding) kind() Kind      { return KindBinding }
func (x *Binding) id() uint64      { return x.ID }
func (x *Binding) setID(id uint64) { x.ID = id }
func (x *Binding) appendTo(b []byte) []byte {
	b = appendString(b, x.VHost)
	b = appendString(b, x.Source)
	b = appendString(b, x.Destination)
	b = appendBool(b, x.DestinationIsExchange)
	b = appendString(b, x.RoutingKey)
	return appendBytes(b, x.Args)
}

func decodeBinding(id uint64, d *decoder) Binding {
	return Binding{ID: id, VHost: d.string(), Source: d.string(), Destination: d.string(),
		DestinationIsExchange: d.bool(), RoutingKey: d.string(), Args: d.bytes()}
}

func (p *Policy) kind() Kind      { return KindPolicy }
func (p *Policy) id() uint64      { return p.ID }
func (p *Policy) setID(id uint64) { p.ID = id }
func (p *Policy) appendTo(b []byte) []byte {
	b = appendString(b, p.VHost)
	b = appendString(b, p.Name)
	b = appendString(b, p.Pattern)
	b = appendString(b, p.ApplyTo)
	b = binary.AppendVarint(b, int64(p.Priority))
	b = appendBytes(b, p.Definition)
	return appendBool(b, p.Operator)
}

func decodePolicy(id uint64, d *decoder) Policy {
	return Policy{ID: id, VHost: d.string(), Name: d.string(), Pattern: d.string(), ApplyTo: d.string(),
		Priority: int(d.varint()), Definition: d.bytes(), Operator: d.bool()}
}

// DefRef names a stored definition, for Update.
type DefRef struct {
	Kind Kind
	ID   uint64
}

// SetDefinitionHook installs h, which every definition write (Put, Delete, Update)
// calls first, with no lock of the store held: if h returns an error, the write fails
// with it and nothing is written. h may block, to hold a write back. It is for tests
// that inject store faults; nil removes it.
func (s *Store) SetDefinitionHook(h func() error) {
	if h == nil {
		s.defHook.Store(nil)
		return
	}
	s.defHook.Store(&h)
}

// DefinitionWrites returns how many definition writes (Put, Delete, Update; each one
// transaction and one sync) have been made, failed ones included.
func (s *Store) DefinitionWrites() int64 { return s.defWrites.Load() }

// Put stores def, one of *VHost, *User, *Permission, *TopicPermission, *GlobalParameter, *Exchange,
// *Queue, *Binding or *Policy. An ID of 0 creates a record under a new id, which is set in def and returned;
// any other ID overwrites that record. Put returns once the record is on disk (fsynced
// unless Config.NoSync). Ids of a kind are never reused, even after Delete.
func (s *Store) Put(def any) (uint64, error) {
	d, ok := def.(definition)
	if !ok || reflect.ValueOf(d).IsNil() {
		return 0, fmt.Errorf("%w: %T", ErrUnknownKind, def)
	}
	if err := s.update([]definition{d}, nil, false, 0); err != nil {
		return 0, err
	}
	return d.id(), nil
}

// Delete removes the definition of kind with id, durably. It returns ErrNotFound if there
// is none.
func (s *Store) Delete(kind Kind, id uint64) error {
	if !kind.valid() {
		return fmt.Errorf("%w: %s", ErrUnknownKind, kind)
	}
	return s.update(nil, []DefRef{{kind, id}}, true, 0)
}

// Update stores puts (each as Put would: an ID of 0 gets a new id, set in the
// definition once Update succeeds) and deletes the definitions dels names, in one
// transaction with one sync: all of it is on disk when Update returns nil, and none of
// it when it returns an error. Deleting a definition that is not there is not an
// error. (Only a batch too big for one Badger transaction, thousands of records, is
// split; a failure can then leave its first part written.)
func (s *Store) Update(puts []any, dels []DefRef) error { return s.UpdateApplied(0, puts, dels) }

// checkDefs returns puts as definitions, or ErrUnknownKind for a value
// that is none or a deletion of no known kind.
func checkDefs(puts []any, dels []DefRef) ([]definition, error) {
	defs := make([]definition, len(puts))
	for i, p := range puts {
		d, ok := p.(definition)
		if !ok || reflect.ValueOf(d).IsNil() {
			return nil, fmt.Errorf("%w: %T", ErrUnknownKind, p)
		}
		defs[i] = d
	}
	for _, r := range dels {
		if !r.Kind.valid() {
			return nil, fmt.Errorf("%w: %s", ErrUnknownKind, r.Kind)
		}
	}
	return defs, nil
}

// UpdateApplied is Update that also records index as the last replicated
// definition command applied, in the same transaction: a node that restarts
// knows which commands of its log its stored definitions already hold
// (DefinitionsApplied). index 0 records nothing.
func (s *Store) UpdateApplied(index uint64, puts []any, dels []DefRef) error {
	defs, err := checkDefs(puts, dels)
	if err != nil {
		return err
	}
	if len(defs) == 0 && len(dels) == 0 && index == 0 {
		return nil
	}
	return s.update(defs, dels, false, index)
}

// DefinitionsApplied is the index UpdateApplied last recorded (0: none).
func (s *Store) DefinitionsApplied() (uint64, error) {
	var index uint64
	err := s.view(func(txn *badger.Txn) error {
		item, err := txn.Get(appliedKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			rec, err := openRecord(v)
			if err != nil {
				return err
			}
			x, n := binary.Uvarint(rec)
			if n <= 0 {
				return fmt.Errorf("store: applied index record of %d bytes", len(rec))
			}
			index = x
			return nil
		})
	})
	return index, err
}

// UpdateAppliedQueued is UpdateApplied through the journal writer: the
// change (its records, the id counters it raises, and index last) is queued
// as one group of ops, written all or nothing in a group commit shared with
// messages and log entries, and done (if not nil) runs on the writer once it
// is durable, with nil or the write error (at once with ErrClosed while the
// store closes). It returns at once: an error (bad input, the definition
// hook's fault, a closed store) means nothing was queued and done is not
// called. Ids are given to puts with ID 0 before it returns.
//
// Writes are ordered: a journal append, log entry or definition write made
// after it is written in the same group commit or a later one, and the
// direct writes (Put, Delete, Update, UpdateApplied) wait until queued ones
// are done. It is for a replicated log's state machine, whose log holds the
// command durably already: a crash may lose a queued change not yet written,
// and the index the store records (DefinitionsApplied) is that of the last
// change written, so a restart applies the lost ones again from the log.
func (s *Store) UpdateAppliedQueued(index uint64, puts []any, dels []DefRef, done func(error)) error {
	defs, err := checkDefs(puts, dels)
	if err != nil {
		return err
	}
	if len(defs) == 0 && len(dels) == 0 && index == 0 {
		if done != nil {
			done(nil)
		}
		return nil
	}
	recs, err := s.beginUpdate(defs)
	if err != nil {
		return err
	}
	s.lifeMu.RLock()
	defer s.lifeMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	s.defMu.Lock()
	defer s.defMu.Unlock()
	last, ids := s.assignIDsLocked(defs)
	ops := make([]op, 0, len(defs)+len(dels)+2)
	set := func(key, val []byte) {
		buf := make([]byte, 0, 1+len(key)+len(val))
		buf = append(append(append(buf, byte(len(key))), key...), val...)
		ops = append(ops, op{kind: opSet, buf: buf, withNext: true})
	}
	for k := KindVHost; k < kindEnd; k++ {
		if last[k] != s.lastID[k] {
			set(counterKey(k), sealRecord(binary.AppendUvarint(beginRecord(nil), last[k])))
		}
	}
	for i, d := range defs {
		set(defKey(d.kind(), ids[i]), recs[i])
	}
	for _, r := range dels {
		ops = append(ops, op{kind: opDelete, buf: defKey(r.Kind, r.ID), withNext: true})
	}
	if index != 0 {
		// Last: a group cut short by a crash never records its index.
		set(appliedKey, sealRecord(binary.AppendUvarint(beginRecord(nil), index)))
	}
	s.lastID = last
	for i, d := range defs {
		d.setID(ids[i])
	}
	s.defQueued.Add(1)
	fin := func(err error) {
		s.defQueued.Add(-1)
		if done != nil {
			done(err)
		}
	}
	tail := &ops[len(ops)-1]
	tail.withNext, tail.done = false, fin
	s.submit(ops, true, false, fin)
	return nil
}

// beginUpdate counts a definition write, runs the definition hook and encodes
// the records of puts.
func (s *Store) beginUpdate(puts []definition) ([][]byte, error) {
	s.defWrites.Add(1)
	if h := s.defHook.Load(); h != nil {
		if err := (*h)(); err != nil {
			return nil, fmt.Errorf("store: definitions: %w", err)
		}
	}
	recs := make([][]byte, len(puts))
	for i, d := range puts {
		recs[i] = sealRecord(d.appendTo(beginRecord(make([]byte, 0, 128))))
	}
	return recs, nil
}

// assignIDsLocked returns the id counters after puts and each put's id (a
// new one for ID 0). Hold defMu.
func (s *Store) assignIDsLocked(puts []definition) ([kindEnd]uint64, []uint64) {
	last := s.lastID
	ids := make([]uint64, len(puts))
	for i, d := range puts {
		ids[i] = d.id()
		if ids[i] == 0 {
			last[d.kind()]++
			ids[i] = last[d.kind()]
		} else {
			last[d.kind()] = max(last[d.kind()], ids[i])
		}
	}
	return last, ids
}

// update is Put, Delete and Update: one transaction (split only when Badger says it is
// too big), one sync. With mustExist, a delete of a missing record fails with
// ErrNotFound.
func (s *Store) update(puts []definition, dels []DefRef, mustExist bool, applied uint64) error {
	if s.defQueued.Load() > 0 {
		// Queued definition writes go first (UpdateAppliedQueued).
		if err := s.Flush(); err != nil && !errors.Is(err, ErrClosed) {
			return fmt.Errorf("store: definitions: %w", err)
		}
	}
	recs, err := s.beginUpdate(puts)
	if err != nil {
		return err
	}

	s.lifeMu.RLock()
	defer s.lifeMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	s.defMu.Lock()
	defer s.defMu.Unlock()
	last, ids := s.assignIDsLocked(puts)
	// Ids are burned even if the write fails: part of a split batch may be on disk.
	defer func() { s.lastID = last }()
	s.activity.Add(1)
	txn := s.db.NewTransaction(true)
	defer func() { txn.Discard() }()
	// set and del fill txn and, when Badger says it is full, commit it and go on in
	// a new one.
	write := func(f func(*badger.Txn) error) error {
		err := f(txn)
		if errors.Is(err, badger.ErrTxnTooBig) {
			if err := txn.Commit(); err != nil {
				return err
			}
			txn = s.db.NewTransaction(true)
			err = f(txn)
		}
		return err
	}
	what := func() string {
		if len(puts) == 1 && len(dels) == 0 {
			return fmt.Sprintf("put %s %d", puts[0].kind(), ids[0])
		}
		if len(puts) == 0 && len(dels) == 1 {
			return fmt.Sprintf("delete %s %d", dels[0].Kind, dels[0].ID)
		}
		return fmt.Sprintf("update of %d puts and %d deletes", len(puts), len(dels))
	}
	for k := KindVHost; k < kindEnd; k++ {
		if last[k] == s.lastID[k] {
			continue
		}
		c := sealRecord(binary.AppendUvarint(beginRecord(nil), last[k]))
		if err := write(func(txn *badger.Txn) error { return txn.Set(counterKey(k), c) }); err != nil {
			return fmt.Errorf("store: %s: %w", what(), err)
		}
	}
	if applied != 0 {
		c := sealRecord(binary.AppendUvarint(beginRecord(nil), applied))
		if err := write(func(txn *badger.Txn) error { return txn.Set(appliedKey, c) }); err != nil {
			return fmt.Errorf("store: %s: %w", what(), err)
		}
	}
	for i, d := range puts {
		key := defKey(d.kind(), ids[i])
		if err := write(func(txn *badger.Txn) error { return txn.Set(key, recs[i]) }); err != nil {
			return fmt.Errorf("store: %s: %w", what(), err)
		}
	}
	for _, r := range dels {
		key := defKey(r.Kind, r.ID)
		err := write(func(txn *badger.Txn) error {
			if mustExist {
				if _, err := txn.Get(key); err != nil {
					if errors.Is(err, badger.ErrKeyNotFound) {
						return ErrNotFound
					}
					return err
				}
			}
			return txn.Delete(key)
		})
		if err != nil {
			return fmt.Errorf("store: %s: %w", what(), err)
		}
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("store: %s: %w", what(), err)
	}
	for i, d := range puts {
		d.setID(ids[i])
	}
	return nil
}

// LoadDefinitions reads every definition, each kind in id order. Corrupt records are
// skipped, logged and counted in Definitions.Corrupt.
func (s *Store) LoadDefinitions() (*Definitions, error) {
	s.lifeMu.RLock()
	defer s.lifeMu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	defs := &Definitions{}
	err := s.db.View(func(txn *badger.Txn) error {
		return errors.Join(
			loadKind(s, txn, KindVHost, decodeVHost, &defs.VHosts, &defs.Corrupt),
			loadKind(s, txn, KindUser, decodeUser, &defs.Users, &defs.Corrupt),
			loadKind(s, txn, KindPermission, decodePermission, &defs.Permissions, &defs.Corrupt),
			loadKind(s, txn, KindExchange, decodeExchange, &defs.Exchanges, &defs.Corrupt),
			loadKind(s, txn, KindQueue, decodeQueue, &defs.Queues, &defs.Corrupt),
			loadKind(s, txn, KindBinding, decodeBinding, &defs.Bindings, &defs.Corrupt),
			loadKind(s, txn, KindPolicy, decodePolicy, &defs.Policies, &defs.Corrupt),
			loadKind(s, txn, KindTopicPermission, decodeTopicPermission, &defs.TopicPermissions, &defs.Corrupt),
			loadKind(s, txn, KindGlobalParameter, decodeGlobalParameter, &defs.GlobalParameters, &defs.Corrupt),
		)
	})
	if err != nil {
		return nil, fmt.Errorf("store: load definitions: %w", err)
	}
	return defs, nil
}

func loadKind[T any](s *Store, txn *badger.Txn, kind Kind, decode func(uint64, *decoder) T, out *[]T, corrupt *int) error {
	prefix := defPrefix(kind)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		k := item.Key()
		if len(k) != defKeyLen {
			*corrupt++
			s.log.Warn("skipping definition with malformed key", zap.Stringer("kind", kind), zap.Binary("key", k))
			continue
		}
		id := binary.BigEndian.Uint64(k[2:])
		var v T
		err := item.Value(func(val []byte) error {
			payload, err := openRecord(val)
			if err != nil {
				return err
			}
			d := decoder{b: payload}
			v = decode(id, &d)
			return d.finish()
		})
		if errors.Is(err, ErrCorrupt) {
			*corrupt++
			s.log.Warn("skipping corrupt definition", zap.Stringer("kind", kind), zap.Uint64("id", id), zap.Error(err))
			continue
		}
		if err != nil {
			return err
		}
		*out = append(*out, v)
	}
	return nil
}

// LastIDs returns the id counters: the highest id given to each kind of
// definition so far (those of deleted records included). A caller that
// assigns ids itself (Put with an ID) goes on from them, so that no id is
// reused.
func (s *Store) LastIDs() map[Kind]uint64 {
	s.defMu.Lock()
	defer s.defMu.Unlock()
	out := make(map[Kind]uint64, kindEnd)
	for k := KindVHost; k < kindEnd; k++ {
		if s.lastID[k] > 0 {
			out[k] = s.lastID[k]
		}
	}
	return out
}
