package broker_test

import (
	"fmt"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker/brokertest"
)

func TestConfirmSelect(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	// amqp091-go waits for confirm.select-ok even with noWait: the nowait
	// form is tested on the wire below.
	for _, noWait := range []bool{false} {
		ch := open(t, c)
		confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 32))
		if err := ch.Confirm(noWait); err != nil {
			t.Fatal(err)
		}
		q := declareQ(t, ch, "", nil)
		declareX(t, ch, fmt.Sprint("unbound", noWait), "fanout")
		// Routed, unroutable, and to an exchange without bindings: each is
		// confirmed, in order.
		for i := range 10 {
			switch i % 3 {
			case 0:
				pubText(t, ch, "", q, "x")
			case 1:
				pubText(t, ch, "", "nowhere", "x")
			case 2:
				pubText(t, ch, fmt.Sprint("unbound", noWait), "", "x")
			}
		}
		for i := range 10 {
			select {
			case cf := <-confirms:
				if !cf.Ack || cf.DeliveryTag != uint64(i+1) {
					t.Fatalf("noWait=%v: confirm %d: %+v", noWait, i, cf)
				}
			case <-waitLimit():
				t.Fatalf("noWait=%v: confirm %d missing", noWait, i)
			}
		}
		if n := readyCount(t, ch, q); n != 4 {
			t.Fatalf("ready = %d", n)
		}
	}
}

func TestConfirmAcksOnTheWire(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	w := dialWire(t, s)
	// nowait: no confirm.select-ok, the next reply is the declare's.
	w.send(1, &amqp.ConfirmSelect{NoWait: true})
	w.send(1, &amqp.QueueDeclare{Queue: "cq"})
	w.expect(1, &amqp.QueueDeclareOk{})
	// Many publishes in one write: the acks may be folded with multiple,
	// but every sequence number is covered once, in order.
	var b []byte
	for range 50 {
		b = amqp.AppendMethodFrame(b, 1, &amqp.BasicPublish{RoutingKey: "cq"})
		b = amqp.AppendHeaderFrame(b, 1, amqp.ClassBasic, 1, nil)
		b = amqp.AppendBodyFrames(b, 1, []byte("x"), 0)
	}
	w.write(b)
	var acked uint64
	for acked < 50 {
		a := w.expect(1, &amqp.BasicAck{}).(*amqp.BasicAck)
		if a.DeliveryTag <= acked || (!a.Multiple && a.DeliveryTag != acked+1) || a.DeliveryTag > 50 {
			t.Fatalf("basic.ack tag %d multiple=%v after %d", a.DeliveryTag, a.Multiple, acked)
		}
		acked = a.DeliveryTag
	}
}

func TestConfirmMandatoryReturnBeforeAck(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	returns := ch.NotifyReturn(make(chan amqp091.Return, 4))
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 4))
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	q := declareQ(t, ch, "", nil)
	pub(t, ch, "", "nowhere", true, amqp091.Publishing{Body: []byte("lost")})
	pub(t, ch, "", q, true, amqp091.Publishing{Body: []byte("kept")})
	for i := range 2 {
		var cf amqp091.Confirmation
		select {
		case cf = <-confirms:
		case <-waitLimit():
			t.Fatal("no confirm")
		}
		if !cf.Ack || cf.DeliveryTag != uint64(i+1) {
			t.Fatalf("confirm %+v", cf)
		}
		// The client handles frames in order: when the ack of the
		// unroutable message is seen, its basic.return has been queued.
		if i == 0 {
			select {
			case r := <-returns:
				if r.ReplyCode != 312 || r.ReplyText != "NO_ROUTE" || string(r.Body) != "lost" || r.RoutingKey != "nowhere" {
					t.Fatalf("return %+v", r)
				}
			default:
				t.Fatal("basic.ack before basic.return")
			}
		}
	}
	select {
	case r := <-returns:
		t.Fatalf("routed mandatory message returned: %+v", r)
	default:
	}
}

