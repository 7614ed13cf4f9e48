package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

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
