package broker

import (
	"fmt"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/queue"
	"github.com/warrenmq/warren/store"
)

// TestGroupProposerOrderAndBackpressure drives a data group's proposer
// over a real single-node log (LocalLog on a store): commands are applied
// in the order submitted, many to an entry, each caller gets its own
// result; a backlog over replHighBytes hands publishers a channel that is
// closed once the backlog has drained.
func TestGroupProposerOrderAndBackpressure(t *testing.T) {
	st, err := store.Open(store.Config{Dir: t.TempDir(), NoSync: true, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g := NewQueueGroup()
	// The first command's apply waits until every publish is submitted, so
	// the backlog is over the high mark whatever the machine's speed.
	gm := &gatedMachine{StateMachine: g, gate: make(chan struct{})}
	l, err := NewLocalLog(LocalLogConfig{Store: st, LogID: 1, Machine: gm, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	defer gm.open()
	b := &Broker{log: zaptest.NewLogger(t)}
	b.repl.init("n1")
	p := &groupProposer{b: b, g: 1, log: l}
	k := GroupQueueKey{VHost: "/", Name: "q", ID: 1}
	p.submit(GroupCreateCmd(k, queue.DefaultConfig()), nil)

	// 80 MiB of enqueues submitted at once: over the high mark.
	const n, size = 80, 1 << 20
	body := make([]byte, size)
	// Results go to buffered channels, never to t: callbacks may still run
	// after a failed test returned (the log's Close fails what is left).
	results := make(chan uint64, n)
	failures := make(chan string, n)
	var drained chan struct{}
	for i := range n {
		c := queue.Cmd{Op: queue.OpEnqueue, TTL: -1, Msg: &queue.Message{Body: body}, Publisher: 1, PubSeq: uint64(i + 1)}
		d := p.submit(AppendGroupQueueCmd(nil, k, &c), func(r *GroupResult, err error) {
			if err != nil || r.Err != nil || len(r.Effects) != 1 || r.Effects[0].Kind != queue.EffConfirm {
				failures <- fmt.Sprintf("enqueue result %+v, %v", r, err)
				results <- 0
				return
			}
			results <- r.Effects[0].PubSeq
		})
		if d != nil {
			drained = d
		}
	}
	if drained == nil {
		t.Fatal("no flow control over the backlog's high mark")
	}
	gm.open()
	<-drained // closed once the backlog drained; a hang fails the test
	for i := range n {
		seq := <-results
		if seq == 0 {
			t.Fatal(<-failures)
		}
		if seq != uint64(i+1) {
			t.Fatalf("result %d is for publish %d: out of order", i, seq)
		}
	}
	if ready, _, _, _ := g.Counts(k); ready != n {
		t.Fatalf("%d messages enqueued, want %d", ready, n)
	}
	b.closeRepl()
}

// gatedMachine holds its first Apply until open is called.
type gatedMachine struct {
	StateMachine
	gate  chan struct{}
	first sync.Once
	shut  sync.Once
}

func (m *gatedMachine) Apply(index uint64, cmd []byte) any {
	m.first.Do(func() { <-m.gate })
	return m.StateMachine.Apply(index, cmd)
}

func (m *gatedMachine) open() { m.shut.Do(func() { close(m.gate) }) }
