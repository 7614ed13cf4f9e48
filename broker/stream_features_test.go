package broker_test

import (
	"fmt"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

func TestStreamFiltering(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	declareStream(t, ch, "s", nil)
	// Three chunks: filter value a, filter value b, no filter value.
	publishStream(t, ch, "s", "a", 10, amqp091.Table{"x-stream-filter-value": "a"})
	publishStream(t, ch, "s", "b", 10, amqp091.Table{"x-stream-filter-value": "b"})
	publishStream(t, ch, "s", "u", 10, nil)

	count := func(args amqp091.Table, want map[byte]int) {
		t.Helper()
		args["x-stream-offset"] = "first"
		cch, d := consumeStream(t, c, "s", 100, args)
		defer cch.Close()
		got := map[byte]int{}
		total := 0
		for _, n := range want {
			total += n
		}
		for i := 0; i < total; i++ {
			m := recv(t, d)
			got[m.Body[0]]++
		}
		noDelivery(t, d)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%v: got %v, want %v", args, got, want)
		}
	}
	count(amqp091.Table{"x-stream-filter": "b"}, map[byte]int{'b': 10})
	count(amqp091.Table{"x-stream-filter": []any{"a", "b"}}, map[byte]int{'a': 10, 'b': 10})
	count(amqp091.Table{"x-stream-filter": "b", "x-stream-match-unfiltered": true}, map[byte]int{'b': 10, 'u': 10})
	count(amqp091.Table{"x-stream-filter": "zzz"}, map[byte]int{})
	count(amqp091.Table{}, map[byte]int{'a': 10, 'b': 10, 'u': 10})
}

// TestStreamFilteringFromDisk filters a stream larger than the in-memory
// tail, so the reader goes through the chunk summaries on disk.
func TestStreamFilteringFromDisk(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	declareStream(t, ch, "s", nil)
	confirmMode(t, ch)
	body := make([]byte, 64<<10)
	for i := 0; i < 160; i++ { // 10 MB in chunks of "a", then 5 "b"
		if err := ch.Publish("", "s", false, false, amqp091.Publishing{Body: body, Headers: amqp091.Table{"x-stream-filter-value": "a"}}); err != nil {
			t.Fatal(err)
		}
	}
	publishStream(t, ch, "s", "b", 5, amqp091.Table{"x-stream-filter-value": "b"})
	publishSized(t, ch, "s", 80, 64<<10)
	_, d := consumeStream(t, c, "s", 10, amqp091.Table{"x-stream-offset": "first", "x-stream-filter": "b"})
	for i := 0; i < 5; i++ {
		m := recv(t, d)
		if string(m.Body) != fmt.Sprintf("b%d", i) || offsetOf(t, m) != int64(160+i) {
			t.Fatalf("filtered delivery %d: %q at %d", i, m.Body, offsetOf(t, m))
		}
		_ = m.Ack(false)
	}
	noDelivery(t, d)
}

func TestStreamSingleActiveConsumerGroup(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	declareStream(t, ch, "s", amqp091.Table{"x-single-active-consumer": true})
	args := amqp091.Table{"x-stream-consumer-name": "grp", "x-stream-offset": "first"}
	c1 := dial(t, s)
	ch1, d1 := consumeStream(t, c1, "s", 10, args)
	_, d2 := consumeStream(t, dial(t, s), "s", 10, args)
	// Another group reads everything independently.
	_, d3 := consumeStream(t, dial(t, s), "s", 10, amqp091.Table{"x-stream-consumer-name": "other", "x-stream-offset": "first"})
	publishStream(t, ch, "s", "m", 8, nil)
	var last amqp091.Delivery
	for i := 0; i < 5; i++ {
		last = recv(t, d1)
	}
	if err := last.Ack(true); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		recv(t, d3)
	}
	noDelivery(t, d2)
	waitFor(t, "the group's offset", func() bool {
		si := streamInfo(t, s, "s")
		return len(si.Named) == 1 && si.Named[0].Name == "grp" && si.Named[0].Offset == 4
	})
	var infos []broker.ConsumerInfo
	infos = s.Broker.QueueConsumers("/", "s")
	active := 0
	for _, ci := range infos {
		if ci.Active {
			active++
		}
	}
	if len(infos) != 3 || active != 2 {
		t.Fatalf("consumers: %+v", infos)
	}
	// The active member fails: the next takes over after the group's
	// acknowledged offset.
	_ = ch1.Close()
	_ = c1.Close()
	m := recv(t, d2)
	if offsetOf(t, m) != 5 {
		t.Fatalf("takeover resumed at %d, want 5", offsetOf(t, m))
	}
	// A SAC stream refuses unnamed consumers.
	bad := open(t, dial(t, s))
	_ = bad.Qos(1, 0, false)
	_, err := bad.Consume("s", "", false, false, false, false, nil)
	expectCode(t, err, 406)
}

