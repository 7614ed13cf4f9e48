package broker_test

import (
	"sync"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
	"github.com/warrenmq/warren/store"
)

// startLoggedBroker starts a broker whose definitions go through a
// LocalLog kept in a store in dir (CommandDefinitionLog over
// DefinitionStateMachine): the shape a cluster's metadata group takes.
// stop closes the broker, the log and the store, once.
func startLoggedBroker(t *testing.T, dir string) (s *brokertest.Server, l *broker.LocalLog, stop func()) {
	t.Helper()
	st, err := store.Open(store.Config{Dir: dir, NoSync: true, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	s = brokertest.Start(t, &broker.Config{DefinitionLog: func(m broker.DefinitionMachine) broker.DefinitionLog {
		l, err = broker.NewLocalLog(broker.LocalLogConfig{Store: st, LogID: 1, Machine: broker.DefinitionStateMachine(m), Logger: zaptest.NewLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return broker.CommandDefinitionLog(l)
	}})
	// Started once the broker is built: the log replays into it.
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = s.Close()
			_ = l.Close()
			_ = st.Close()
		})
	}
	t.Cleanup(stop)
	return s, l, stop
}

// TestDefinitionsThroughCommandLog: declarations made over AMQP go through
// the command log and are applied from it; a broker that replays the log
// has the same definitions.
func TestDefinitionsThroughCommandLog(t *testing.T) {
	dir := t.TempDir()
	s, l, stop := startLoggedBroker(t, dir)
	ch := open(t, dial(t, s))
	if err := ch.ExchangeDeclare("logged-x", "topic", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("logged-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("logged-q", "a.#", "logged-x", false, nil); err != nil {
		t.Fatal(err)
	}
	if l.AppliedIndex() < 3 {
		t.Fatalf("log applied %d commands, want the 3 declarations", l.AppliedIndex())
	}
	if err := ch.Publish("logged-x", "a.b", false, false, amqp091.Publishing{Body: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "routed message", func() bool {
		q, err := ch.QueueDeclarePassive("logged-q", false, false, false, false, nil)
		return err == nil && q.Messages == 1
	})
	// A double declaration is refused by the apply, through the log.
	if err := ch.ExchangeDeclare("logged-x", "direct", false, false, false, false, nil); amqpCode(err) != 406 {
		t.Fatalf("redeclare with another type: %v, want 406", err)
	}
	applied := l.AppliedIndex()
	stop()

	// Replayed into a new broker from the same log.
	s2, l2, _ := startLoggedBroker(t, dir)
	if l2.AppliedIndex() != applied {
		t.Fatalf("replayed to index %d, want %d", l2.AppliedIndex(), applied)
	}
	ch2 := open(t, dial(t, s2))
	if err := ch2.ExchangeDeclarePassive("logged-x", "topic", false, false, false, false, nil); err != nil {
		t.Fatalf("exchange after replay: %v", err)
	}
	if _, err := ch2.QueueDeclarePassive("logged-q", false, false, false, false, nil); err != nil {
		t.Fatalf("queue after replay: %v", err)
	}
	if err := ch2.Publish("logged-x", "a.c", false, false, amqp091.Publishing{Body: []byte("again")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "routed after replay", func() bool {
		q, err := ch2.QueueDeclarePassive("logged-q", false, false, false, false, nil)
		return err == nil && q.Messages == 1
	})
}
