package broker_test

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker/brokertest"
)

func TestQuorumQueueDeclareRules(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	q := amqp091.Table{"x-queue-type": "quorum"}
	for _, tc := range []struct {
		exclusive, autoDelete bool
		text                  string
	}{
		{true, false, "invalid property 'exclusive-owner' for queue 'qq' in vhost '/'"},
		{false, true, "invalid property 'auto-delete' for queue 'qq' in vhost '/'"},
	} {
		ch := open(t, c)
		_, err := ch.QueueDeclare("qq", true, tc.autoDelete, tc.exclusive, false, q)
		expectReason(t, expectCode(t, err, 406), "PRECONDITION_FAILED - "+tc.text)
	}
	ch := open(t, c)
	args := amqp091.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(5), "x-quorum-initial-group-size": int32(3),
		"x-max-in-memory-length": int32(10), "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
	if _, err := ch.QueueDeclare("qq", true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	// Redeclaring as another type is refused, as RabbitMQ does.
	_, err := ch.QueueDeclare("qq", true, false, false, false, amqp091.Table{"x-queue-type": "classic"})
	expectCode(t, err, 406)
	qi, err := s.Queue("/", "qq")
	if err != nil || qi.Type != "quorum" {
		t.Fatalf("queue info %+v %v", qi, err)
	}
}

func TestQuorumQueueKeepsTransientMessagesAndCountsDeliveries(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	ch := open(t, dial(t, s))
	declareLimitedQuorum(t, ch)
	confirmedPublish(t, ch, "qq", "t", 3, amqp091.Transient, amqp091.Publishing{})
	stop()

	s, stop = startOn(t, dir)
	defer stop()
	ch = open(t, dial(t, s))
	// Transient messages of a quorum queue are on disk like any other.
	for i := 0; i < 3; i++ {
		m, ok, err := ch.Get("qq", false)
		if err != nil || !ok || string(m.Body) != "t"+string(rune('0'+i)) {
			t.Fatalf("after restart, get %d: %q %v %v", i, m.Body, ok, err)
		}
		if i > 0 {
			if err := m.Ack(false); err != nil {
				t.Fatal(err)
			}
			continue
		}
		// The first one is rejected back until the delivery limit
		// dead-letters it; basic.get counts the earlier deliveries, from 0
		// (as RabbitMQ 3.10 does).
		if m.Headers["x-delivery-count"] != int64(0) {
			t.Fatalf("first get: %v", m.Headers)
		}
		if err := m.Reject(true); err != nil {
			t.Fatal(err)
		}
		for want := int64(1); want <= 2; want++ {
			m, ok, err = ch.Get("qq", false)
			if err != nil || !ok || string(m.Body) != "t0" || m.Headers["x-delivery-count"] != want || !m.Redelivered {
				t.Fatalf("redelivery %d: %q %v %v %v", want, m.Body, m.Headers, ok, err)
			}
			if err := m.Reject(true); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, "dead-lettered after the delivery limit", func() bool {
		qi, err := s.Queue("/", "dlq")
		return err == nil && qi.Ready == 1
	})
	qi, _ := s.Queue("/", "qq")
	if qi.Ready != 0 {
		t.Fatalf("%d left in qq", qi.Ready)
	}
}

// Consumers see x-delivery-count on redeliveries only (RabbitMQ 3.10).
func TestQuorumQueueConsumerDeliveryCount(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	if _, err := ch.QueueDeclare("qc", true, false, false, false, amqp091.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	confirmedPublish(t, ch, "qc", "m", 1, amqp091.Transient, amqp091.Publishing{Headers: amqp091.Table{"a": "b"}})
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume("qc", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, d)
	if _, has := m.Headers["x-delivery-count"]; has || m.Headers["a"] != "b" {
		t.Fatalf("first delivery: %v", m.Headers)
	}
	_ = m.Nack(false, true)
	m = recv(t, d)
	if m.Headers["x-delivery-count"] != int64(1) || m.Headers["a"] != "b" || !m.Redelivered {
		t.Fatalf("redelivery: %v", m.Headers)
	}
}

// declareLimitedQuorum declares quorum queue "qq" with a delivery limit of
// 2 that dead-letters to durable queue "dlq".
func declareLimitedQuorum(t *testing.T, ch *amqp091.Channel) {
	t.Helper()
	if _, err := ch.QueueDeclare("dlq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("qq", true, false, false, false, amqp091.Table{
		"x-queue-type": "quorum", "x-delivery-limit": int32(2),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq",
	}); err != nil {
		t.Fatal(err)
	}
}
