package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

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
