package broker_test

import (
	"errors"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// TestDeadLetterStrategyDeclare: x-dead-letter-strategy is checked as
// RabbitMQ 3.10 checks it (406 with its reasons); a classic queue refuses
// the argument; a policy's dead-letter-strategy must be one of the two.
func TestDeadLetterStrategyDeclare(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	for _, tc := range []struct {
		args amqp091.Table
		text string
	}{
		{amqp091.Table{"x-queue-type": "quorum", "x-dead-letter-strategy": "foo"},
			"invalid arg 'x-dead-letter-strategy' for queue 'dls' in vhost '/': invalid_dlx_strategy"},
		{amqp091.Table{"x-queue-type": "quorum", "x-dead-letter-strategy": int32(3)},
			"invalid arg 'x-dead-letter-strategy' for queue 'dls' in vhost '/': {unacceptable_type,signedint}"},
		{amqp091.Table{"x-dead-letter-strategy": "at-least-once"},
			"invalid arg 'x-dead-letter-strategy' for queue 'dls' in vhost '/' of queue type rabbit_classic_queue"},
	} {
		ch := open(t, c)
		_, err := ch.QueueDeclare("dls", true, false, false, false, tc.args)
		expectReason(t, expectCode(t, err, 406), "PRECONDITION_FAILED - "+tc.text)
	}
	for _, v := range []string{"at-least-once", "at-most-once"} {
		ch := open(t, c)
		if _, err := ch.QueueDeclare("dls-"+v, true, false, false, false,
			amqp091.Table{"x-queue-type": "quorum", "x-dead-letter-strategy": v}); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
	}
	if err := s.SetPolicy("/", "bad", ".*", "queues", 0, map[string]any{"dead-letter-strategy": "sometimes"}, false); !errors.Is(err, broker.ErrInvalidPolicy) {
		t.Fatalf("policy with a bad dead-letter-strategy: %v", err)
	}
	if err := s.SetPolicy("/", "good", ".*", "queues", 0, map[string]any{"dead-letter-strategy": "at-least-once"}, false); err != nil {
		t.Fatal(err)
	}
}
