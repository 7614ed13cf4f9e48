package broker_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker/brokertest"
)

// Publishes to many queues are enqueued in batches (batch.go). These tests
// send, in one write, publishes that form a batch followed by frames that
// must see them enqueued, and check what those frames see.

// batchQueues is more than the fewest destinations a batched publish has.
const batchQueues = 20

// fanoutWithQueues declares fanout exchange ex bound to n queues ex-0 ..
// ex-(n-1) on channel 1 of r, and waits until they exist.
func fanoutWithQueues(r *rawConn, ex string, n int) {
	r.t.Helper()
	var b []byte
	b = amqp.AppendMethodFrame(b, 1, &amqp.ExchangeDeclare{Exchange: ex, Type: "fanout", NoWait: true})
	for i := range n {
		q := fmt.Sprintf("%s-%d", ex, i)
		b = amqp.AppendMethodFrame(b, 1, &amqp.QueueDeclare{Queue: q, NoWait: true})
		b = amqp.AppendMethodFrame(b, 1, &amqp.QueueBind{Queue: q, Exchange: ex, NoWait: true})
	}
	r.write(b)
	rawSync(r, 1)
}

// appendPublish appends basic.publish of body to ex/key on channel.
func appendPublish(b []byte, channel uint16, ex, key, body string, mandatory bool) []byte {
	b = amqp.AppendMethodFrame(b, channel, &amqp.BasicPublish{Exchange: ex, RoutingKey: key, Mandatory: mandatory})
	b = amqp.AppendHeaderFrame(b, channel, amqp.ClassBasic, uint64(len(body)), &amqp.Properties{})
	return amqp.AppendBodyFrames(b, channel, []byte(body), 131072)
}

// rawGetBody reads basic.get-ok and its content on channel and returns
// the body and the message count.
func rawGetBody(r *rawConn, channel uint16) (string, uint32) {
	r.t.Helper()
	ok := rawExpect[*amqp.BasicGetOk](r, channel)
	body := rawContent(r)
	return body, ok.MessageCount
}

// rawContent reads a content header and its body frames.
func rawContent(r *rawConn) string {
	r.t.Helper()
	f, err := r.next()
	if err != nil || f.Type != amqp.FrameHeader {
		r.t.Fatalf("want content header, got %+v, %v", f, err)
	}
	// class id, weight, then the body size.
	size := int(binary.BigEndian.Uint64(f.Payload[4:12]))
	var body []byte
	for len(body) < size {
		f, err := r.next()
		if err != nil || f.Type != amqp.FrameBody {
			r.t.Fatalf("want body, got %+v, %v", f, err)
		}
		body = append(body, f.Payload...)
	}
	return string(body)
}

// TestBatchedPublishesSeenByLaterFrames: a basic.get on another channel,
// a publish on another channel and a queue.declare on the publishing
// channel, read right after a batch of fanout publishes, all find the
// batch enqueued, in publish order.
func TestBatchedPublishesSeenByLaterFrames(t *testing.T) {
	s := brokertest.Start(t, nil)
	r := rawOpen(t, s.Addr, defaultTune)
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	r.send(2, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 2)
	fanoutWithQueues(r, "bf", batchQueues)

	const n = 50
	var b []byte
	for i := range n {
		b = appendPublish(b, 1, "bf", "", fmt.Sprintf("m%d", i), false)
	}
	// Another channel takes from one queue and publishes to another.
	b = amqp.AppendMethodFrame(b, 2, &amqp.BasicGet{Queue: "bf-0", NoAck: true})
	b = appendPublish(b, 2, "", "bf-1", "direct", false)
	// The publishing channel counts a third queue.
	b = amqp.AppendMethodFrame(b, 1, &amqp.QueueDeclare{Queue: "bf-2", Passive: true})
	r.write(b)

	body, count := rawGetBody(r, 2)
	if body != "m0" || count != n-1 {
		t.Fatalf("basic.get after the batch: %q with %d left, want m0 with %d left", body, count, n-1)
	}
	ok := rawExpect[*amqp.QueueDeclareOk](r, 1)
	if ok.MessageCount != n {
		t.Fatalf("queue.declare after the batch: %d messages, want %d", ok.MessageCount, n)
	}
	// bf-1 holds the batch, then the direct publish.
	for i := range n + 1 {
		r.send(2, &amqp.BasicGet{Queue: "bf-1", NoAck: true})
		got, _ := rawGetBody(r, 2)
		want := fmt.Sprintf("m%d", i)
		if i == n {
			want = "direct"
		}
		if got != want {
			t.Fatalf("bf-1 message %d: %q, want %q", i, got, want)
		}
	}
}

// TestBatchedPublishesBeforeChannelError: publishes batched before a
// publish that closes their channel (unknown exchange) are enqueued.
func TestBatchedPublishesBeforeChannelError(t *testing.T) {
	s := brokertest.Start(t, nil)
	r := rawOpen(t, s.Addr, defaultTune)
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	fanoutWithQueues(r, "be", batchQueues)
	var b []byte
	for i := range 30 {
		b = appendPublish(b, 1, "be", "", fmt.Sprintf("m%d", i), false)
	}
	b = amqp.AppendMethodFrame(b, 1, &amqp.BasicPublish{Exchange: "missing"})
	r.write(b)
	cl := rawExpect[*amqp.ChannelClose](r, 1)
	if cl.ReplyCode != amqp.NotFound {
		t.Fatalf("channel.close %d %q, want 404", cl.ReplyCode, cl.ReplyText)
	}
	r.send(1, &amqp.ChannelCloseOk{})
	r.send(2, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 2)
	for i := range batchQueues {
		r.send(2, &amqp.QueueDeclare{Queue: fmt.Sprintf("be-%d", i), Passive: true})
		if ok := rawExpect[*amqp.QueueDeclareOk](r, 2); ok.MessageCount != 30 {
			t.Fatalf("be-%d holds %d messages, want 30", i, ok.MessageCount)
		}
	}
}

// TestBatchedFanoutConfirmsAndOrder: a confirming publisher pipelining to
// a fanout with consumers on every queue gets every confirm, and every
// consumer gets every message once, in order.
func TestBatchedFanoutConfirmsAndOrder(t *testing.T) {
	s := brokertest.Start(t, nil)
	pc := dial(t, s)
	pch := open(t, pc)
	if err := pch.ExchangeDeclare("bc", "fanout", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	cc := dial(t, s)
	var deliveries []<-chan amqp091.Delivery
	for i := range batchQueues {
		ch := open(t, cc)
		q := fmt.Sprintf("bc-%d", i)
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q, "", "bc", false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.Qos(100, 0, false); err != nil {
			t.Fatal(err)
		}
		d, err := ch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		deliveries = append(deliveries, d)
	}
	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := pch.NotifyPublish(make(chan amqp091.Confirmation, 4096))
	const n = 2000
	for i := range n {
		if err := pch.Publish("bc", "", false, false, amqp091.Publishing{Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		select {
		case c := <-confirms:
			if !c.Ack || c.DeliveryTag != uint64(i+1) {
				t.Fatalf("confirm %d: %+v", i+1, c)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("confirm %d missing", i+1)
		}
	}
	for qi, d := range deliveries {
		for i := range n {
			m := recv(t, d)
			if string(m.Body) != fmt.Sprint(i) {
				t.Fatalf("queue bc-%d delivery %d: %q", qi, i, m.Body)
			}
			if err := m.Ack(false); err != nil {
				t.Fatal(err)
			}
		}
	}
}
