package broker_test

import (
	"errors"
	"fmt"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
)

func TestAdminUsersVHostsPermissions(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	if err := s.AddVHost("staging"); err != nil {
		t.Fatal(err)
	}
	if err := s.AddVHost("staging"); !errors.Is(err, broker.ErrExists) {
		t.Fatalf("second AddVHost: %v", err)
	}
	if err := s.PutUser("alice", "wonder", []string{"management"}); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("amqp://alice:wonder@%s/staging", s.Addr)
	// No permissions yet: connection.open is refused (amqp091-go reports
	// every refusal of connection.open as ErrVhost).
	if _, err := amqp091.Dial(url); err == nil {
		t.Fatal("user without permissions got in")
	}
	if err := s.SetPermissions("alice", "staging", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	c, err := amqp091.Dial(url)
	if err != nil {
		t.Fatalf("dial with permissions: %v", err)
	}
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	ch := open(t, c)
	if _, err := ch.QueueDeclare("sq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := amqp091.Dial(fmt.Sprintf("amqp://alice:wrong@%s/staging", s.Addr)); err == nil {
		t.Fatal("wrong password accepted")
	}
	stop()
	<-closed

	// Everything above survives a restart.
	s, stop = startOn(t, dir)
	defer stop()
	url = fmt.Sprintf("amqp://alice:wonder@%s/staging", s.Addr)
	c, err = amqp091.Dial(url)
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	ch = open(t, c)
	if _, err := ch.QueueDeclarePassive("sq", true, false, false, false, nil); err != nil {
		t.Fatalf("queue in staging lost: %v", err)
	}
	closed = c.NotifyClose(make(chan *amqp091.Error, 1))
	if err := s.DeleteVHost("staging"); err != nil {
		t.Fatal(err)
	}
	if e := <-closed; e == nil || e.Code != 320 {
		t.Fatalf("connection to a deleted vhost closed with %v", e)
	}
	if err := s.DeleteUser("alice"); err != nil {
		t.Fatal(err)
	}
	if got := len(s.Permissions()); got != 1 {
		t.Fatalf("%d permissions left, want guest's only: %+v", got, s.Permissions())
	}
	if _, err := amqp091.Dial(url); err == nil {
		t.Fatal("deleted user got in")
	}
}
