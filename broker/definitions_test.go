package broker_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
	"github.com/warrenmq/warren/store"
)

// startWithStore is startOn that also returns the store, for its
// definition hook.
func startWithStore(t *testing.T, dir string) (*brokertest.Server, *store.Store, func()) {
	t.Helper()
	st, err := store.Open(store.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s := brokertest.Start(t, &broker.Config{Store: st})
	stopped := false
	return s, st, func() {
		if stopped {
			return
		}
		stopped = true
		st.SetDefinitionHook(nil)
		st.SetJournalFault(nil)
		_ = s.Close()
		if err := st.Close(); err != nil {
			t.Errorf("closing store: %v", err)
		}
	}
}

// TestConfirmedDuringDeclareSurvivesRestart publishes persistent messages,
// mandatory and confirmed, to queues while they are being declared: every
// message confirmed and not returned was routed to its durable queue and
// must be there after a restart.
func TestConfirmedDuringDeclareSurvivesRestart(t *testing.T) {
	const queues = 20
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	defer stop()
	decl := open(t, dial(t, s))
	pub := open(t, dial(t, s))
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := pub.NotifyReturn(make(chan amqp091.Return, 1<<16))
	type sent struct {
		queue int
		id    string
		dc    *amqp091.DeferredConfirmation
	}
	var all []sent
	ctx := context.Background()
	for i := range queues {
		name := fmt.Sprintf("race-q-%d", i)
		var wg sync.WaitGroup
		wg.Add(1)
		declared := make(chan struct{})
		go func() {
			defer wg.Done()
			defer close(declared)
			if _, err := decl.QueueDeclare(name, true, false, false, false, nil); err != nil {
				t.Error(err)
			}
		}()
		for n, done := 0, false; !done || n%50 != 0; n++ {
			select {
			case <-declared:
				done = true
			default:
			}
			id := fmt.Sprintf("%d-%d", i, n)
			dc, err := pub.PublishWithDeferredConfirmWithContext(ctx, "", name, true, false, amqp091.Publishing{
				DeliveryMode: amqp091.Persistent, MessageId: id, Body: []byte(id),
			})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, sent{i, id, dc})
		}
		wg.Wait()
	}
	acked := make(map[string]int)
	for _, m := range all {
		ok, err := m.dc.WaitContext(ctx)
		if err != nil || !ok {
			t.Fatalf("message %s not confirmed: %v", m.id, err)
		}
		acked[m.id] = m.queue
	}
	// A return precedes its message's confirm: all are in returns now.
	for len(returns) > 0 {
		delete(acked, (<-returns).MessageId)
	}
	want := make([]int, queues)
	for _, q := range acked {
		want[q]++
	}
	stop()

	s, stop = startOn(t, dir)
	defer stop()
	ch := open(t, dial(t, s))
	for i := range queues {
		q, err := ch.QueueDeclarePassive(fmt.Sprintf("race-q-%d", i), true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if q.Messages != want[i] {
			t.Errorf("queue %s: %d messages after a restart, %d were confirmed", q.Name, q.Messages, want[i])
		}
	}
}

// blockDefinitions makes the store's definition writes wait until the
// returned release is called (call it before stopping the broker);
// entered receives once per write that waits.
func blockDefinitions(t *testing.T, st *store.Store) (entered <-chan struct{}, release func()) {
	t.Helper()
	in := make(chan struct{}, 16)
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	st.SetDefinitionHook(func() error {
		in <- struct{}{}
		<-gate
		return nil
	})
	return in, release
}

// waitSignal waits for c, failing the test if it does not come at all.
func waitSignal[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

// TestTopologyChangeWaitingOnStoreDoesNotStallTheVHost: while a queue
// deletion, an unbind or an exchange deletion waits for its store write, a
// publisher of the same vhost still gets its persistent message routed and
// confirmed, and a consumer gets it.
func TestTopologyChangeWaitingOnStoreDoesNotStallTheVHost(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(ch *amqp091.Channel) error
	}{
		{"queue.delete", func(ch *amqp091.Channel) error { _, err := ch.QueueDelete("victim", false, false, false); return err }},
		{"queue.unbind", func(ch *amqp091.Channel) error { return ch.QueueUnbind("victim", "k1", "x.victim", nil) }},
		{"exchange.delete", func(ch *amqp091.Channel) error { return ch.ExchangeDelete("x.victim", false, false) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, st, stop := startWithStore(t, t.TempDir())
			defer stop()
			setup := open(t, dial(t, s))
			if _, err := setup.QueueDeclare("work", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := setup.QueueDeclare("victim", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if err := setup.ExchangeDeclare("x.victim", "direct", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			for i := range 50 {
				if err := setup.QueueBind("victim", fmt.Sprintf("k%d", i), "x.victim", false, nil); err != nil {
					t.Fatal(err)
				}
			}
			cons := open(t, dial(t, s))
			deliveries, err := cons.Consume("work", "", true, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			pub := open(t, dial(t, s))
			if err := pub.Confirm(false); err != nil {
				t.Fatal(err)
			}

			entered, release := blockDefinitions(t, st)
			defer release() // before stop
			done := make(chan error, 1)
			go func() { done <- tc.change(setup) }()
			waitSignal(t, entered, "definition write")

			dc, err := pub.PublishWithDeferredConfirmWithContext(context.Background(), "", "work", false, false,
				amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("meanwhile")})
			if err != nil {
				t.Fatal(err)
			}
			waitSignal(t, dc.Done(), "confirm while a topology change waits on the store")
			if !dc.Acked() {
				t.Fatal("publish nacked")
			}
			if m := recv(t, deliveries); string(m.Body) != "meanwhile" {
				t.Fatalf("got %q", m.Body)
			}
			release()
			if err := waitSignal(t, done, "end of the topology change"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDeleteQueueWithManyBindingsIsOneStoreWrite: deleting a queue deletes
// its record and those of its 500 bindings in one store write (one sync).
func TestDeleteQueueWithManyBindingsIsOneStoreWrite(t *testing.T) {
	dir := t.TempDir()
	s, st, stop := startWithStore(t, dir)
	defer stop()
	ch := open(t, dial(t, s))
	if _, err := ch.QueueDeclare("many", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("x.many", "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		x := "amq.direct"
		if i%2 == 1 {
			x = "x.many"
		}
		if err := ch.QueueBind("many", fmt.Sprintf("k%d", i), x, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	before := st.DefinitionWrites()
	if _, err := ch.QueueDelete("many", false, false, false); err != nil {
		t.Fatal(err)
	}
	if n := st.DefinitionWrites() - before; n != 1 {
		t.Fatalf("deleting a queue with 500 bindings made %d store writes, want 1", n)
	}
	stop()
	st2, err := store.Open(store.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	d, err := st2.LoadDefinitions()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Queues) != 0 || len(d.Bindings) != 0 {
		t.Fatalf("left in the store: %d queues, %d bindings", len(d.Queues), len(d.Bindings))
	}
}

// topologyDigest describes the definitions the broker holds in memory:
// vhosts, users, permissions, and the queues, exchanges, bindings and
// policies of vhosts.
func topologyDigest(t *testing.T, b *broker.Broker, vhosts ...string) string {
	t.Helper()
	var out strings.Builder
	fmt.Fprintf(&out, "vhosts %v\n", b.VHosts())
	for _, u := range b.Users() {
		fmt.Fprintf(&out, "user %s %v\n", u.Name, u.Tags)
	}
	fmt.Fprintf(&out, "permissions %v\ntopic permissions %v\n", b.Permissions(), b.TopicPermissions())
	for _, vh := range vhosts {
		if !b.HasVHost(vh) {
			continue
		}
		qs, _ := b.Queues(vh)
		for _, q := range qs {
			fmt.Fprintf(&out, "queue %s/%s %v\n", vh, q.Name, q.Durable)
		}
		xs, _ := b.Exchanges(vh)
		for _, x := range xs {
			fmt.Fprintf(&out, "exchange %s/%s %s\n", vh, x.Name, x.Type)
		}
		bs, _ := b.Bindings(vh)
		var lines []string
		for _, bd := range bs {
			lines = append(lines, fmt.Sprintf("binding %s/%s->%s %q %v", vh, bd.Source, bd.Destination, bd.RoutingKey, bd.Arguments))
		}
		sort.Strings(lines)
		out.WriteString(strings.Join(lines, "\n") + "\n")
		ps, _ := b.Policies(vh)
		for _, p := range ps {
			fmt.Fprintf(&out, "policy %s/%s %s\n", vh, p.Name, p.Pattern)
		}
	}
	return out.String()
}

// TestFailedDefinitionWritesChangeNothing: with the store failing every
// definition write, each change over AMQP is refused with 541 and each
// administrative change returns an error; memory is left as it was, and
// after a restart the store holds the same definitions.
func TestFailedDefinitionWritesChangeNothing(t *testing.T) {
	dir := t.TempDir()
	s, st, stop := startWithStore(t, dir)
	defer stop()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ch := open(t, dial(t, s))
	_, err := ch.QueueDeclare("keep.q", true, false, false, false, nil)
	must(err)
	must(ch.ExchangeDeclare("keep.x", "direct", true, false, false, false, nil))
	must(ch.ExchangeDeclare("keep.auto", "fanout", true, true, false, false, nil))
	must(ch.QueueBind("keep.q", "k", "keep.x", false, nil))
	must(ch.QueueBind("keep.q", "", "keep.auto", false, nil))
	must(ch.ExchangeBind("keep.auto", "e", "keep.x", false, nil))
	must(s.AddVHost("keep.v"))
	must(s.PutUser("keep.u", "pw", []string{"management"}))
	must(s.SetPermissions("keep.u", "/", ".*", ".*", ".*"))
	must(s.SetTopicPermissions("keep.u", "/", "amq.topic", ".*", ".*"))
	must(s.SetPolicy("/", "keep.p", "^keep", "queues", 0, map[string]any{"max-length": 10}, false))
	must(ch.Close())
	vhosts := []string{"/", "keep.v", "f.v"}
	want := topologyDigest(t, s.Broker, vhosts...)

	fault := errors.New("disk on fire")
	st.SetDefinitionHook(func() error { return fault })
	amqpChanges := []struct {
		name string
		do   func(ch *amqp091.Channel) error
	}{
		{"queue.declare", func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("f.q", true, false, false, false, nil)
			return err
		}},
		{"exchange.declare", func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclare("f.x", "topic", true, false, false, false, nil)
		}},
		{"queue.bind", func(ch *amqp091.Channel) error { return ch.QueueBind("keep.q", "f", "keep.x", false, nil) }},
		{"exchange.bind", func(ch *amqp091.Channel) error { return ch.ExchangeBind("keep.auto", "f", "keep.x", false, nil) }},
		{"queue.unbind", func(ch *amqp091.Channel) error { return ch.QueueUnbind("keep.q", "k", "keep.x", nil) }},
		// The last binding of an auto-delete exchange: the exchange would go too.
		{"queue.unbind auto-delete", func(ch *amqp091.Channel) error { return ch.QueueUnbind("keep.q", "", "keep.auto", nil) }},
		{"exchange.unbind", func(ch *amqp091.Channel) error { return ch.ExchangeUnbind("keep.auto", "e", "keep.x", false, nil) }},
		{"queue.delete", func(ch *amqp091.Channel) error {
			_, err := ch.QueueDelete("keep.q", false, false, false)
			return err
		}},
		{"exchange.delete", func(ch *amqp091.Channel) error { return ch.ExchangeDelete("keep.x", false, false) }},
	}
	for _, c := range amqpChanges {
		ch := open(t, dial(t, s))
		if err := c.do(ch); amqpCode(err) != 541 {
			t.Errorf("%s: %v, want 541 INTERNAL_ERROR", c.name, err)
		}
	}
	adminChanges := []struct {
		name string
		do   func() error
	}{
		{"add vhost", func() error { return s.AddVHost("f.v") }},
		{"delete vhost", func() error { return s.DeleteVHost("keep.v") }},
		{"put user", func() error { return s.PutUser("f.u", "pw", nil) }},
		{"update user", func() error { return s.PutUser("keep.u", "pw2", []string{"administrator"}) }},
		{"delete user", func() error { return s.DeleteUser("keep.u") }},
		{"set permissions", func() error { return s.SetPermissions("keep.u", "keep.v", ".*", "", "") }},
		{"clear permissions", func() error { return s.ClearPermissions("keep.u", "/") }},
		{"set topic permissions", func() error { return s.SetTopicPermissions("keep.u", "/", "x", "a", "b") }},
		{"clear topic permissions", func() error { return s.ClearTopicPermissions("keep.u", "/", "amq.topic") }},
		{"set policy", func() error {
			return s.SetPolicy("/", "f.p", ".*", "all", 1, map[string]any{"max-length": 1}, false)
		}},
		{"clear policy", func() error { return s.ClearPolicy("/", "keep.p", false) }},
		{"declare queue (API)", func() error {
			return s.DeclareQueue("/", "", broker.QueueSpec{Name: "f.api", Durable: true})
		}},
	}
	for _, c := range adminChanges {
		if err := c.do(); err == nil {
			t.Errorf("%s: no error although the store failed", c.name)
		}
	}
	st.SetDefinitionHook(nil)
	if got := topologyDigest(t, s.Broker, vhosts...); got != want {
		t.Errorf("after failed changes, memory holds:\n%s\nwant:\n%s", got, want)
	}
	stop()
	s, _, stop = startWithStore(t, dir)
	defer stop()
	if got := topologyDigest(t, s.Broker, vhosts...); got != want {
		t.Fatalf("after a restart, the store holds:\n%s\nwant:\n%s", got, want)
	}
}

// TestUnencodableArgumentsAreRefused: a durable queue or binding whose
// arguments cannot be stored is refused, not stored without them.
func TestUnencodableArgumentsAreRefused(t *testing.T) {
	s := brokertest.Start(t, nil)
	bad := amqp.Table{"x-custom": struct{}{}}
	err := s.DeclareQueue("/", "", broker.QueueSpec{Name: "bad.q", Durable: true, Arguments: bad})
	if code := amqpErrorCode(err); code != 541 {
		t.Fatalf("declaring a durable queue with unencodable arguments: %v", err)
	}
	if _, err := s.Queue("/", "bad.q"); err == nil {
		t.Fatal("the queue exists")
	}
	if err := s.DeclareQueue("/", "", broker.QueueSpec{Name: "ok.q", Durable: true}); err != nil {
		t.Fatal(err)
	}
	err = s.Bind("/", "", "amq.direct", "ok.q", false, "k", bad, true)
	if code := amqpErrorCode(err); code != 541 {
		t.Fatalf("binding durable ends with unencodable arguments: %v", err)
	}
	if bs, _ := s.Bindings("/"); len(bs) != 1 { // the default exchange's
		t.Fatalf("bindings: %v", bs)
	}
}

func amqpErrorCode(err error) uint16 {
	var e *amqp.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// BenchmarkDeleteQueueWith500Bindings times queue.delete of a durable
// queue with 500 durable bindings, on a store that syncs.
func BenchmarkDeleteQueueWith500Bindings(b *testing.B) {
	st, err := store.Open(store.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	s := brokertest.Start(b, &broker.Config{Store: st})
	ch := open(b, dial(b, s))
	for b.Loop() {
		b.StopTimer()
		if _, err := ch.QueueDeclare("many", true, false, false, false, nil); err != nil {
			b.Fatal(err)
		}
		for i := range 500 {
			if err := ch.QueueBind("many", fmt.Sprintf("k%d", i), "amq.direct", false, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if _, err := ch.QueueDelete("many", false, false, false); err != nil {
			b.Fatal(err)
		}
	}
}

// TestQueueInvisibleUntilStored: while a durable queue's declaration waits
// for its store write, the queue is not there for publishers: a mandatory
// message to it comes back, rather than being journaled without the
// queue's store id.
func TestQueueInvisibleUntilStored(t *testing.T) {
	s, st, stop := startWithStore(t, t.TempDir())
	defer stop()
	decl := open(t, dial(t, s))
	pub := open(t, dial(t, s))
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := pub.NotifyReturn(make(chan amqp091.Return, 1))
	entered, release := blockDefinitions(t, st)
	defer release()
	done := make(chan error, 1)
	go func() {
		_, err := decl.QueueDeclare("slow", true, false, false, false, nil)
		done <- err
	}()
	waitSignal(t, entered, "definition write")
	dc, err := pub.PublishWithDeferredConfirmWithContext(context.Background(), "", "slow", true, false,
		amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("early")})
	if err != nil {
		t.Fatal(err)
	}
	waitSignal(t, dc.Done(), "confirm")
	select {
	case <-returns:
	default:
		t.Fatal("a message was routed to a queue whose record is not stored yet")
	}
	release()
	if err := waitSignal(t, done, "queue.declare-ok"); err != nil {
		t.Fatal(err)
	}
}

// TestAutoDeleteCascadeIsOneStoreWrite: deleting a queue whose binding was
// the last of a durable auto-delete exchange, itself the last destination
// of another, deletes the queue, both exchanges and all their bindings in
// one store write, and none of them comes back after a restart.
func TestAutoDeleteCascadeIsOneStoreWrite(t *testing.T) {
	dir := t.TempDir()
	s, st, stop := startWithStore(t, dir)
	defer stop()
	ch := open(t, dial(t, s))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := ch.QueueDeclare("leaf", true, false, false, false, nil)
	must(err)
	must(ch.ExchangeDeclare("x.inner", "direct", true, true, false, false, nil))
	must(ch.ExchangeDeclare("x.outer", "fanout", true, true, false, false, nil))
	must(ch.ExchangeDeclare("x.stays", "topic", true, false, false, false, nil))
	must(ch.QueueBind("leaf", "k", "x.inner", false, nil))
	must(ch.ExchangeBind("x.inner", "", "x.outer", false, nil))
	must(ch.ExchangeBind("x.outer", "#", "x.stays", false, nil))
	before := st.DefinitionWrites()
	_, err = ch.QueueDelete("leaf", false, false, false)
	must(err)
	if n := st.DefinitionWrites() - before; n != 1 {
		t.Fatalf("the deletion and its cascade made %d store writes, want 1", n)
	}
	check := func(when string) {
		t.Helper()
		for _, x := range []string{"x.inner", "x.outer"} {
			if _, err := s.Exchange("/", x); err == nil {
				t.Errorf("%s: exchange %s still there", when, x)
			}
		}
		if _, err := s.Exchange("/", "x.stays"); err != nil {
			t.Errorf("%s: %v", when, err)
		}
		bs, _ := s.Bindings("/")
		for _, b := range bs {
			if b.Source != "" {
				t.Errorf("%s: binding %s->%s left", when, b.Source, b.Destination)
			}
		}
	}
	check("before a restart")
	stop()
	s, _, stop = startWithStore(t, dir)
	defer stop()
	check("after a restart")
}
