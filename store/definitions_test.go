package store

import (
	"errors"
	"reflect"

	"github.com/dgraph-io/badger/v4"
	"testing"
)

func sampleDefinitions() *Definitions {
	return &Definitions{
		VHosts: []VHost{
			{Name: "/", Description: "default", Tags: []string{"a", "b"}, Limits: map[string]int64{"max-queues": 10, "max-connections": -1}},
			{Name: "other"},
		},
		Users: []User{
			{Name: "guest", PasswordHash: []byte{1, 2, 3, 4, 5, 6}, HashAlgorithm: "rabbit_password_hashing_sha256", Tags: []string{"administrator"}},
		},
		Permissions: []Permission{
			{User: "guest", VHost: "/", Configure: ".*", Write: ".*", Read: ""},
		},
		Exchanges: []Exchange{
			{VHost: "/", Name: "logs", Type: "topic", Durable: true, Internal: true, Args: []byte{0, 0, 0, 0}},
			{VHost: "/", Name: "tmp", Type: "fanout", AutoDelete: true},
		},
		Queues: []Queue{
			{VHost: "/", Name: "q1", Durable: true, Args: []byte("args"), Type: "classic"},
			{VHost: "/", Name: "q2", Exclusive: true, AutoDelete: true, Type: "quorum"},
		},
		Bindings: []Binding{
			{VHost: "/", Source: "logs", Destination: "q1", RoutingKey: "a.#", Args: []byte{9}},
			{VHost: "/", Source: "logs", Destination: "tmp", DestinationIsExchange: true},
		},
		Policies: []Policy{
			{VHost: "/", Name: "ttl", Pattern: "^q", ApplyTo: "queues", Priority: -3, Definition: []byte(`{"message-ttl":1000}`), Operator: true},
		},
		TopicPermissions: []TopicPermission{
			{User: "guest", VHost: "/", Exchange: "logs", Write: "^{username}\\.", Read: ".*"},
			{User: "guest", VHost: "other", Exchange: "amq.topic", Write: "", Read: "^x$"},
		},
	}
}

// putAll stores every definition of d, setting their ids.
func putAll(t *testing.T, s *Store, d *Definitions) {
	t.Helper()
	var all []any
	for i := range d.VHosts {
		all = append(all, &d.VHosts[i])
	}
	for i := range d.Users {
		all = append(all, &d.Users[i])
	}
	for i := range d.Permissions {
		all = append(all, &d.Permissions[i])
	}
	for i := range d.Exchanges {
		all = append(all, &d.Exchanges[i])
	}
	for i := range d.Queues {
		all = append(all, &d.Queues[i])
	}
	for i := range d.Bindings {
		all = append(all, &d.Bindings[i])
	}
	for i := range d.Policies {
		all = append(all, &d.Policies[i])
	}
	for i := range d.TopicPermissions {
		all = append(all, &d.TopicPermissions[i])
	}
	for _, def := range all {
		if _, err := s.Put(def); err != nil {
			t.Fatalf("Put(%T): %v", def, err)
		}
	}
}

func TestDefinitionsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	want := sampleDefinitions()
	putAll(t, s, want)
	if want.VHosts[0].ID != 1 || want.VHosts[1].ID != 2 || want.Queues[1].ID != 2 || want.Policies[0].ID != 1 ||
		want.TopicPermissions[1].ID != 2 {
		t.Fatalf("ids not assigned per kind from 1: %+v %+v", want.VHosts, want.Queues)
	}
	got, err := s.LoadDefinitions()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("LoadDefinitions:\n got %+v\nwant %+v", got, want)
	}

	mustClose(t, s)
	s = openTest(t, dir)
	got, err = s.LoadDefinitions()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen:\n got %+v\nwant %+v", got, want)
	}

	// Overwrite by id.
	q := want.Queues[0]
	q.Durable = false
	q.Args = nil
	if id, err := s.Put(&q); err != nil || id != q.ID {
		t.Fatalf("overwrite: id %d, %v", id, err)
	}
	got, _ = s.LoadDefinitions()
	if len(got.Queues) != 2 || !reflect.DeepEqual(got.Queues[0], q) {
		t.Fatalf("after overwrite: %+v", got.Queues)
	}
	tp := want.TopicPermissions[0]
	tp.Write = "^new$"
	if id, err := s.Put(&tp); err != nil || id != tp.ID {
		t.Fatalf("overwrite topic permission: id %d, %v", id, err)
	}
	got, _ = s.LoadDefinitions()
	if len(got.TopicPermissions) != 2 || !reflect.DeepEqual(got.TopicPermissions[0], tp) {
		t.Fatalf("after topic permission overwrite: %+v", got.TopicPermissions)
	}
}

