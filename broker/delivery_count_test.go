package broker_test

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestQuorumDeliveryCountSurvivesRestart: a quorum queue's delivery count
// is kept across a restart at every redelivery, not only the first, so
// x-delivery-limit dead-letters a message as if there had been no restart.
func TestQuorumDeliveryCountSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	ch := open(t, dial(t, s))
	declareLimitedQuorum(t, ch)
	confirmedPublish(t, ch, "qq", "m", 1, amqp091.Persistent, amqp091.Publishing{})
	// Delivered and requeued twice: the limit of 2 returns is reached.
	for i := 0; i < 2; i++ {
		m, ok, err := ch.Get("qq", false)
		if err != nil || !ok {
			t.Fatalf("get %d: %v %v", i, ok, err)
		}
		if err := m.Reject(true); err != nil {
			t.Fatal(err)
		}
	}
	stop()

	s, stop = startOn(t, dir)
	defer stop()
	ch = open(t, dial(t, s))
	m, ok, err := ch.Get("qq", false)
	if err != nil || !ok {
		t.Fatalf("get after restart: %v %v", ok, err)
	}
	if got := m.Headers["x-delivery-count"]; got != int64(2) {
		t.Fatalf("x-delivery-count after restart = %v, want 2", got)
	}
	// The third return is over the limit: dead-lettered.
	if err := m.Reject(true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "dead-lettered message", func() bool { return queueInfo(t, s, "dlq").Ready == 1 })
	if qi := queueInfo(t, s, "qq"); qi.Ready+qi.Unacked != 0 {
		t.Fatalf("qq still holds the message: %+v", qi)
	}
}
