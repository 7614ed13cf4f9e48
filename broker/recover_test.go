package broker_test

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// A panic in a connection's reader or writer closes that connection with
// 541 INTERNAL_ERROR; the broker and its other connections go on.
func TestConnPanicClosesOnlyThatConnection(t *testing.T) {
	s := brokertest.Start(t, nil)
	broker.SetMethodHook(func(m amqp.Method) {
		if d, ok := m.(*amqp.QueueDeclare); ok && d.Queue == "panic-in-reader" {
			panic("test: reader panic")
		}
	})
	broker.SetWriteHook(func(name string) {
		if name == "panic-in-writer" {
			panic("test: writer panic")
		}
	})
	t.Cleanup(func() {
		broker.SetMethodHook(nil)
		broker.SetWriteHook(nil)
	})
	other := dial(t, s)

	r := rawOpen(t, s.Addr, defaultTune)
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	r.send(1, &amqp.QueueDeclare{Queue: "panic-in-reader"})
	if cl := r.expectConnClose(amqp.InternalError); cl.ReplyText != "INTERNAL_ERROR - internal error" {
		t.Fatalf("reply text %q", cl.ReplyText)
	}
	publishConsume(t, other)

	c, err := amqp091.DialConfig(s.URL, amqp091.Config{Properties: amqp091.Table{"connection_name": "panic-in-writer"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	closed := notifyConnClose(c)
	// channel.open-ok is the writer's first write.
	_, _ = c.Channel()
	expectClosed(t, closed, amqp091.InternalError)
	publishConsume(t, other)
	publishConsume(t, dial(t, s))
	waitFor(t, "the panicked connections to go", func() bool { return len(s.Connections()) == 2 })
}