// TestKindNumbers pins the kind values: they are part of the key layout.
func TestKindNumbers(t *testing.T) {
	for kind, want := range map[Kind]uint8{KindVHost: 1, KindUser: 2, KindPermission: 3, KindExchange: 4,
		KindQueue: 5, KindBinding: 6, KindPolicy: 7, KindTopicPermission: 8} {
		if uint8(kind) != want {
			t.Errorf("%s = %d, want %d", kind, uint8(kind), want)
		}
	}
	if KindTopicPermission.String() != "topic permission" {
		t.Errorf("String = %q", KindTopicPermission.String())
	}
}

func TestDefinitionsDelete(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	want := sampleDefinitions()
	putAll(t, s, want)

	if err := s.Delete(KindQueue, want.Queues[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(KindUser, want.Users[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(KindTopicPermission, want.TopicPermissions[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(KindUser, want.Users[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(Kind(0), 1); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("Delete of kind 0: %v", err)
	}
	mustClose(t, s)

	s = openTest(t, dir)
	got, err := s.LoadDefinitions()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Queues) != 1 || got.Queues[0].Name != "q1" || len(got.Users) != 0 {
		t.Fatalf("after delete and reopen: queues %+v users %+v", got.Queues, got.Users)
	}
	if !reflect.DeepEqual(got.TopicPermissions, want.TopicPermissions[1:]) {
		t.Fatalf("topic permissions after delete and reopen: %+v", got.TopicPermissions)
	}
	// Ids are not reused, even for the highest deleted one, across a reopen.
	q := Queue{VHost: "/", Name: "q3"}
	if id, err := s.Put(&q); err != nil || id != 3 {
		t.Fatalf("Put after delete: id %d, %v; want 3", id, err)
	}
	// An explicit id above the counter moves it.
	p := Policy{ID: 100, Name: "p"}
	if _, err := s.Put(&p); err != nil {
		t.Fatal(err)
	}
	p2 := Policy{Name: "p2"}
	if id, _ := s.Put(&p2); id != 101 {
		t.Fatalf("id after explicit 100: %d", id)
	}
}

func TestPutUnknown(t *testing.T) {
	s := openTest(t, t.TempDir())
	for _, def := range []any{nil, VHost{}, (*VHost)(nil), "x", &Definitions{}} {
		if _, err := s.Put(def); !errors.Is(err, ErrUnknownKind) {
			t.Errorf("Put(%#v): %v, want ErrUnknownKind", def, err)
		}
	}
}

func TestCorruptDefinition(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	want := sampleDefinitions()
	putAll(t, s, want)
	mustClose(t, s)

	flipByte(t, dir, defKey(KindQueue, want.Queues[0].ID), -1)
	rawUpdate(t, dir, func(txn *badger.Txn) error {
		return txn.Set(defKey(KindBinding, want.Bindings[1].ID), []byte{1, 2, 3})
	})

	s = openTest(t, dir)
	got, err := s.LoadDefinitions()
	if err != nil {
		t.Fatal(err)
	}
	if got.Corrupt != 2 {
		t.Fatalf("Corrupt = %d, want 2", got.Corrupt)
	}
	if !reflect.DeepEqual(got.Queues, want.Queues[1:]) || !reflect.DeepEqual(got.Bindings, want.Bindings[:1]) {
		t.Fatalf("queues %+v bindings %+v", got.Queues, got.Bindings)
	}
	if !reflect.DeepEqual(got.VHosts, want.VHosts) || !reflect.DeepEqual(got.Policies, want.Policies) {
		t.Fatal("other kinds changed")
	}
}

func TestDecodeTruncated(t *testing.T) {
	def := sampleDefinitions().VHosts[0]
	payload := def.appendTo(nil)
	for n := range len(payload) {
		d := decoder{b: payload[:n]}
		decodeVHost(1, &d)
		if err := d.finish(); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decode of %d/%d bytes: %v", n, len(payload), err)
		}
	}
	d := decoder{b: append(payload, 0)}
	decodeVHost(1, &d)
	if err := d.finish(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing byte: %v", err)
	}
}

// TestDefinitionsUpdate: Update writes its puts and deletes together, as one
// write; a failed write (the definition hook's fault) leaves the store as it
// was and assigns no ids.
func TestDefinitionsUpdate(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	q := &Queue{VHost: "/", Name: "q", Durable: true}
	b1 := &Binding{VHost: "/", Source: "x", Destination: "q", RoutingKey: "a"}
	if err := s.Update([]any{q, b1}, nil); err != nil {
		t.Fatal(err)
	}
	if q.ID == 0 || b1.ID == 0 {
		t.Fatalf("ids not set: queue %d binding %d", q.ID, b1.ID)
	}
	writes := s.DefinitionWrites()
	b2 := &Binding{VHost: "/", Source: "x", Destination: "q", RoutingKey: "b"}
	if err := s.Update([]any{b2}, []DefRef{{KindQueue, q.ID}, {KindBinding, b1.ID}, {KindBinding, 999}}); err != nil {
		t.Fatal(err)
	}
	if got := s.DefinitionWrites() - writes; got != 1 {
		t.Fatalf("Update made %d writes, want 1", got)
	}

	fault := errors.New("injected")
	s.SetDefinitionHook(func() error { return fault })
	x := &Exchange{VHost: "/", Name: "x", Type: "direct", Durable: true}
	if err := s.Update([]any{x}, []DefRef{{KindBinding, b2.ID}}); !errors.Is(err, fault) {
		t.Fatalf("Update with a fault: %v", err)
	}
	if _, err := s.Put(&Exchange{VHost: "/", Name: "y"}); !errors.Is(err, fault) {
		t.Fatalf("Put with a fault: %v", err)
	}
	if err := s.Delete(KindBinding, b2.ID); !errors.Is(err, fault) {
		t.Fatalf("Delete with a fault: %v", err)
	}
	if x.ID != 0 {
		t.Fatalf("failed Update set id %d", x.ID)
	}
	s.SetDefinitionHook(nil)
	mustClose(t, s)

	s = openTest(t, dir)
	defer mustClose(t, s)
	d, err := s.LoadDefinitions()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Queues) != 0 || len(d.Exchanges) != 0 || len(d.Bindings) != 1 || d.Bindings[0].RoutingKey != "b" {
		t.Fatalf("after updates: queues %v exchanges %v bindings %v", d.Queues, d.Exchanges, d.Bindings)
	}
}

// A user's limits survive a reopen; a user without limits is stored as
// before users had limits and loads with none.
func TestUserLimitsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	users := []User{
		{Name: "limited", PasswordHash: []byte{1, 2, 3, 4}, HashAlgorithm: "rabbit_password_hashing_sha256",
			Limits: map[string]int64{"max-connections": 2, "max-channels": -1}},
		{Name: "free", Tags: []string{"management"}},
	}
	for i := range users {
		if _, err := s.Put(&users[i]); err != nil {
			t.Fatal(err)
		}
	}
	if b := (&users[1]).appendTo(nil); !reflect.DeepEqual(b, appendStrings(appendString(appendBytes(appendString(nil, "free"), nil), ""), []string{"management"})) {
		t.Errorf("a user without limits is not stored in the old form: %v", b)
	}
	mustClose(t, s)
	s = openTest(t, dir)
	got, err := s.LoadDefinitions()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Users, users) {
		t.Fatalf("users:\n got %+v\nwant %+v", got.Users, users)
	}
}

// TestQueueNode: a queue record keeps its home node; a record without one
// (written before nodes, or on a single node) loads with none.
func TestQueueNode(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for _, q := range []*Queue{
		{VHost: "/", Name: "homed", Durable: true, Type: "classic", Node: "warren@a"},
		{VHost: "/", Name: "plain", Durable: true, Type: "classic"},
	} {
		if _, err := s.Put(q); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, s)
	s = openTest(t, dir)
	defer mustClose(t, s)
	d, err := s.LoadDefinitions()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, q := range d.Queues {
		got[q.Name] = q.Node
	}
	if len(got) != 2 || got["homed"] != "warren@a" || got["plain"] != "" || d.Corrupt != 0 {
		t.Fatalf("queues loaded with nodes %v (%d corrupt), want homed on warren@a, plain on none", got, d.Corrupt)
	}
}

// UpdateAppliedQueued writes through the journal writer, in order with the
// direct writes: its ids are given at once, done runs once it is durable,
// and a direct UpdateApplied made after it is written after it (its index
// wins). A reopened store holds the last state and index.
func TestUpdateAppliedQueued(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	q := &Queue{VHost: "/", Name: "q", Durable: true}
	b1 := &Binding{VHost: "/", Source: "x", Destination: "q", RoutingKey: "a"}
	dones := make(chan error, 3)
	if err := s.UpdateAppliedQueued(5, []any{q, b1}, nil, func(err error) { dones <- err }); err != nil {
		t.Fatal(err)
	}
	if q.ID == 0 || b1.ID == 0 {
		t.Fatalf("ids not set: queue %d binding %d", q.ID, b1.ID)
	}
	if err := s.UpdateAppliedQueued(6, nil, []DefRef{{KindQueue, q.ID}}, func(err error) { dones <- err }); err != nil {
		t.Fatal(err)
	}
	x := &Exchange{VHost: "/", Name: "x", Type: "direct", Durable: true}
	if err := s.UpdateAppliedQueued(7, []any{x}, nil, func(err error) { dones <- err }); err != nil {
		t.Fatal(err)
	}
	// A direct write made now goes after the queued ones.
	y := &Exchange{VHost: "/", Name: "y", Type: "fanout", Durable: true}
	if err := s.UpdateApplied(8, []any{y}, nil); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case err := <-dones:
			if err != nil {
				t.Fatalf("queued write: %v", err)
			}
		default:
			t.Fatal("a queued write was not done when the direct write after it returned")
		}
	}
	if x.ID == 0 || y.ID <= x.ID {
		t.Fatalf("exchange ids %d then %d", x.ID, y.ID)
	}
	fault := errors.New("injected")
	s.SetDefinitionHook(func() error { return fault })
	if err := s.UpdateAppliedQueued(9, []any{&Exchange{VHost: "/", Name: "z"}}, nil, func(error) { t.Error("done called for a refused write") }); !errors.Is(err, fault) {
		t.Fatalf("queued write with a fault: %v", err)
	}
	s.SetDefinitionHook(nil)
	mustClose(t, s)

	s = openTest(t, dir)
	defer mustClose(t, s)
	d, err := s.LoadDefinitions()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Queues) != 0 || len(d.Bindings) != 1 || len(d.Exchanges) != 2 {
		t.Fatalf("after queued updates: queues %v bindings %v exchanges %v", d.Queues, d.Bindings, d.Exchanges)
	}
	if idx, err := s.DefinitionsApplied(); err != nil || idx != 8 {
		t.Fatalf("applied index %d (%v), want 8", idx, err)
	}
	// Ids go on from the queued writes' counters.
	z := &Exchange{VHost: "/", Name: "z", Type: "direct", Durable: true}
	if _, err := s.Put(z); err != nil || z.ID <= y.ID {
		t.Fatalf("id after reopen %d (%v), last %d", z.ID, err, y.ID)
	}
}
