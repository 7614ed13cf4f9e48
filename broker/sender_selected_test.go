package broker_test

import (
	"context"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker/brokertest"
)

// TestSenderSelectedDistribution: CC and BCC headers route the message
// with extra keys (each queue gets one copy), CC stays in the message and
// BCC is removed, as in RabbitMQ.
func TestSenderSelectedDistribution(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	for _, q := range []string{"a", "b", "c", "d"} {
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q, q, "amq.direct", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	err := ch.PublishWithContext(context.Background(), "amq.direct", "a", false, false, amqp091.Publishing{
		Headers: amqp091.Table{"CC": []any{"b", "a"}, "BCC": []any{"c"}, "keep": "me"},
		Body:    []byte("m"),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"a", "b", "c"} {
		var m amqp091.Delivery
		waitFor(t, "a copy in "+q, func() bool {
			var ok bool
			m, ok, err = ch.Get(q, true)
			return err == nil && ok
		})
		if _, ok := m.Headers["BCC"]; ok {
			t.Fatalf("%s: BCC reached the consumer: %v", q, m.Headers)
		}
		cc, _ := m.Headers["CC"].([]any)
		if len(cc) != 2 || m.Headers["keep"] != "me" || string(m.Body) != "m" {
			t.Fatalf("%s: headers %v", q, m.Headers)
		}
		if _, ok, _ := ch.Get(q, true); ok {
			t.Fatalf("%s got a second copy", q)
		}
	}
	if q, err := ch.QueueDeclarePassive("d", false, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Fatalf("d: %d messages (%v)", q.Messages, err)
	}
}
