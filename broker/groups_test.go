package broker_test

import (
	"context"
	"fmt"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker/brokertest"
)

// TestMessageGroups: with x-message-group-header, a group's messages go
// to one consumer at a time, in order, while other consumers take other
// groups; when a consumer goes away its groups move, in order, requeued
// messages first.
func TestMessageGroups(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	if _, err := ch.QueueDeclare("grp", false, false, false, false, amqp091.Table{"x-message-group-header": "JMSXGroupID"}); err != nil {
		t.Fatal(err)
	}
	_, err := ch.QueueDeclare("grp-bad", false, false, false, false, amqp091.Table{"x-message-group-header": int32(1)})
	if e, ok := err.(*amqp091.Error); !ok || e.Code != 406 {
		t.Fatalf("integer header name: %v, want 406", err)
	}
	ch = open(t, c)
	// Two consumers that do not acknowledge: every message is delivered,
	// each group whole to one of them.
	chA, chB := open(t, c), open(t, dial(t, s))
	var ds [2]<-chan amqp091.Delivery
	for i, cch := range []*amqp091.Channel{chA, chB} {
		if err := cch.Qos(100, 0, false); err != nil {
			t.Fatal(err)
		}
		if ds[i], err = cch.Consume("grp", fmt.Sprint("c", i), false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	const groups, per = 8, 5
	for i := range per {
		for g := range groups {
			if err := ch.PublishWithContext(context.Background(), "", "grp", false, false, amqp091.Publishing{
				Headers: amqp091.Table{"JMSXGroupID": fmt.Sprint("g", g)}, Body: []byte(fmt.Sprint(i)),
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	owner := map[string]int{}
	next := map[string]int{}
	got := [2]int{}
	take := func(i int, m amqp091.Delivery) {
		g := m.Headers["JMSXGroupID"].(string)
		if o, ok := owner[g]; ok && o != i {
			t.Fatalf("group %s went to consumers %d and %d", g, o, i)
		}
		owner[g] = i
		if string(m.Body) != fmt.Sprint(next[g]) {
			t.Fatalf("group %s: got %s, want %d", g, m.Body, next[g])
		}
		next[g]++
		got[i]++
	}
	for n := 0; n < groups*per; n++ {
		select {
		case m := <-ds[0]:
			take(0, m)
		case m := <-ds[1]:
			take(1, m)
		}
	}
	if got[0] == 0 || got[1] == 0 {
		t.Fatalf("one consumer took every group: %v", got)
	}
	// A goes away: its unacknowledged messages are requeued and its
	// groups move to B, each again from its first message.
	if err := chA.Close(); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for g, o := range owner {
		if o == 0 {
			next[g] = 0
			owner[g] = 1
			moved++
		}
	}
	for n := 0; n < moved*per; n++ {
		m := recv(t, ds[1])
		if !m.Redelivered {
			t.Fatalf("%s/%s not redelivered", m.Headers["JMSXGroupID"], m.Body)
		}
		take(1, m)
	}
	if n := depth(t, ch, "grp"); n != 0 {
		t.Fatalf("%d left ready", n)
	}
}

// TestMessageGroupsFree: a group moves when its consumer has nothing
// unacknowledged of it; while it has, a consumer with credit does not
// take it.
func TestMessageGroupsFree(t *testing.T) {
	s := brokertest.Start(t, nil)
	c := dial(t, s)
	ch := open(t, c)
	if _, err := ch.QueueDeclare("grp", true, false, false, false, amqp091.Table{"x-message-group-header": "JMSXGroupID"}); err != nil {
		t.Fatal(err)
	}
	pub := func(body string) {
		if err := ch.PublishWithContext(context.Background(), "", "grp", false, false, amqp091.Publishing{
			Headers: amqp091.Table{"JMSXGroupID": "only"}, Body: []byte(body),
		}); err != nil {
			t.Fatal(err)
		}
	}
	pub("1")
	pub("2")
	chA := open(t, c)
	if err := chA.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	da, err := chA.Consume("grp", "a", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	m1 := recv(t, da)
	chB := open(t, c)
	db, err := chB.Consume("grp", "b", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// b has credit, but the group is a's while a holds 1.
	if n := depth(t, ch, "grp"); n != 1 {
		t.Fatalf("%d ready, want 1 (2 waits for a)", n)
	}
	select {
	case m := <-db:
		t.Fatalf("b got %s while a held the group", m.Body)
	default:
	}
	if err := m1.Ack(false); err != nil {
		t.Fatal(err)
	}
	var m2 amqp091.Delivery
	select {
	case m2 = <-da:
	case m2 = <-db:
	}
	if string(m2.Body) != "2" {
		t.Fatalf("got %s, want 2", m2.Body)
	}
	if qi := queueInfoOf(t, s, "grp"); qi.GroupHeader != "JMSXGroupID" || qi.Groups != 1 {
		t.Fatalf("info: header %q groups %d", qi.GroupHeader, qi.Groups)
	}
}