func TestSuperStreamRouting(t *testing.T) {
	s := brokertest.Start(t, nil)
	if err := s.Broker.AddSuperStream("/", "guest", broker.SuperStreamSpec{Name: "inv", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	if err := s.Broker.AddSuperStream("/", "guest", broker.SuperStreamSpec{Name: "ord", BindingKeys: []string{"amer", "emea"}, HashRouting: true}); err != nil {
		t.Fatal(err)
	}
	parts, err := s.Broker.SuperStreamPartitions("/", "inv")
	if err != nil || fmt.Sprint(parts) != "[inv-0 inv-1 inv-2]" {
		t.Fatalf("partitions: %v %v", parts, err)
	}
	c := dial(t, s)
	ch := open(t, c)
	confirmMode(t, ch)
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 100))
	// Routing by binding key.
	for i := 0; i < 9; i++ {
		if err := ch.Publish("inv", fmt.Sprint(i%3), true, false, amqp091.Publishing{Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	// Routing by hash of arbitrary keys.
	for i := 0; i < 40; i++ {
		if err := ch.Publish("ord", fmt.Sprintf("customer-%d", i), true, false, amqp091.Publishing{Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 49; i++ {
		if cf := <-confirms; !cf.Ack {
			t.Fatalf("nack %d", cf.DeliveryTag)
		}
	}
	for _, p := range parts {
		if si := streamInfo(t, s, p); si.NextOffset != 3 {
			t.Errorf("%s has %d messages, want 3", p, si.NextOffset)
		}
	}
	a, e := streamInfo(t, s, "ord-amer").NextOffset, streamInfo(t, s, "ord-emea").NextOffset
	if a+e != 40 || a == 0 || e == 0 {
		t.Errorf("hash routing spread 40 messages as %d + %d", a, e)
	}
	// The same key always lands in the same partition.
	before := streamInfo(t, s, "ord-amer").NextOffset
	for i := 0; i < 5; i++ {
		_ = ch.Publish("ord", "customer-7", false, false, amqp091.Publishing{Body: []byte("x")})
		<-confirms
	}
	if after := streamInfo(t, s, "ord-amer").NextOffset; after != before && after != before+5 {
		t.Errorf("one key spread over partitions: %d → %d", before, after)
	}
	// A consumer group across partitions: two members each consume every
	// partition; the active members are spread over the partitions as
	// RabbitMQ spreads them (member partition mod 2), and the survivor
	// takes every partition when the other goes.
	members := []*amqp091.Connection{dial(t, s), dial(t, s)}
	for _, mc := range members {
		for _, p := range parts {
			cch := open(t, mc)
			_ = cch.Qos(10, 0, false)
			if _, err := cch.Consume(p, "", false, false, false, false, amqp091.Table{
				"x-stream-consumer-name": "billing", "x-single-active-consumer": true, "x-stream-offset": "first"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	activeOn := func() map[string]string { // partition → connection of its active member
		out := map[string]string{}
		for _, p := range parts {
			for _, ci := range s.Broker.QueueConsumers("/", p) {
				if ci.Active {
					out[p] += ci.Connection
				}
			}
		}
		return out
	}
	act := activeOn()
	if len(act) != 3 || act["inv-0"] != act["inv-2"] || act["inv-0"] == act["inv-1"] || act["inv-1"] == "" {
		t.Fatalf("active members: %v", act)
	}
	survivor := act["inv-1"]
	for _, mc := range members {
		if act["inv-0"] != "" && strings.HasPrefix(act["inv-0"], strings.Split(mc.LocalAddr().String(), " ")[0]) {
			_ = mc.Close()
		}
	}
	waitFor(t, "the survivor to take every partition", func() bool {
		a := activeOn()
		return len(a) == 3 && a["inv-0"] == survivor && a["inv-2"] == survivor
	})
	if err := s.Broker.DeleteSuperStream("/", "guest", "inv"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Broker.Queue("/", "inv-0"); err == nil {
		t.Error("partition left after delete")
	}
}

func TestStreamDeleteRemovesData(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	c := dial(t, s)
	ch := open(t, c)
	declareStream(t, ch, "s", nil)
	publishStream(t, ch, "s", "m", 10, nil)
	_, d := consumeStream(t, c, "s", 10, amqp091.Table{"x-stream-offset": "first"})
	recv(t, d)
	if _, err := ch.QueueDelete("s", false, false, false); err != nil {
		t.Fatal(err)
	}
	// Redeclared, it starts empty.
	declareStream(t, ch, "s", nil)
	stop()
	s, stop = startOn(t, dir)
	defer stop()
	if si := streamInfo(t, s, "s"); si.NextOffset != 0 || si.Chunks != 0 {
		t.Fatalf("after delete and restart: %+v", si)
	}
}

// TestStreamGoroutinesStop checks that a stream's goroutine and its disk
// readers end with the stream (deleted) or the broker (closed).
func TestStreamGoroutinesStop(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	s, stop := startOn(t, t.TempDir())
	c, err := amqp091.Dial(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	ch := open(t, c)
	declareStream(t, ch, "a", nil)
	declareStream(t, ch, "b", nil)
	publishSized(t, ch, "a", 100, 64<<10) // beyond the in-memory tail
	_, d := consumeStream(t, c, "a", 5, amqp091.Table{"x-stream-offset": "first"})
	recv(t, d)
	if _, err := ch.QueueDelete("b", false, false, false); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	stop()
	goleak.VerifyNone(t, ignore)
}

// TestStreamTailConsumersServedFromMemory: consumers at the tail never read
// the disk, however many there are.
func TestStreamTailConsumersServedFromMemory(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	declareStream(t, ch, "s", nil)
	publishSized(t, ch, "s", 10, 1000)
	var ds []<-chan amqp091.Delivery
	for i := 0; i < 20; i++ {
		_, d := consumeStream(t, c, "s", 50, amqp091.Table{"x-stream-offset": "first"})
		ds = append(ds, d)
	}
	publishSized(t, ch, "s", 40, 1000)
	for _, d := range ds {
		for i := 0; i < 50; i++ {
			recv(t, d)
		}
	}
	if r := streamInfo(t, s, "s").DiskReads; r != 0 {
		t.Fatalf("%d disk reads for consumers at the tail", r)
	}
}
