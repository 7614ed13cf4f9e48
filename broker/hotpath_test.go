package broker_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// consumeN publishes messages "0".."n-1" to a new queue q and consumes
// them on ch with manual acks: it returns the deliveries in order and the
// consumer's delivery channel.
func consumeN(t *testing.T, ch *amqp091.Channel, q string, n int) ([]amqp091.Delivery, <-chan amqp091.Delivery) {
	t.Helper()
	declareQ(t, ch, q, nil)
	for i := range n {
		pubText(t, ch, "", q, strconv.Itoa(i))
	}
	msgs, err := ch.Consume(q, "c-"+q, false, false, false, false, nil)
	mustOK(t, err)
	ds := make([]amqp091.Delivery, n)
	for i := range ds {
		ds[i] = recv(t, msgs)
		if string(ds[i].Body) != strconv.Itoa(i) {
			t.Fatalf("delivery %d is %q", i, ds[i].Body)
		}
	}
	return ds, msgs
}

// scrambled is 0..n-1 in an order that is neither ascending nor
// descending: those ≡ 1 mod 3 from the end, then the rest ascending.
func scrambled(n int) []int {
	var out, rest []int
	for i := n - 1; i >= 0; i-- {
		if i%3 == 1 {
			out = append(out, i)
		} else {
			rest = append(rest, i)
		}
	}
	slices.Reverse(rest)
	return append(out, rest...)
}

// channelUnacked is the management view of the unacked count of the
// channels of s (they are one here).
func channelUnacked(s *brokertest.Server) int {
	n := 0
	for _, ci := range s.Channels() {
		n += ci.Unacked
	}
	return n
}

// TestAckOutOfOrder settles deliveries in an order unrelated to delivery
// order (single acks, rejects, a nack multiple across the holes they
// leave, a multiple ack), and checks what comes back, in which order, what
// stays outstanding, and that a tag settled out of order is unknown after.
func TestAckOutOfOrder(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	const n = 300
	ds, msgs := consumeN(t, ch, "ooo", n)
	acked := map[int]bool{}
	// Ack two in three of 10..199, in scrambled order.
	for _, i := range scrambled(n) {
		if i%3 != 0 && i >= 10 && i < 200 {
			mustOK(t, ds[i].Ack(false))
			acked[i] = true
		}
	}
	// Reject 153 and 150 (dropped), then nack multiple up to 180, requeue:
	// 0..9 and the multiples of three up to 180 but 150 and 153 come back,
	// in order.
	mustOK(t, ds[153].Reject(false))
	mustOK(t, ds[150].Reject(false))
	mustOK(t, ds[180].Nack(true, true))
	var want []string
	for i := 0; i <= 180; i++ {
		if !acked[i] && i != 150 && i != 153 {
			want = append(want, strconv.Itoa(i))
		}
	}
	var got []string
	for range want {
		d := recv(t, msgs)
		if !d.Redelivered {
			t.Fatalf("%q not marked redelivered", d.Body)
		}
		got = append(got, string(d.Body))
		mustOK(t, d.Ack(false))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("redelivered %v\nwant %v", got, want)
	}
	// 181..199 that are left, newest first, then 200..299 with one
	// multiple ack.
	for i := 199; i > 180; i-- {
		if !acked[i] {
			mustOK(t, ds[i].Ack(false))
		}
	}
	mustOK(t, ds[299].Ack(true))
	other := open(t, dial(t, s))
	waitFor(t, "no unacked deliveries", func() bool { return channelUnacked(s) == 0 })
	if q := readyCount(t, other, "ooo"); q != 0 {
		t.Fatalf("%d messages ready, want 0", q)
	}
	closed := notifyClose(ch)
	mustOK(t, ds[100].Ack(false))
	e := expectClosed(t, closed, 406)
	expectReason(t, e, "PRECONDITION_FAILED - unknown delivery tag 101")
}

// TestRecoverAndCloseRequeueInOrder: basic.recover and channel.close
// return the outstanding deliveries to their queue in delivery order,
// whatever holes out-of-order acks left among them.
func TestRecoverAndCloseRequeueInOrder(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	const n = 200
	ds, msgs := consumeN(t, ch, "rq", n)
	var want []string
	for _, i := range scrambled(n) {
		if i%4 == 1 || i%7 == 0 {
			mustOK(t, ds[i].Ack(false))
		}
	}
	for i := range n {
		if i%4 != 1 && i%7 != 0 {
			want = append(want, strconv.Itoa(i))
		}
	}
	mustOK(t, ch.Recover(true))
	redelivered := make([]amqp091.Delivery, len(want))
	var got []string
	for i := range want {
		redelivered[i] = recv(t, msgs)
		got = append(got, string(redelivered[i].Body))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("after basic.recover: %v\nwant %v", got, want)
	}
	// Out of order again on the redeliveries, then close the channel.
	var left []string
	for i, d := range redelivered {
		if i%2 == 0 {
			mustOK(t, d.Ack(false))
		} else {
			left = append(left, got[i])
		}
	}
	mustOK(t, ch.Close())
	other := open(t, c)
	if got := drain(t, other, "rq"); !slices.Equal(got, left) {
		t.Fatalf("after channel.close: %v\nwant %v", got, left)
	}
}

