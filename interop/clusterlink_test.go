package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
	"github.com/warrenmq/warren/cluster"
	"github.com/warrenmq/warren/internal/testport"
	"github.com/warrenmq/warren/store"
)

// Cluster tests in one process: each node is a broker with its own store
// and cluster.Node (the authenticated cluster port, on 127.0.0.1), whose
// node link (cluster.BrokerLink) carries what clients do with queues homed
// on other nodes. Definitions are ordered by a Raft group over in-memory
// transports (raftDefs), whose state machines are the brokers'
// definitions.

// raftDefs is a 3-member Raft group ordering definition commands for the
// test's brokers: member i applies to the broker node i runs now.
type raftDefs struct {
	rafts []*raft.Raft
	fsms  []*defFSM
}

// defFSM is a member's raft.FSM: the current broker's
// DefinitionStateMachine, and the results of what it applied, for the
// proposer on this member (read your writes).
type defFSM struct {
	mu      sync.Mutex
	cond    *sync.Cond
	sm      broker.StateMachine
	applied uint64
	results map[uint64]any
}

func (f *defFSM) set(sm broker.StateMachine) {
	f.mu.Lock()
	f.sm = sm
	f.mu.Unlock()
}

func (f *defFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	sm := f.sm
	f.mu.Unlock()
	r := sm.Apply(l.Index, l.Data)
	f.mu.Lock()
	f.results[l.Index] = r
	f.applied = l.Index
	f.cond.Broadcast()
	f.mu.Unlock()
	return nil
}

func (f *defFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	sm := f.sm
	f.mu.Unlock()
	s, err := sm.Snapshot()
	if err != nil {
		return nil, err
	}
	return fsmSnapshot{s}, nil
}

func (f *defFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	f.mu.Lock()
	sm := f.sm
	f.mu.Unlock()
	return sm.Restore(0, r)
}

type fsmSnapshot struct{ s broker.StateSnapshot }

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.s.WriteTo(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s fsmSnapshot) Release() { s.s.Release() }

func newRaftDefs(n int) *raftDefs {
	d := &raftDefs{}
	for range n {
		f := &defFSM{results: make(map[uint64]any)}
		f.cond = sync.NewCond(&f.mu)
		d.fsms = append(d.fsms, f)
	}
	return d
}

// start forms the group (call once every member's broker is set).
func (d *raftDefs) start(t testing.TB) {
	n := len(d.fsms)
	var trans []*raft.InmemTransport
	var servers []raft.Server
	for i := range n {
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("m%d", i)))
		trans = append(trans, tr)
		servers = append(servers, raft.Server{ID: raft.ServerID(addr), Address: addr})
	}
	for i := range n {
		for j := range n {
			if i != j {
				trans[i].Connect(trans[j].LocalAddr(), trans[j])
			}
		}
	}
	for i := range n {
		c := raft.DefaultConfig()
		c.LocalID = servers[i].ID
		c.HeartbeatTimeout, c.ElectionTimeout = 100*time.Millisecond, 100*time.Millisecond
		c.LeaderLeaseTimeout, c.CommitTimeout = 50*time.Millisecond, 5*time.Millisecond
		c.SnapshotThreshold = 1 << 30
		c.LogOutput = io.Discard
		logs := raft.NewInmemStore()
		snaps := raft.NewInmemSnapshotStore()
		if i == 0 {
			if err := raft.BootstrapCluster(c, logs, logs, snaps, trans[i], raft.Configuration{Servers: servers}); err != nil {
				t.Fatal(err)
			}
		}
		r, err := raft.NewRaft(c, d.fsms[i], logs, logs, snaps, trans[i])
		if err != nil {
			t.Fatal(err)
		}
		d.rafts = append(d.rafts, r)
	}
	t.Cleanup(func() {
		for _, r := range d.rafts {
			_ = r.Shutdown().Error()
		}
	})
}

// log is member i as a broker.CommandLog: a proposal goes to the leader
// and returns once member i has applied it, with member i's result.
func (d *raftDefs) log(i int) broker.CommandLog { return memberLog{d, i} }

type memberLog struct {
	d *raftDefs
	i int
}

