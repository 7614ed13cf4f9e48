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

// TestSenderSelectedNotArray: a CC or BCC header that is not an array
// closes the channel with 406, naming the header and its type as RabbitMQ
// does, and routes nothing.
func TestSenderSelectedNotArray(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	_, err := ch.QueueDeclare("a", false, false, false, false, nil)
	mustOK(t, err)
	for _, tc := range []struct {
		hdrs amqp091.Table
		want string
	}{
		{amqp091.Table{"CC": "a"}, `PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"CC",longstr}`},
		{amqp091.Table{"BCC": int32(1)}, `PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"BCC",signedint}`},
		{amqp091.Table{"CC": []any{"a"}, "BCC": amqp091.Table{}}, `PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"BCC",table}`},
	} {
		pc := open(t, c)
		closed := pc.NotifyClose(make(chan *amqp091.Error, 1))
		mustOK(t, pc.PublishWithContext(context.Background(), "", "a", false, false, amqp091.Publishing{Headers: tc.hdrs, Body: []byte("m")}))
		expectReason(t, expectClosed(t, closed, 406), tc.want)
	}
	if q, err := ch.QueueDeclarePassive("a", false, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Fatalf("a: %d messages (%v)", q.Messages, err)
	}
}
