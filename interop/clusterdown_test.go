package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/web"
)

// TestClusterPublishToDownNode: while the node link to a queue's home node
// reconnects (A's broker stopped serving while its cluster port is up: the
// link breaks and its redials do not fail), a publish with confirms routed
// to that queue is nacked, never acknowledged: confirmed and then lost is
// what a publisher must never see. Once A is down, a mandatory publish
// fanned out to 16 of its queues (the batched path) is returned as
// unroutable, as for a missing queue (and as one queue's is).
func TestClusterPublishToDownNode(t *testing.T) {
	nodes := startCluster(t)
	a, b := nodes[0], nodes[1]
	ca, cb := dialNode(t, a), dialNode(t, b)
	cha := openCh(t, ca)
	if err := cha.ExchangeDeclare("fan", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	const fanned = 16 // the batched path's least (batchMinTargets)
	for i := range fanned {
		q := fmt.Sprintf("down-%d", i)
		if _, err := cha.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := cha.QueueBind(q, "", "fan", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	chb := openCh(t, cb)
	if err := chb.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := chb.NotifyReturn(make(chan amqp091.Return, 4))
	publish := func(exchange, key string) bool {
		t.Helper()
		dc, err := chb.PublishWithDeferredConfirm(exchange, key, true, false, amqp091.Publishing{Body: []byte("m")})
		if err != nil {
			t.Fatal(err)
		}
		ok, err := dc.WaitContext(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// Through B while A is up: fanned out over the link to A, acknowledged.
	eventually(t, "the fanout's queues and bindings on B", func() bool {
		_, err := passive(cb, fmt.Sprintf("down-%d", fanned-1))
		return err == nil
	})
	eventually(t, "a fanned-out publish through B reaching A", func() bool {
		if !publish("fan", "") {
			t.Fatal("a publish fanned out to queues of a live node was nacked")
		}
		q, err := passive(cb, fmt.Sprintf("down-%d", fanned-1))
		return err == nil && q.Messages > 0
	})
	drain := func() {
		for {
			select {
			case <-returns:
			default:
				return
			}
		}
	}
	drain()

	// A's broker stops; its cluster port stays up: B's link reconnects.
	a.current.Store(nil)
	_ = a.srv.Close()
	eventually(t, "the queues reported down through B", func() bool {
		_, err := passive(cb, "down-0")
		return err != nil
	})
	for range 3 {
		if publish("", "down-0") {
			t.Fatal("a publish to a queue whose node link is reconnecting was acknowledged")
		}
	}
	drain()

	// A is down: a fanned-out mandatory publish is returned.
	a.stop()
	publish("fan", "")
	select {
	case r := <-returns:
		if r.ReplyCode != 312 {
			t.Fatalf("return %d %s, want 312 NO_ROUTE", r.ReplyCode, r.ReplyText)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a mandatory publish fanned out to queues whose node is down was not returned")
	}
}

// TestClusterAPIHomeCounts: the management API of a node lists a queue homed
// on another node with that node's counts (ready messages, consumers), not
// the zeros of a queue it holds nothing of.
func TestClusterAPIHomeCounts(t *testing.T) {
	nodes := startCluster(t)
	a, b := nodes[0], nodes[1]
	ca, cb := dialNode(t, a), dialNode(t, b)
	if _, err := openCh(t, ca).QueueDeclare("counted", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "counted on B", func() bool {
		_, err := b.srv.Queue("/", "counted")
		return err == nil
	})
	publishConfirmed(t, cb, newHistory(), "p", "counted", 0, 7)
	srv, err := web.New(web.Config{Logger: zaptest.NewLogger(t), SampleInterval: time.Hour}, b.srv.Broker)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	type queueJSON struct {
		Name      string `json:"name"`
		Node      string `json:"node"`
		Consumers int    `json:"consumers"`
		Ready     int    `json:"messages_ready"`
	}
	get := func(path string, v any) {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	// check asks B's API for the queue alone and in the list.
	check := func(ready, consumers int) {
		t.Helper()
		var one queueJSON
		get("/api/queues/%2F/counted", &one)
		var list []queueJSON
		get("/api/queues", &list)
		found := false
		for _, q := range append(list, one) {
			if q.Name != "counted" {
				continue
			}
			found = true
			if q.Node != "warren@a" || q.Ready != ready || q.Consumers != consumers {
				t.Fatalf("B's API lists counted as %+v, want node warren@a, %d ready, %d consumers", q, ready, consumers)
			}
		}
		if !found || one.Name != "counted" {
			t.Fatalf("counted not listed by B's API: %+v", one)
		}
	}
	check(7, 0)
	if _, err := openCh(t, ca).Consume("counted", "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the consumer on A holding the messages", func() bool {
		qi, err := a.srv.Queue("/", "counted")
		return err == nil && qi.Consumers == 1 && qi.Ready == 0
	})
	check(0, 1)
}

// TestClusterGlobalPrefetchRemote: a channel-wide prefetch (basic.qos
// global) limits a consumer of a queue homed on another node as it does a
// local one: with 2, two of ten messages are delivered until one is acked.
func TestClusterGlobalPrefetchRemote(t *testing.T) {
	nodes := startCluster(t)
	a, b := nodes[0], nodes[1]
	ca, cb := dialNode(t, a), dialNode(t, b)
	if _, err := openCh(t, ca).QueueDeclare("limited", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "limited on B", func() bool {
		_, err := b.srv.Queue("/", "limited")
		return err == nil
	})
	publishConfirmed(t, ca, newHistory(), "p", "limited", 0, 10)
	ch := openCh(t, cb)
	if err := ch.Qos(2, 0, true); err != nil {
		t.Fatal(err)
	}
	dels, err := ch.Consume("limited", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Two deliveries, and the other eight stay ready on A: the home node
	// counts what it sent unacknowledged.
	var got []amqp091.Delivery
	for range 2 {
		got = append(got, <-dels)
	}
	eventually(t, "8 ready and 2 unacked on A", func() bool {
		qi, err := a.srv.Queue("/", "limited")
		return err == nil && qi.Unacked+qi.Ready == 10 && qi.Unacked >= 2
	})
	if qi, _ := a.srv.Queue("/", "limited"); qi.Unacked != 2 || qi.Ready != 8 {
		t.Fatalf("with a global prefetch of 2: %d unacked, %d ready on A; want 2 and 8", qi.Unacked, qi.Ready)
	}
	if err := got[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-dels:
		_ = d
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery after an ack freed the channel's prefetch")
	}
}
