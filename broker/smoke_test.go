package broker_test

import (
	"context"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker/brokertest"
)

func TestPublishConsume(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	q, err := ch.QueueDeclare("", false, false, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume(q.Name, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := ch.PublishWithContext(context.Background(), "", q.Name, false, false, amqp091.Publishing{Body: []byte{byte('a' + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		m := recv(t, d)
		if string(m.Body) != string(rune('a'+i)) {
			t.Fatalf("got %q", m.Body)
		}
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
}