// TestConsumerTimeoutPastHoles: the consumer-timeout checker looks at the
// oldest outstanding delivery only, and still finds a late consumer when
// older deliveries that cannot time out are ahead of it (a basic.get, a
// cancelled consumer's) and out-of-order acks left holes.
func TestConsumerTimeoutPastHoles(t *testing.T) {
	s := brokertest.Start(t, &broker.Config{ConsumerTimeout: 200 * time.Millisecond})
	c := dial(t, s)
	ch := open(t, c)
	declareQ(t, ch, "ct-get", nil)
	declareQ(t, ch, "ct-old", nil)
	declareQ(t, ch, "ct", nil)
	pubText(t, ch, "", "ct-get", "got")
	pubText(t, ch, "", "ct-old", "old")
	for i := range 5 {
		pubText(t, ch, "", "ct", strconv.Itoa(i))
	}
	// Oldest: a basic.get delivery, then one of a consumer cancelled since.
	if _, ok, err := ch.Get("ct-get", false); err != nil || !ok {
		t.Fatalf("basic.get: %v %v", ok, err)
	}
	old, err := ch.Consume("ct-old", "old", false, false, false, false, nil)
	mustOK(t, err)
	recv(t, old)
	mustOK(t, ch.Cancel("old", false))
	cancels := ch.NotifyCancel(make(chan string, 1))
	msgs, err := ch.Consume("ct", "late", false, false, false, false, nil)
	mustOK(t, err)
	var ds []amqp091.Delivery
	for range 5 {
		ds = append(ds, recv(t, msgs))
	}
	mustOK(t, ds[3].Ack(false))
	mustOK(t, ds[1].Ack(false))
	select {
	case tag := <-cancels:
		if tag != "late" {
			t.Fatalf("cancelled %q, want late", tag)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the late consumer was not cancelled")
	}
	// Its three outstanding deliveries went back, in order; the others
	// stay outstanding on the channel.
	other := open(t, c)
	waitFor(t, "the requeued deliveries", func() bool { return readyCount(t, other, "ct") == 3 })
	if got := drain(t, other, "ct"); !slices.Equal(got, []string{"0", "2", "4"}) {
		t.Fatalf("requeued %v", got)
	}
	if n := channelUnacked(s); n != 2 {
		t.Fatalf("%d unacked, want 2 (the get and the cancelled consumer's)", n)
	}
}

// TestTxPublishLimit: a transaction holds at most Config.TxMaxMessages
// publishes and Config.TxMaxBytes bytes of them; the publish over the
// limit closes the channel with 406, and nothing of the transaction is
// routed.
func TestTxPublishLimit(t *testing.T) {
	s := brokertest.Start(t, &broker.Config{TxMaxMessages: 10, TxMaxBytes: 4096, MaxMessageSize: 1024})
	c := dial(t, s)
	ch := open(t, c)
	declareQ(t, ch, "txq", nil)
	mustOK(t, ch.Tx())
	// Within the limits, committed twice over.
	for range 2 {
		for range 10 {
			pubText(t, ch, "", "txq", "m")
		}
		mustOK(t, ch.TxCommit())
	}
	// A rollback forgets what it held.
	for range 10 {
		pubText(t, ch, "", "txq", "r")
	}
	mustOK(t, ch.TxRollback())

	check := func(what string, publish func(*amqp091.Channel)) {
		t.Helper()
		ch := open(t, c)
		mustOK(t, ch.Tx())
		closed := notifyClose(ch)
		publish(ch)
		e := expectClosed(t, closed, 406)
		if !strings.HasPrefix(e.Reason, "PRECONDITION_FAILED - transaction holds too much") {
			t.Fatalf("%s: reply text %q", what, e.Reason)
		}
	}
	check("count", func(ch *amqp091.Channel) {
		for range 11 {
			pubText(t, ch, "", "txq", "n")
		}
	})
	check("bytes", func(ch *amqp091.Channel) {
		for range 5 {
			pub(t, ch, "", "txq", false, amqp091.Publishing{Body: make([]byte, 1000)})
		}
	})
	if n := readyCount(t, open(t, c), "txq"); n != 20 {
		t.Fatalf("%d messages in txq, want the 20 committed", n)
	}
}

// TestRoutingDedup: a queue reached several ways by one publish (through
// exchange-to-exchange bindings, an alternate exchange, several CC keys,
// the default exchange and CC) gets one copy, with few queues and with
// more than the routing's small-set size.
func TestRoutingDedup(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	for _, n := range []int{3, 40} {
		pre := "d" + strconv.Itoa(n) + "-"
		a, b, alt, top := pre+"a", pre+"b", pre+"alt", pre+"top"
		declareX(t, ch, a, "fanout")
		declareX(t, ch, b, "fanout")
		declareX(t, ch, alt, "fanout")
		mustOK(t, ch.ExchangeDeclare(top, "direct", false, false, false, false, amqp091.Table{"alternate-exchange": alt}))
		mustOK(t, ch.ExchangeBind(b, "", a, false, nil))
		mustOK(t, ch.ExchangeBind(a, "", alt, false, nil))
		mustOK(t, ch.ExchangeBind(b, "", alt, false, nil))
		var qs []string
		for i := range n + 2 {
			q := pre + strconv.Itoa(i)
			declareQ(t, ch, q, nil)
			qs = append(qs, q)
			if i < n {
				bindQ(t, ch, q, "", a, nil)
			}
			if i >= 2 {
				bindQ(t, ch, q, "", b, nil)
				bindQ(t, ch, q, "k", top, nil)
			}
		}
		// top routes "x" nowhere: alt, then a and b, reach every queue.
		pubText(t, ch, top, "x", "alt")
		// Each key routes through a and b again.
		pub(t, ch, a, "k", false, amqp091.Publishing{Body: []byte("cc"), Headers: amqp091.Table{"CC": []any{"x", "y"}}})
		// The default exchange and CC naming the same queues.
		pub(t, ch, "", qs[0], false, amqp091.Publishing{Body: []byte("dflt"), Headers: amqp091.Table{"CC": []any{qs[0], qs[1], qs[0]}}})
		for i, q := range qs {
			want := []string{"alt", "cc"}
			if i < 2 {
				want = append(want, "dflt")
			}
			if got := drain(t, ch, q); !slices.Equal(got, want) {
				t.Fatalf("%s got %v, want %v", q, got, want)
			}
		}
	}
}

// TestFanoutFollowsBindingChanges: a fanout exchange's resolved
// destinations (cached between publishes) follow every change of its
// bindings and of the queues and exchanges they name.
func TestFanoutFollowsBindingChanges(t *testing.T) {
	s := brokertest.Start(t, nil)
	ch := open(t, dial(t, s))
	declareX(t, ch, "ff", "fanout")
	declareX(t, ch, "ff-down", "fanout")
	declareQ(t, ch, "ff-1", nil)
	declareQ(t, ch, "ff-2", nil)
	declareQ(t, ch, "ff-3", nil)
	bindQ(t, ch, "ff-1", "", "ff", nil)
	bindQ(t, ch, "ff-2", "", "ff", nil)
	bindQ(t, ch, "ff-3", "", "ff-down", nil)
	mustOK(t, ch.ExchangeBind("ff-down", "", "ff", false, nil))
	step := func(body string, want map[string]bool) {
		t.Helper()
		pubText(t, ch, "ff", "", body)
		for _, q := range []string{"ff-1", "ff-2", "ff-3"} {
			got := drain(t, ch, q)
			if want[q] != (len(got) == 1 && got[0] == body) || len(got) > 1 {
				t.Fatalf("after %s: %s has %v", body, q, got)
			}
		}
	}
	step("all", map[string]bool{"ff-1": true, "ff-2": true, "ff-3": true})
	mustOK(t, ch.QueueUnbind("ff-2", "", "ff", nil))
	step("unbound", map[string]bool{"ff-1": true, "ff-3": true})
	if _, err := ch.QueueDelete("ff-1", false, false, false); err != nil {
		t.Fatal(err)
	}
	declareQ(t, ch, "ff-1", nil) // the same name, not bound
	step("deleted", map[string]bool{"ff-3": true})
	mustOK(t, ch.ExchangeDelete("ff-down", false, false))
	step("exchange deleted", nil)
	bindQ(t, ch, "ff-1", "", "ff", nil)
	bindQ(t, ch, "ff-2", "", "ff", nil)
	step("bound again", map[string]bool{"ff-1": true, "ff-2": true})
}
