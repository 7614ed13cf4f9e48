package broker_test

import (
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// TestConsumerTimeoutClosesChannelWithoutCancelNotify: a client that does
// not advertise consumer_cancel_notify cannot be sent basic.cancel, so a
// timed-out delivery closes the channel with 406 and the message goes
// back to the queue.
func TestConsumerTimeoutClosesChannelWithoutCancelNotify(t *testing.T) {
	s := brokertest.Start(t, &broker.Config{ConsumerTimeout: 100 * time.Millisecond})
	r := rawOpen(t, s.Addr, defaultTune) // capabilities: authentication_failure_close only
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	r.send(1, &amqp.QueueDeclare{Queue: "ct"})
	rawExpect[*amqp.QueueDeclareOk](r, 1)
	r.send(1, &amqp.BasicConsume{Queue: "ct", ConsumerTag: "slow"})
	rawExpect[*amqp.BasicConsumeOk](r, 1)

	ch := open(t, dial(t, s))
	publish(t, ch, "", "ct", amqp091.Publishing{Body: []byte("m")})
	rawExpect[*amqp.BasicDeliver](r, 1)
	// Header and body frames of the delivery, then the close.
	for i := 0; i < 2; i++ {
		if _, err := r.next(); err != nil {
			t.Fatal(err)
		}
	}
	cl := rawExpect[*amqp.ChannelClose](r, 1)
	if cl.ReplyCode != amqp.PreconditionFailed || !strings.Contains(cl.ReplyText, "delivery acknowledgement on channel 1 timed out. Timeout value used: 100 ms") {
		t.Fatalf("channel.close %d %q", cl.ReplyCode, cl.ReplyText)
	}
	r.send(1, &amqp.ChannelCloseOk{})
	d := getOne(t, ch, "ct")
	if !d.Redelivered || string(d.Body) != "m" {
		t.Fatalf("requeued %q redelivered=%v", d.Body, d.Redelivered)
	}
}
