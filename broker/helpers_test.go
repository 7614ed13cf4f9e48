package broker_test

import (
	"errors"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker/brokertest"
)

// dial connects to s with the default credentials.
func dial(t testing.TB, s *brokertest.Server) *amqp091.Connection {
	t.Helper()
	c, err := amqp091.Dial(s.URL)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// open opens a channel on c.
func open(t testing.TB, c *amqp091.Connection) *amqp091.Channel {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	return ch
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitForWithin(t, 10*time.Second, what, cond)
}

// waitForWithin is waitFor with a deadline of d.
func waitForWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// amqpCode returns the reply code of an *amqp091.Error, or 0.
func amqpCode(err error) int {
	var e *amqp091.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// expectCode fails unless err is an *amqp091.Error with code.
func expectCode(t testing.TB, err error, code int) *amqp091.Error {
	t.Helper()
	var e *amqp091.Error
	if !errors.As(err, &e) {
		t.Fatalf("want AMQP error %d, got %v", code, err)
	}
	if e.Code != code {
		t.Fatalf("want reply code %d, got %d (%s)", code, e.Code, e.Reason)
	}
	return e
}

// recv takes one delivery or fails after a timeout.
func recv(t testing.TB, d <-chan amqp091.Delivery) amqp091.Delivery {
	t.Helper()
	select {
	case m, ok := <-d:
		if !ok {
			t.Fatal("delivery channel closed")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a delivery")
	}
	return amqp091.Delivery{}
}

// noDelivery fails if a delivery arrives within a short time.
func noDelivery(t testing.TB, d <-chan amqp091.Delivery) {
	t.Helper()
	select {
	case m := <-d:
		t.Fatalf("unexpected delivery %q", m.Body)
	case <-time.After(100 * time.Millisecond):
	}
}