func (l memberLog) Propose(ctx context.Context, cmd []byte) (broker.Applied, error) {
	for {
		for _, r := range l.d.rafts {
			if r.State() != raft.Leader {
				continue
			}
			f := r.Apply(bytes.Clone(cmd), 10*time.Second)
			if err := f.Error(); err != nil {
				if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
					break
				}
				return broker.Applied{}, err
			}
			idx := f.Index()
			fsm := l.d.fsms[l.i]
			fsm.mu.Lock()
			for fsm.applied < idx {
				fsm.cond.Wait()
			}
			res := fsm.results[idx]
			delete(fsm.results, idx)
			fsm.mu.Unlock()
			return broker.Applied{Index: idx, Result: res}, nil
		}
		select {
		case <-ctx.Done():
			return broker.Applied{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (l memberLog) ProposeFunc(cmd []byte, done func(broker.Applied, error)) {
	cmd = bytes.Clone(cmd)
	go func() { done(l.Propose(context.Background(), cmd)) }()
}

// clusterNode is one node of a test cluster: its store, cluster port and
// broker, which stop and start again as a restart would.
type clusterNode struct {
	t       testing.TB
	name    string
	dir     string
	addr    string // the cluster port, kept across restarts
	defs    *raftDefs
	i       int
	secret  []byte
	peers   map[string]string
	current atomic.Pointer[broker.Broker]

	st   *store.Store
	node *cluster.Node
	srv  *brokertest.Server
}

// startNode starts the store, the cluster port and the broker of n.
func (n *clusterNode) start() {
	t := n.t
	st, err := store.Open(store.Config{Dir: n.dir, NoSync: true, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	addr := n.addr
	if addr == "" {
		addr = testport.Below(t, "127.0.0.1")
	}
	node, err := cluster.New(cluster.Config{NodeName: n.name, ClusterAddr: addr, Secret: n.secret, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	node.HandleLink(func(peer string, conn net.Conn) {
		if b := n.current.Load(); b != nil {
			b.ServeLink(peer, conn)
		}
	})
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	n.addr = node.Addr()
	link := cluster.NewBrokerLink(node)
	for name, a := range n.peers {
		link.SetPeer(name, a)
	}
	n.st, n.node = st, node
	n.srv = brokertest.Start(t, &broker.Config{Store: st, NodeName: n.name, Link: link,
		DefinitionLog: func(m broker.DefinitionMachine) broker.DefinitionLog {
			n.defs.fsms[n.i].set(broker.DefinitionStateMachine(m))
			return broker.CommandDefinitionLog(n.defs.log(n.i))
		}})
	n.current.Store(n.srv.Broker)
}

// stop closes the broker, the cluster port and the store, as a node going
// down.
func (n *clusterNode) stop() {
	if n.srv == nil {
		return
	}
	n.current.Store(nil)
	_ = n.srv.Close()
	_ = n.node.Close()
	_ = n.st.Close()
	n.srv = nil
}

// startCluster starts nodes warren@a, warren@b, warren@c.
func startCluster(t testing.TB) []*clusterNode {
	defs := newRaftDefs(3)
	secret := []byte("a shared cluster secret for tests")
	names := []string{"warren@a", "warren@b", "warren@c"}
	// The ports first, so that every node knows its peers' addresses.
	var nodes []*clusterNode
	for i, name := range names {
		addr := testport.Below(t, "127.0.0.1")
		nodes = append(nodes, &clusterNode{t: t, name: name, dir: t.TempDir(), addr: addr, defs: defs, i: i,
			secret: secret, peers: map[string]string{}})
	}
	for _, n := range nodes {
		for _, p := range nodes {
			if p != n {
				n.peers[p.name] = p.addr
			}
		}
	}
	for _, n := range nodes {
		n.start()
		t.Cleanup(n.stop)
	}
	defs.start(t)
	return nodes
}

func dialNode(t testing.TB, n *clusterNode) *amqp091.Connection {
	t.Helper()
	c, err := amqp091.Dial(n.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func openCh(t testing.TB, c *amqp091.Connection) *amqp091.Channel {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// passive declares q passively on a new channel of c.
func passive(c *amqp091.Connection, q string) (amqp091.Queue, error) {
	ch, err := c.Channel()
	if err != nil {
		return amqp091.Queue{}, err
	}
	defer ch.Close()
	return ch.QueueDeclarePassive(q, true, false, false, false, nil)
}

// history records what a test published (confirmed) and consumed.
type history struct {
	mu        sync.Mutex
	confirmed map[string]bool
	acked     map[string]int
	lastFirst map[string]int // per publisher, the last sequence first delivered
	errs      []string
}

func newHistory() *history {
	return &history{confirmed: map[string]bool{}, acked: map[string]int{}, lastFirst: map[string]int{}}
}

// delivered records a delivery of (pub, seq); first deliveries of one
// publisher's messages must come in its order.
func (h *history) delivered(pub string, seq int, redelivered bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if redelivered {
		return
	}
	if last, ok := h.lastFirst[pub]; ok && seq <= last {
		h.errs = append(h.errs, fmt.Sprintf("%s #%d first delivered after #%d", pub, seq, last))
	}
	h.lastFirst[pub] = seq
}

func (h *history) ack(id string) {
	h.mu.Lock()
	h.acked[id]++
	h.mu.Unlock()
}

// check: every confirmed message acked exactly once, nothing acked that
// was not published, per-publisher order kept.
func (h *history) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.errs {
		t.Error(e)
	}
	for id := range h.confirmed {
		if n := h.acked[id]; n != 1 {
			t.Errorf("confirmed message %s acked %d times, want once", id, n)
		}
	}
	for id, n := range h.acked {
		if !h.confirmed[id] {
			t.Errorf("message %s acked %d times but never confirmed", id, n)
		}
	}
}

// publishConfirmed publishes n persistent messages of publisher pub to q
// through c with confirms and records those acked.
func publishConfirmed(t *testing.T, c *amqp091.Connection, h *history, pub, q string, from, n int) {
	t.Helper()
	ch := openCh(t, c)
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var confs []*amqp091.DeferredConfirmation
	for i := from; i < from+n; i++ {
		dc, err := ch.PublishWithDeferredConfirm("", q, true, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, MessageId: fmt.Sprintf("%s-%d", pub, i),
			Headers: amqp091.Table{"pub": pub, "seq": int32(i)}, Body: []byte(fmt.Sprintf("message %d", i))})
		if err != nil {
			t.Fatal(err)
		}
		confs = append(confs, dc)
	}
	for i, dc := range confs {
		ok, err := dc.WaitContext(context.Background())
		if err != nil || !ok {
			t.Fatalf("publish %d of %s: confirmed %t, %v", from+i, pub, ok, err)
		}
		h.mu.Lock()
		h.confirmed[fmt.Sprintf("%s-%d", pub, from+i)] = true
		h.mu.Unlock()
	}
}

func seqOf(d amqp091.Delivery) (string, int) {
	pub, _ := d.Headers["pub"].(string)
	seq, _ := d.Headers["seq"].(int32)
	return pub, int(seq)
}

// TestClusterRemoteQueue: a queue declared on node A is published to
// through B with confirms and consumed through C with manual acks; nack
// with requeue redelivers; closing C's connection returns its unacked
// messages; passive declares through B show A's counts; basic.get works
// through C; when A stops, the queue is unavailable as in RabbitMQ and C's
// consumer is cancelled; when A is back, the queue serves again with its
// durable messages.
func TestClusterRemoteQueue(t *testing.T) {
	// Runs last: every node's goroutines (links included) are gone.
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	nodes := startCluster(t)
	a, b, c := nodes[0], nodes[1], nodes[2]
	ca, cb, cc := dialNode(t, a), dialNode(t, b), dialNode(t, c)

	if _, err := openCh(t, ca).QueueDeclare("orders", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// The other nodes apply the declaration as their members of the
	// metadata group commit it.
	for _, n := range nodes {
		var qi broker.QueueInfo
		eventually(t, "orders on "+n.name, func() bool {
			var err error
			qi, err = n.srv.Queue("/", "orders")
			return err == nil
		})
		if qi.Node != "warren@a" {
			t.Fatalf("%s lists orders on node %q, want warren@a", n.name, qi.Node)
		}
	}
	// balanced placement: the node with the fewest queues (b, then c).
	if _, err := openCh(t, ca).QueueDeclare("spread", true, false, false, false,
		amqp091.Table{"x-queue-leader-locator": "balanced"}); err != nil {
		t.Fatal(err)
	}
	var spread broker.QueueInfo
	eventually(t, "spread on C", func() bool {
		var err error
		spread, err = c.srv.Queue("/", "spread")
		return err == nil
	})
	if spread.Node != "warren@b" {
		t.Fatalf("balanced queue placed on %q, want warren@b", spread.Node)
	}

	h := newHistory()
	publishConfirmed(t, cb, h, "p1", "orders", 0, 200)
	q, err := passive(cb, "orders")
	if err != nil || q.Messages != 200 {
		t.Fatalf("passive declare through B: %+v, %v; want 200 messages", q, err)
	}
	// Nothing of the queue is kept on B or C.
	if qi, _ := b.srv.Queue("/", "orders"); qi.Ready != 0 {
		t.Fatalf("B holds %d messages of a queue homed on A", qi.Ready)
	}

	// Consume through C: ack most, nack-requeue the first five once,
	// leave the last ten unacked and close the connection.
	cc2, err := amqp091.Dial(c.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ch := openCh(t, cc2)
	if err := ch.Qos(20, 0, false); err != nil {
		t.Fatal(err)
	}
	dels, err := ch.Consume("orders", "c1", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	nacked := map[int]bool{}
	redelivered := 0
	acked := 0
	for acked < 150 {
		d := <-dels
		pub, seq := seqOf(d)
		h.delivered(pub, seq, d.Redelivered)
		if d.Redelivered {
			redelivered++
		}
		if seq < 5 && !nacked[seq] {
			nacked[seq] = true
			if err := d.Nack(false, true); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
		h.ack(d.MessageId)
		acked++
	}
	if redelivered != 5 {
		t.Fatalf("%d redeliveries after 5 nacks with requeue", redelivered)
	}
	// Up to the prefetch (20) more are delivered and left unacked, once
	// A has the acks.
	eventually(t, "acks and prefetch on A", func() bool {
		qi, _ := a.srv.Queue("/", "orders")
		return qi.Unacked == 20 && qi.Ready == 30
	})
	if q, err := passive(cb, "orders"); err != nil || q.Consumers != 1 || q.Messages != 30 {
		t.Fatalf("passive declare through B while C consumes: %+v, %v; want 30 ready, 1 consumer", q, err)
	}
	_ = cc2.Close()
	eventually(t, "unacked messages returned", func() bool {
		q, err := passive(cb, "orders")
		return err == nil && q.Messages == 50 && q.Consumers == 0
	})

	// The rest through B with basic.get for one and a consumer for the
	// others.
	chb := openCh(t, cb)
	g, ok, err := chb.Get("orders", false)
	if err != nil || !ok {
		t.Fatalf("basic.get through B: %t, %v", ok, err)
	}
	if !g.Redelivered || g.MessageCount != 49 {
		t.Fatalf("basic.get: redelivered %t, message count %d; want a redelivery with 49 left", g.Redelivered, g.MessageCount)
	}
	if err := g.Ack(false); err != nil {
		t.Fatal(err)
	}
	h.ack(g.MessageId)
	chc := openCh(t, cc)
	dels, err = chc.Consume("orders", "c2", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 49 {
		d := <-dels
		pub, seq := seqOf(d)
		h.delivered(pub, seq, d.Redelivered)
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
		h.ack(d.MessageId)
	}
	eventually(t, "queue drained", func() bool {
		q, err := passive(cb, "orders")
		return err == nil && q.Messages == 0
	})
	h.check(t)

	// A stream homed on A is listed everywhere; it is consumed on A only
	// for now, and can be deleted through another node.
	if _, err := openCh(t, ca).QueueDeclare("events", true, false, false, false,
		amqp091.Table{"x-queue-type": "stream"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "events on B", func() bool {
		qi, err := b.srv.Queue("/", "events")
		return err == nil && qi.Type == "stream" && qi.Node == "warren@a"
	})
	chs := openCh(t, cb)
	if err := chs.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := chs.Consume("events", "", false, false, false, false, nil); !errors.As(err, new(*amqp091.Error)) {
		t.Fatalf("consuming a stream of another node: %v, want a channel error", err)
	}
	if _, err := openCh(t, cb).QueueDelete("events", false, false, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "events deleted on A", func() bool {
		_, err := a.srv.Queue("/", "events")
		return err != nil
	})

	// Ten more, then A stops: C's consumer of another queue of A is
	// cancelled, the queue is unavailable through B and C, and routing
	// to it drops.
	if err := chc.Cancel("c2", false); err != nil {
		t.Fatal(err)
	}
	if _, err := openCh(t, ca).QueueDeclare("side", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "side on C", func() bool {
		_, err := c.srv.Queue("/", "side")
		return err == nil
	})
	chc2 := openCh(t, cc)
	cancels := chc2.NotifyCancel(make(chan string, 1))
	if _, err := chc2.Consume("side", "c3", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	h2 := newHistory()
	publishConfirmed(t, cb, h2, "p2", "orders", 0, 10)
	a.stop()
	select {
	case tag := <-cancels:
		if tag != "c3" {
			t.Fatalf("basic.cancel for %q", tag)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no basic.cancel after the queue's node stopped")
	}
	var perr error
	eventually(t, "queue reported down", func() bool {
		_, perr = passive(cb, "orders")
		return perr != nil
	})
	var ae *amqp091.Error
	want := "NOT_FOUND - home node 'warren@a' of durable queue 'orders' in vhost '/' is down or inaccessible"
	if !errors.As(perr, &ae) || ae.Code != 404 || ae.Reason != want {
		t.Fatalf("passive declare of a queue on a stopped node: %v; want 404 %q", perr, want)
	}
	if _, err := openCh(t, cc).Consume("orders", "", false, false, false, false, nil); !errors.As(err, &ae) || ae.Code != 404 {
		t.Fatalf("consume from a queue on a stopped node: %v, want 404", err)
	}
	chb = openCh(t, cb)
	returns := chb.NotifyReturn(make(chan amqp091.Return, 1))
	if err := chb.Publish("", "orders", true, false, amqp091.Publishing{Body: []byte("lost")}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-returns:
		if r.ReplyCode != 312 {
			t.Fatalf("return %d %s", r.ReplyCode, r.ReplyText)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a mandatory publish to a queue whose node is down was not returned")
	}

	// A comes back: the queue serves again, with its durable messages.
	a.start()
	// B and C each reconnect their node link to A on their own; the queue
	// serves through a node once that node's link is up again.
	for _, conn := range []*amqp091.Connection{cb, cc} {
		eventually(t, "queue back with its 10 messages", func() bool {
			q, err := passive(conn, "orders")
			return err == nil && q.Messages == 10
		})
	}
	publishConfirmed(t, cb, h2, "p4", "orders", 0, 20)
	dels, err = openCh(t, cc).Consume("orders", "c4", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 30 {
		d := <-dels
		pub, seq := seqOf(d)
		h2.delivered(pub, seq, d.Redelivered)
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
		h2.ack(d.MessageId)
	}
	h2.check(t)
}

// BenchmarkClusterPublish measures publishes with confirms to a queue on
// node A through A itself (local) and through B (forwarded over the node
// link), with a consumer on A draining the queue: messages/s is the
// figure to compare.
func BenchmarkClusterPublish(b *testing.B) {
	nodes := startCluster(b)
	na, nb := nodes[0], nodes[1]
	ca, cb := dialNode(b, na), dialNode(b, nb)
	for _, persistent := range []bool{false, true} {
		name := "transient"
		mode := amqp091.Transient
		if persistent {
			name, mode = "persistent", amqp091.Persistent
		}
		q := "bench-" + name
		if _, err := openCh(b, ca).QueueDeclare(q, persistent, false, false, false, nil); err != nil {
			b.Fatal(err)
		}
		eventually(b, "queue on B", func() bool {
			_, err := nb.srv.Queue("/", q)
			return err == nil
		})
		if _, err := openCh(b, ca).Consume(q, "", true, false, false, false, nil); err != nil {
			b.Fatal(err)
		}
		for _, via := range []struct {
			name string
			c    *amqp091.Connection
		}{{"local", ca}, {"forwarded", cb}} {
			b.Run(name+"/"+via.name, func(b *testing.B) {
				ch := openCh(b, via.c)
				defer ch.Close()
				if err := ch.Confirm(false); err != nil {
					b.Fatal(err)
				}
				confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 512))
				body := make([]byte, 100)
				const window = 256
				out := 0
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := ch.Publish("", q, false, false, amqp091.Publishing{DeliveryMode: mode, Body: body}); err != nil {
						b.Fatal(err)
					}
					out++
					for out >= window {
						if c := <-confirms; !c.Ack {
							b.Fatal("nack")
						}
						out--
					}
				}
				for ; out > 0; out-- {
					if c := <-confirms; !c.Ack {
						b.Fatal("nack")
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}
