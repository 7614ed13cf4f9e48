package main

import (
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestBenchQueues: bench queues declares Count queues with the arguments
// given through every URI, uses each once (the message is consumed: every
// queue is empty after), leaves them in place, and deletes them with
// Delete.
func TestBenchQueues(t *testing.T) {
	s := startBenchBroker(t)
	const n = 7
	res, err := runQueues(t.Context(), queuesConfig{
		URIs: []string{s.URL, s.URL}, Count: n, Clients: 3, Prefix: "bq",
		Args: amqp.Table{"x-queue-type": "quorum"}, Use: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failures != 0 || res.Done != n || res.Used != n {
		t.Fatalf("declared %d used %d, %d failures (first %v): want %d each", res.Done, res.Used, res.Failures, res.FirstFailure, n)
	}
	qs, err := s.Queues("/")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, q := range qs {
		if !strings.HasPrefix(q.Name, "bq-") {
			continue
		}
		found++
		if q.Type != "quorum" || q.Ready != 0 || q.Unacked != 0 {
			t.Errorf("queue %s: type %q, %d ready, %d unacked: want an empty quorum queue", q.Name, q.Type, q.Ready, q.Unacked)
		}
	}
	if found != n {
		t.Fatalf("%d queues left, want %d", found, n)
	}
	res, err = runQueues(t.Context(), queuesConfig{URIs: []string{s.URL}, Count: n, Clients: 2, Prefix: "bq", Delete: true})
	if err != nil || res.Done != n || res.Failures != 0 {
		t.Fatalf("deleted %d, %d failures (%v, %v)", res.Done, res.Failures, err, res.FirstFailure)
	}
	if qs, _ = s.Queues("/"); len(qs) != 0 {
		t.Fatalf("%d queues after the delete", len(qs))
	}
}
