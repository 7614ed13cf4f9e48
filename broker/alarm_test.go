package broker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

func TestAlarmMemoryBlocksPublishers(t *testing.T) {
	s := brokertest.Start(t, &broker.Config{ResourceCheckInterval: 10 * time.Millisecond})
	other := open(t, dial(t, s))
	if _, err := other.QueueDeclare("flow", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		q, err := other.QueueDeclarePassive("flow", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q.Messages
	}
	pub := dial(t, s)
	blocked := pub.NotifyBlocked(make(chan amqp091.Blocking, 4))
	pch := open(t, pub)
	publish := func(body string) {
		t.Helper()
		if err := pch.PublishWithContext(context.Background(), "", "flow", false, false, amqp091.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	publish("before")
	waitFor(t, "the first message", func() bool { return count() == 1 })
	if got := s.Alarms(); len(got) != 0 {
		t.Fatalf("alarms %v before the watermark was lowered", got)
	}

	s.SetMemoryHighWatermark(0, 1)
	waitFor(t, "the memory alarm", func() bool { return slices.Equal(s.Alarms(), []string{broker.AlarmMemory}) })
	publish("during") // handled, then the reader stops
	select {
	case b := <-blocked:
		if !b.Active || b.Reason != "low on memory" {
			t.Fatalf("got %+v, want blocked, low on memory", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no connection.blocked")
	}
	publish("held")
	time.Sleep(100 * time.Millisecond)
	if n := count(); n != 2 {
		t.Fatalf("%d messages while blocked, want 2", n)
	}
	// Connections that do not publish keep working: consume and ack.
	m, ok, err := other.Get("flow", false)
	if err != nil || !ok || string(m.Body) != "before" {
		t.Fatalf("get while blocked: %q %v %v", m.Body, ok, err)
	}
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}

	s.SetMemoryHighWatermark(0, 1<<60)
	select {
	case b := <-blocked:
		if b.Active {
			t.Fatalf("got %+v, want unblocked", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no connection.unblocked")
	}
	waitFor(t, "the held message", func() bool { return count() == 2 })
	if got := s.Alarms(); len(got) != 0 {
		t.Fatalf("alarms %v after the watermark was raised", got)
	}
}

func TestAlarmDisk(t *testing.T) {
	s := brokertest.Start(t, &broker.Config{ResourceCheckInterval: 10 * time.Millisecond, DataDir: t.TempDir()})
	if got := s.Alarms(); len(got) != 0 {
		t.Fatalf("alarms %v at start", got)
	}
	s.SetDiskFreeLimit(1 << 62)
	waitFor(t, "the disk alarm", func() bool { return slices.Equal(s.Alarms(), []string{broker.AlarmDisk}) })
	pub := dial(t, s)
	blocked := pub.NotifyBlocked(make(chan amqp091.Blocking, 4))
	ch := open(t, pub)
	if err := ch.PublishWithContext(context.Background(), "", "nowhere", false, false, amqp091.Publishing{}); err != nil {
		t.Fatal(err)
	}
	if b := nextBlocking(t, blocked); !b.Active || b.Reason != "low on disk" {
		t.Fatalf("got %+v", b)
	}
	s.SetDiskFreeLimit(1)
	if b := nextBlocking(t, blocked); b.Active {
		t.Fatalf("got %+v", b)
	}
}

func nextBlocking(t *testing.T, c <-chan amqp091.Blocking) amqp091.Blocking {
	t.Helper()
	select {
	case b := <-c:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("no connection.blocked or connection.unblocked")
	}
	return amqp091.Blocking{}
}
