package broker_test

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// A client that pipelines basic.get and mandatory unroutable publishes and
// never reads: every reply goes to the outbound buffer, which must stay
// within its limit, twice the cap (plus the one reply that crossed it),
// because the broker stops reading that connection; once the client
// reads, everything comes.
func TestOutboundCapHoldsPipelinedReplies(t *testing.T) {
	const (
		outCap = 256 << 10
		size   = 64 << 10
		n      = 300
		bound  = 2*outCap + 2*size
	)
	s := brokertest.Start(t, &broker.Config{OutboundCap: outCap})
	other := dial(t, s)
	admin := open(t, other)
	if _, err := admin.QueueDeclare("backlog", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("b"), size)
	for range n {
		pub(t, admin, "", "backlog", false, amqp091.Publishing{Body: body})
	}
	waitFor(t, "the backlog", func() bool { return readyCount(t, admin, "backlog") == n })

	r := rawOpen(t, s.Addr, defaultTune)
	r.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](r, 1)
	var id uint64
	port := r.nc.LocalAddr().(*net.TCPAddr).Port
	for _, ci := range s.Connections() {
		if ci.PeerPort == port {
			id = ci.ID
		}
	}
	// The outbound bytes of the connection, sampled until the end.
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			for _, ci := range s.Connections() {
				if ci.ID == id && ci.SendPending > peak.Load() {
					peak.Store(ci.SendPending)
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	var input []byte
	for range n {
		input = amqp.AppendMethodFrame(input, 1, &amqp.BasicGet{Queue: "backlog", NoAck: true})
	}
	for range n {
		input = amqp.AppendMethodFrame(input, 1, &amqp.BasicPublish{Exchange: "amq.direct", RoutingKey: "nowhere", Mandatory: true})
		input = amqp.AppendHeaderFrame(input, 1, amqp.ClassBasic, size, nil)
		input = amqp.AppendBodyFrames(input, 1, body, 131072)
	}
	written := make(chan error, 1)
	go func() {
		_, err := r.nc.Write(input)
		written <- err
	}()
	waitFor(t, "the reader to be held", func() bool {
		if p := peak.Load(); p > bound {
			t.Fatalf("outbound buffer grew to %d bytes, cap %d", p, outCap)
		}
		return s.OutboundHeld(id)
	})
	// Other connections go on meanwhile.
	publishConsume(t, other)

	readContent := func() {
		t.Helper()
		f, err := r.next()
		if err != nil || f.Type != amqp.FrameHeader {
			t.Fatalf("want a content header: type %d, %v", f.Type, err)
		}
		for got := 0; got < size; {
			f, err := r.next()
			if err != nil || f.Type != amqp.FrameBody {
				t.Fatalf("want a content body: type %d, %v", f.Type, err)
			}
			got += len(f.Payload)
		}
	}
	for i := range n {
		if ok := rawExpect[*amqp.BasicGetOk](r, 1); ok.MessageCount != uint32(n-1-i) {
			t.Fatalf("get %d: message count %d", i, ok.MessageCount)
		}
		readContent()
	}
	for range n {
		rawExpect[*amqp.BasicReturn](r, 1)
		readContent()
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p > bound {
		t.Fatalf("outbound buffer grew to %d bytes, cap %d", p, outCap)
	}
	r.send(1, &amqp.BasicGet{Queue: "backlog"})
	rawExpect[*amqp.BasicGetEmpty](r, 1)
}

// Direct replies go straight to the reply consumer's outbound buffer from
// another connection's reader: a consumer that never reads must not grow
// that buffer past its limit, nor hold up its RPC server, whose replies
// beyond the limit come back as unroutable.
func TestOutboundCapDirectReplies(t *testing.T) {
	const (
		outCap = 256 << 10
		size   = 64 << 10
		n      = 400
		bound  = 2*outCap + 2*size
	)
	s := brokertest.Start(t, &broker.Config{OutboundCap: outCap})
	sc := dial(t, s)
	server := open(t, sc)
	if _, err := server.QueueDeclare("rpc", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	requests, err := server.Consume("rpc", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}

	client := rawOpen(t, s.Addr, defaultTune)
	client.send(1, &amqp.ChannelOpen{})
	rawExpect[*amqp.ChannelOpenOk](client, 1)
	client.send(1, &amqp.BasicConsume{Queue: "amq.rabbitmq.reply-to", NoAck: true})
	rawExpect[*amqp.BasicConsumeOk](client, 1)
	b := amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "rpc"})
	b = amqp.AppendHeaderFrame(b, 1, amqp.ClassBasic, 0, &amqp.Properties{ReplyTo: "amq.rabbitmq.reply-to"})
	client.write(b)
	req := recv(t, requests)
	var id uint64
	port := client.nc.LocalAddr().(*net.TCPAddr).Port
	for _, ci := range s.Connections() {
		if ci.PeerPort == port {
			id = ci.ID
		}
	}
	var peak int64
	sample := func() {
		for _, ci := range s.Connections() {
			if ci.ID == id && ci.SendPending > peak {
				peak = ci.SendPending
			}
		}
	}

	returns := server.NotifyReturn(make(chan amqp091.Return, n))
	body := bytes.Repeat([]byte("r"), size)
	for range n {
		pub(t, server, "", req.ReplyTo, true, amqp091.Publishing{Body: body})
		sample()
		if peak > bound {
			t.Fatalf("the reply consumer's outbound buffer grew to %d bytes, cap %d", peak, outCap)
		}
	}
	// The server is not held: a round trip, and its returns.
	if _, err := server.QueueDeclarePassive("rpc", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	returned := 0
	waitFor(t, "returns", func() bool {
		for {
			select {
			case r := <-returns:
				if r.ReplyCode != amqp091.NoRoute {
					t.Fatalf("returned with %d %s", r.ReplyCode, r.ReplyText)
				}
				returned++
				continue
			default:
			}
			return returned > 0
		}
	})
	t.Logf("peak %d, returned %d", peak, returned)
	// The client gets the replies that were not returned.
	client.send(1, &amqp.BasicCancel{ConsumerTag: "x"}) // unknown tag: answered, after the replies
	got := 0
	for {
		f, err := client.next()
		if err != nil {
			t.Fatal(err)
		}
		if f.Type == amqp.FrameBody {
			got += len(f.Payload)
			continue
		}
		if f.Type != amqp.FrameMethod {
			continue
		}
		m, err := amqp.DecodeMethod(f.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m.(*amqp.BasicCancelOk); ok {
			break
		}
	}
	if want := (n - returned) * size; got != want {
		t.Fatalf("the client got %d bytes of replies, want %d (%d returned of %d)", got, want, returned, n)
	}
}