func TestTxPublish(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	obs := open(t, c)
	q := declareQ(t, obs, "", nil)
	ch := open(t, c)
	returns := ch.NotifyReturn(make(chan amqp091.Return, 4))
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		pubText(t, ch, "", q, fmt.Sprint(i))
	}
	pub(t, ch, "", "nowhere", true, amqp091.Publishing{Body: []byte("lost")})
	// Methods on one connection are handled in order: the publishes have
	// been seen, and held.
	if n := readyCount(t, obs, q); n != 0 {
		t.Fatalf("ready = %d before commit", n)
	}
	select {
	case r := <-returns:
		t.Fatalf("returned before commit: %+v", r)
	default:
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	if n := readyCount(t, obs, q); n != 3 {
		t.Fatalf("ready = %d after commit, want 3", n)
	}
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || string(r.Body) != "lost" {
			t.Fatalf("return %+v", r)
		}
	default:
		t.Fatal("the unroutable mandatory publish was not returned before commit-ok")
	}

	for i := range 2 {
		pubText(t, ch, "", q, fmt.Sprint("r", i))
	}
	if err := ch.TxRollback(); err != nil {
		t.Fatal(err)
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, obs, q); fmt.Sprint(got) != "[0 1 2]" {
		t.Fatalf("queue %v: rolled back publishes delivered", got)
	}

	// Still transactional after commit and rollback.
	pubText(t, ch, "", q, "late")
	if n := readyCount(t, obs, q); n != 0 {
		t.Fatalf("ready = %d before commit", n)
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	if n := readyCount(t, obs, q); n != 1 {
		t.Fatalf("ready = %d after commit", n)
	}
}

func TestTxAcks(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	obs := open(t, c)
	q := declareQ(t, obs, "", nil)
	for i := 1; i <= 4; i++ {
		pubText(t, obs, "", q, fmt.Sprint(i))
	}
	ch := open(t, c)
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume(q, "c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ms := []amqp091.Delivery{recv(t, d), recv(t, d), recv(t, d), recv(t, d)}

	if err := ms[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := ms[1].Nack(false, true); err != nil {
		t.Fatal(err)
	}
	// Rolled back: the deliveries are outstanding again.
	if err := ch.TxRollback(); err != nil {
		t.Fatal(err)
	}
	if err := ms[0].Ack(false); err != nil { // not an unknown tag now
		t.Fatal(err)
	}
	if err := ms[1].Nack(false, true); err != nil {
		t.Fatal(err)
	}
	if err := ms[3].Reject(false); err != nil {
		t.Fatal(err)
	}
	if n := readyCount(t, obs, q); n != 0 {
		t.Fatalf("ready = %d before commit", n)
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	// 2 was requeued at commit and comes straight back; 1 and 4 are gone; 3
	// is still unacked.
	m := recv(t, d)
	if string(m.Body) != "2" || !m.Redelivered {
		t.Fatalf("after commit: %q redelivered=%v", m.Body, m.Redelivered)
	}
	if err := ch.Cancel("c", false); err != nil {
		t.Fatal(err)
	}
	// Acks in a transaction take the tags at once: a second ack of one is
	// an unknown tag, as in RabbitMQ.
	closed := notifyClose(ch)
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, closed, 406)
	// Closing the channel returns the uncommitted and unacked deliveries.
	if got := drainFlags(t, obs, q); fmt.Sprint(got) != "[2 redelivered 3 redelivered]" {
		t.Fatalf("queue after close: %v", got)
	}
}

func TestTxAndConfirmExclusive(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, nil)
	c := dial(t, s)

	ch := open(t, c)
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	expectReason(t, expectCode(t, ch.Confirm(false), 406), "PRECONDITION_FAILED - cannot switch from tx to confirm mode")

	ch = open(t, c)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	expectReason(t, expectCode(t, ch.Tx(), 406), "PRECONDITION_FAILED - cannot switch from confirm to tx mode")

	// confirm.select with nowait, then tx.select.
	w := dialWire(t, s)
	w.send(1, &amqp.ConfirmSelect{NoWait: true})
	w.send(1, &amqp.TxSelect{})
	cl := w.expect(1, &amqp.ChannelClose{}).(*amqp.ChannelClose)
	if cl.ReplyCode != 406 || cl.ClassID() != amqp.ClassChannel || cl.FailingClassID != amqp.ClassTx || cl.FailingMethodID != 10 {
		t.Fatalf("tx.select after confirm.select nowait: %+v", cl)
	}

	expectReason(t, expectCode(t, open(t, c).TxCommit(), 406), "PRECONDITION_FAILED - channel is not transactional")
	expectReason(t, expectCode(t, open(t, c).TxRollback(), 406), "PRECONDITION_FAILED - channel is not transactional")

	// Selecting the same mode twice is fine.
	ch = open(t, c)
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	ch = open(t, c)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
}
