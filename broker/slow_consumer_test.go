package broker_test

import (
	"context"
	"net"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// A consumer whose client stops reading its socket is capped by its
// connection's outbound buffer: the messages for it stay in its queue, and
// a consumer of another queue keeps its rate.
func TestSlowConsumerDoesNotSlowOthers(t *testing.T) {
	s := brokertest.Start(t, &broker.Config{OutboundCap: 64 << 10})
	pc := dial(t, s)
	pch := open(t, pc)
	for _, q := range []string{"slow", "fast"} {
		if _, err := pch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}

	// The slow client consumes, then never reads again.
	r := rawOpen(t, s.Addr, defaultTune)
	_ = r.nc.(*net.TCPConn).SetReadBuffer(4096)
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	r.send(1, &amqp.BasicConsume{Queue: "slow", NoAck: true})
	rawExpect[*amqp.BasicConsumeOk](r, 1)

	big := make([]byte, 64<<10)
	const slowN = 400 // 25 MiB: far more than the socket buffers hold
	for range slowN {
		if err := pch.PublishWithContext(context.Background(), "", "slow", false, false, amqp091.Publishing{Body: big}); err != nil {
			t.Fatal(err)
		}
	}
	ready := func() int {
		q, err := pch.QueueDeclarePassive("slow", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q.Messages
	}
	waitFor(t, "the slow consumer to be capped", func() bool {
		n1 := ready()
		time.Sleep(50 * time.Millisecond)
		return n1 > 0 && ready() == n1
	})

	cc := dial(t, s)
	cch := open(t, cc)
	d, err := cch.Consume("fast", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	const fastN = 5000
	start := time.Now()
	go func() {
		for range fastN {
			_ = pch.PublishWithContext(context.Background(), "", "fast", false, false, amqp091.Publishing{Body: []byte("x")})
		}
	}()
	for range fastN {
		recv(t, d)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("%d messages took %v beside a stuck consumer", fastN, el)
	}
	if n := ready(); n == 0 {
		t.Fatal("the slow consumer's queue drained: its client was not capped")
	}
}
