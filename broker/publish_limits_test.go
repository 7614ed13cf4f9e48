package broker_test

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// heapAfterGC is the heap in use after a collection.
func heapAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// A content header claims a body size; what it costs must follow the
// bytes that arrive, and a publish refused by permissions or a missing
// exchange must cost nothing: a few hundred bytes claiming 100 MiB must
// neither grow the heap by 100 MiB nor raise the memory alarm.
func TestPublishClaimedSizeCostsNothingUntilItArrives(t *testing.T) {
	const claimed = 100 << 20
	s := brokertest.Start(t, &broker.Config{MaxMessageSize: 128 << 20})
	if err := s.PutUser("u", "p", nil); err != nil {
		t.Fatal(err)
	}
	// u may do nothing at all.
	if err := s.SetPermissions("u", "/", "", "", ""); err != nil {
		t.Fatal(err)
	}
	admin := open(t, dial(t, s))
	if _, err := admin.QueueDeclare("claims", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	before := heapAfterGC()
	s.SetMemoryHighWatermark(0, before+200<<20)

	// claim publishes claiming the body size and sends 10 bytes of it,
	// then opens channel 2 and reads until channel.open-ok: the reader
	// has handled the frames before. It returns the reply code of the
	// channel.close of channel 1 that came before, or 0.
	claim := func(r *rawConn, exchange, key string) uint16 {
		t.Helper()
		r.send(1, &amqp.ChannelOpen{})
		rawExpect[*amqp.ChannelOpenOk](r, 1)
		b := amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{Exchange: exchange, RoutingKey: key})
		b = amqp.AppendHeaderFrame(b, 1, amqp.ClassBasic, claimed, nil)
		b = amqp.AppendFrame(b, amqp.FrameBody, 1, []byte("ten bytes!"))
		b = amqp.AppendMethodFrame(b, 2, &amqp.ChannelOpen{})
		r.write(b)
		code := uint16(0)
		for {
			ch, m := r.method()
			switch m := m.(type) {
			case *amqp.ChannelClose:
				code = m.ReplyCode
				r.send(ch, &amqp.ChannelCloseOk{})
				continue
			case *amqp.ChannelOpenOk:
				if ch == 2 {
					return code
				}
			}
			t.Fatalf("got %s on channel %d", m.Name(), ch)
		}
	}
	// No write permission.
	denied := rawStart(t, s.Addr, "u", "p")
	rawExpect[*amqp.ConnectionTune](denied, 0)
	denied.send(0, &amqp.ConnectionTuneOk{ChannelMax: 2047, FrameMax: 131072})
	denied.send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
	rawExpect[*amqp.ConnectionOpenOk](denied, 0)
	deniedCode := claim(denied, "amq.direct", "claims")
	// No such exchange.
	missingCode := claim(rawOpen(t, s.Addr, defaultTune), "no-such-exchange", "claims")
	// Allowed, and the rest of the body never comes.
	slowCode := claim(rawOpen(t, s.Addr, defaultTune), "", "claims")

	if after := heapAfterGC(); after > before+16<<20 {
		t.Fatalf("three claims of %d MiB sending 10 bytes each grew the live heap by %d MiB", claimed>>20, (after-before)>>20)
	}
	// Refused at basic.publish, before the content.
	if deniedCode != amqp.AccessRefused || missingCode != amqp.NotFound || slowCode != 0 {
		t.Fatalf("channel.close codes %d, %d, %d; want 403, 404, none", deniedCode, missingCode, slowCode)
	}
	// Another publisher is not blocked.
	pc := dial(t, s)
	ch := open(t, pc)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "claims", false, false, amqp091.Publishing{Body: []byte("m")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := conf.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v %v", ok, err)
	}
	if a := s.Alarms(); len(a) != 0 {
		t.Fatalf("alarms on: %v", a)
	}
	if n := readyCount(t, ch, "claims"); n != 1 {
		t.Fatalf("%d messages in the queue, want 1", n)
	}
}

// Bodies in one frame and in many (the buffer grows as they arrive) come
// out as they went in.
func TestPublishBodyFrames(t *testing.T) {
	s := brokertest.Start(t, nil)
	c, err := amqp091.DialConfig(s.URL, amqp091.Config{FrameSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ch := open(t, c)
	q := declareQ(t, ch, "", nil)
	for _, size := range []int{0, 1, 4088, 4089, 3 * 4088, 100_000, 1 << 20} {
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(i * 7)
		}
		pub(t, ch, "", q, false, amqp091.Publishing{Body: body, MessageId: "m"})
		d := getOne(t, ch, q)
		if !bytes.Equal(d.Body, body) || d.MessageId != "m" {
			t.Fatalf("size %d: got %d bytes, message id %q", size, len(d.Body), d.MessageId)
		}
	}
}
