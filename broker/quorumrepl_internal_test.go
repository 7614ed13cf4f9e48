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
	g := NewQueueGroup()
	// The first command's apply waits until every publish is submitted, so
	// the backlog is over the high mark whatever the machine's speed.
	gm := &gatedMachine{StateMachine: g, gate: make(chan struct{})}
	l := startGroupLog(t, gm)
	defer gm.open()
	b, p := newTestProposer(t, l)
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

// startGroupLog starts a real single-node log applying to sm, on a store
// in a temporary directory; both are closed (the log first) when the test
// ends.
func startGroupLog(t *testing.T, sm StateMachine) *LocalLog {
	t.Helper()
	st, err := store.Open(store.Config{Dir: t.TempDir(), NoSync: true, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	l, err := NewLocalLog(LocalLogConfig{Store: st, LogID: 1, Machine: sm, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// newTestProposer is group 1's proposer on node n1 of a bare broker,
// proposing to log.
func newTestProposer(t *testing.T, log CommandLog) (*Broker, *groupProposer) {
	b := &Broker{log: zaptest.NewLogger(t)}
	b.repl.init("n1")
	return b, &groupProposer{b: b, g: 1, log: log}
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

// framedLog is a LocalLog as a PipelineLog whose framing takes h bytes
// before a command: it writes its mark there and records the buffers Begin
// was handed. Its first Begin closes entered and waits for hold.
type framedLog struct {
	*LocalLog
	h             int
	entered, hold chan struct{}
	first         sync.Once
	mu            sync.Mutex
	bufs          [][]byte
}

func (l *framedLog) Headroom() int { return l.h }

func (l *framedLog) Begin(buf []byte, committed func()) (func() (Applied, error), bool) {
	l.first.Do(func() {
		close(l.entered)
		<-l.hold
	})
	if len(buf) < l.h {
		return nil, false
	}
	for i := range l.h {
		buf[i] = '#'
	}
	l.mu.Lock()
	l.bufs = append(l.bufs, buf)
	l.mu.Unlock()
	type result struct {
		a   Applied
		err error
	}
	ch := make(chan result, 1)
	l.ProposeFunc(buf[l.h:], func(a Applied, err error) {
		if err == nil && committed != nil {
			committed()
		}
		ch <- result{a, err}
	})
	return func() (Applied, error) { r := <-ch; return r.a, r.err }, true
}

// TestGroupProposerFramed: a command submitted alone, built behind the
// log's headroom, is handed to Begin in its own buffer (not copied into a
// batch) and its caller gets its result; commands that share an entry go
// in a batch built behind the headroom too, and each gets its own result,
// in order.
func TestGroupProposerFramed(t *testing.T) {
	g := NewQueueGroup()
	l := &framedLog{LocalLog: startGroupLog(t, g), h: 16, entered: make(chan struct{}), hold: make(chan struct{})}
	var release sync.Once
	defer release.Do(func() { close(l.hold) })
	b, p := newTestProposer(t, l)
	if h := p.headroom(); h != l.h {
		t.Fatalf("headroom %d, want %d", h, l.h)
	}
	k := GroupQueueKey{VHost: "/", Name: "q", ID: 1}
	created := make(chan error, 1)
	p.submit(GroupCreateCmd(k, queue.DefaultConfig()), func(r *GroupResult, err error) {
		if err == nil {
			err = r.Err
		}
		created <- err
	})
	results := make(chan uint64, 16)
	enqueue := func(seq uint64) []byte {
		c := queue.Cmd{Op: queue.OpEnqueue, TTL: -1, Msg: &queue.Message{Body: []byte("m")}, Publisher: 1, PubSeq: seq}
		buf := AppendGroupQueueCmd(make([]byte, l.h, 256), k, &c)
		p.submitCmd(replCmd{cmd: buf[l.h:], buf: buf, done: func(r *GroupResult, err error) {
			if err != nil || r.Err != nil || len(r.Effects) != 1 || r.Effects[0].Kind != queue.EffConfirm {
				results <- 0
				return
			}
			results <- r.Effects[0].PubSeq
		}})
		return buf
	}
	// The create's Begin is held: the next three commands wait together
	// and go in one entry.
	<-l.entered
	for seq := uint64(1); seq <= 3; seq++ {
		enqueue(seq)
	}
	release.Do(func() { close(l.hold) })
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	for want := uint64(1); want <= 3; want++ {
		if seq := <-results; seq != want {
			t.Fatalf("result for publish %d, want %d", seq, want)
		}
	}
	// Alone: proposed in place.
	buf := enqueue(4)
	if seq := <-results; seq != 4 {
		t.Fatalf("result for publish %d, want 4", seq)
	}
	l.mu.Lock()
	bufs := l.bufs
	l.mu.Unlock()
	if len(bufs) != 3 {
		t.Fatalf("%d entries begun, want 3 (the create, a batch of three, one alone)", len(bufs))
	}
	if &bufs[2][0] != &buf[0] || len(bufs[2]) != len(buf) {
		t.Fatal("a command alone in its entry was copied, not proposed in its own buffer")
	}
	for _, e := range bufs[:2] {
		if len(e) <= l.h || e[l.h] != groupBatch || string(e[:l.h]) != "################" {
			t.Fatalf("entry %q: not a batch behind the headroom", e)
		}
	}
	if n := bufs[1][l.h+1]; n != 3 {
		t.Fatalf("second entry has %d commands, want 3", n)
	}
	if ready, _, _, _ := g.Counts(k); ready != 4 {
		t.Fatalf("%d messages enqueued, want 4", ready)
	}
	b.closeRepl()
}
