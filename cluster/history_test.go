package cluster_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// A recorded history of queue declarations and deletions made through all
// nodes while the metadata leader is SIGKILLed (and restarted), checked two
// ways: every declare that got declare-ok (and was not deleted) is on every
// node afterwards, none refused is; and the whole history, with a read of
// every name on every node at the end, is linearizable for a model of a set
// of names (porcupine, one partition per name).
//
// Reads during the run are left out: a passive declare reads the state of
// the node it is sent to, which lags the leader by the time the node takes
// to apply a committed change (as RabbitMQ 4 with Khepri documents), so
// only the final reads, once every node has applied everything, are
// linearizable reads.

// lkOp is one operation on a name: declare, delete or read.
type lkOp struct {
	Key string
	Op  string
}

// Results: ok, absent (a read or delete that found nothing), present (a
// read that found the queue), unknown (no answer, or "outcome unknown").
type lkResult string

const (
	resOK      lkResult = "ok"
	resAbsent  lkResult = "absent"
	resPresent lkResult = "present"
	resUnknown lkResult = "unknown"
	resRefused lkResult = "refused"
)

// setModel is a set of queue names, checked per name.
var setModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(lkOp).Key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return false },
	Step: func(state, input, output any) (bool, any) {
		present := state.(bool)
		in, res := input.(lkOp), output.(lkResult)
		switch in.Op {
		case "declare":
			return res == resOK || res == resUnknown, true
		case "delete":
			if res == resAbsent {
				return !present, false
			}
			return true, false
		case "read":
			return (res == resPresent) == present, present
		}
		return false, present
	},
	Equal: func(a, b any) bool { return a.(bool) == b.(bool) },
	DescribeOperation: func(input, output any) string {
		in := input.(lkOp)
		return fmt.Sprintf("%s(%s) -> %s", in.Op, in.Key, output.(lkResult))
	},
}

// classify turns a declare's or delete's error into a result.
func classify(err error) lkResult {
	if err == nil {
		return resOK
	}
	var ae *amqp091.Error
	if errors.As(err, &ae) {
		switch {
		case ae.Code == amqp091.NotFound:
			return resAbsent
		case strings.Contains(ae.Reason, "the change was refused"):
			return resRefused
		}
	}
	return resUnknown
}

// lkWorker declares and deletes random names through one node.
type lkWorker struct {
	id   int
	node *wnode
	conn *amqp091.Connection
	ch   *amqp091.Channel
}

func (w *lkWorker) channel() (*amqp091.Channel, error) {
	if w.ch != nil && !w.ch.IsClosed() {
		return w.ch, nil
	}
	if w.conn != nil {
		w.conn.Close()
	}
	w.conn, w.ch = nil, nil
	c, err := amqp091.DialConfig(w.node.url(), amqp091.Config{Dial: amqp091.DefaultDial(2 * time.Second)})
	if err != nil {
		return nil, err
	}
	ch, err := c.Channel()
	if err != nil {
		c.Close()
		return nil, err
	}
	w.conn, w.ch = c, ch
	return ch, nil
}

func (w *lkWorker) close() {
	if w.conn != nil {
		w.conn.Close()
	}
}

// lkHistory records operations from several goroutines.
type lkHistory struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

func (h *lkHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *lkHistory) add(client int, in lkOp, call int64, res lkResult, ret int64) {
	if res == resRefused {
		// A refused change has no effect: it is checked below, and left
		// out of the linearizability check.
		ret = call
	}
	if res == resUnknown {
		ret = math.MaxInt64
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: res, Return: ret})
	h.mu.Unlock()
}

// TestClusterLeaderKillHistory runs the workload for a few seconds with
// one leader kill (WARREN_SOAK=1: two minutes, a kill every ~12 seconds).
//
// Each declaration is of a new name and each deletion is of a name the same
// worker declared, on the same node: a redeclaration of an existing queue
// (or a deletion of a missing one) is answered from the node's own state,
// without the log, as in RabbitMQ, so only these operations have outcomes
// decided by the metadata group.
func TestClusterLeaderKillHistory(t *testing.T) {
	duration, killEvery := 9*time.Second, 4*time.Second
	if os.Getenv("WARREN_SOAK") != "" {
		duration, killEvery = 2*time.Minute, 12*time.Second
	}
	nodes := threeNodes(t, localIPs)
	startCluster(t, nodes...)

	h := &lkHistory{start: time.Now()}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	workers := 0
	for _, n := range nodes {
		for range 2 {
			w := &lkWorker{id: workers, node: n}
			workers++
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer w.close()
				rng := rand.New(rand.NewSource(int64(w.id) + time.Now().UnixNano()))
				var mine []string // declared ok, not yet deleted
				for seq := 0; ; seq++ {
					select {
					case <-stop:
						return
					default:
					}
					ch, err := w.channel()
					if err != nil {
						time.Sleep(100 * time.Millisecond)
						continue
					}
					in := lkOp{Key: fmt.Sprintf("lk-%d-%d", w.id, seq), Op: "declare"}
					pick := -1
					if len(mine) > 0 && rng.Intn(3) == 0 {
						pick = rng.Intn(len(mine))
						in = lkOp{Key: mine[pick], Op: "delete"}
					}
					call := h.now()
					if in.Op == "declare" {
						_, err = ch.QueueDeclare(in.Key, true, false, false, false, nil)
					} else {
						_, err = ch.QueueDelete(in.Key, false, false, false)
					}
					res := classify(err)
					h.add(w.id, in, call, res, h.now())
					switch {
					case in.Op == "declare" && res == resOK:
						mine = append(mine, in.Key)
					case in.Op == "delete" && res != resRefused:
						mine = append(mine[:pick], mine[pick+1:]...)
					}
				}
			}()
		}
	}

	// Kill the leader now and then, time the next declaration through a
	// surviving node, restart the killed node a little later.
	deadline := time.Now().Add(duration)
	var failovers []time.Duration
	for k := 0; time.Now().Add(killEvery).Before(deadline); k++ {
		time.Sleep(killEvery / 2)
		var leader, other *wnode
		waitFor(t, "a leader", func() bool {
			for _, n := range nodes {
				if _, name := n.members(); name != "" {
					for _, m := range nodes {
						if m.name == name {
							leader = m
						} else {
							other = m
						}
					}
					return leader != nil
				}
			}
			return false
		})
		killed := time.Now()
		leader.kill()
		for i := 0; ; i++ {
			c, err := amqp091.Dial(other.url())
			if err == nil {
				ch, err := c.Channel()
				if err == nil {
					_, err = ch.QueueDeclare(fmt.Sprintf("probe-%d-%d", k, i), true, false, false, false, nil)
				}
				c.Close()
				if err == nil {
					break
				}
			}
			if time.Since(killed) > time.Minute {
				t.Fatal("no declaration succeeded within a minute of the leader's kill")
			}
		}
		failovers = append(failovers, time.Since(killed))
		t.Logf("leader %s killed: next declaration through %s succeeded %v later", leader.name, other.name, time.Since(killed))
		time.Sleep(killEvery / 2)
		leader.start()
	}
	time.Sleep(time.Until(deadline))
	close(stop)
	wg.Wait()

	waitForMembers(t, 3, nodes...)
	defs := waitSameDefinitions(t, nodes...)

	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	counts := map[string]int{}
	for _, op := range ops {
		counts[op.Input.(lkOp).Op+" "+string(op.Output.(lkResult))]++
	}
	t.Logf("%d operations in %v: %v; failovers %v", len(ops), duration, counts, failovers)

	// The final state (identical on every node).
	var d struct {
		Queues []struct{ Name string } `json:"queues"`
	}
	if err := json.Unmarshal([]byte(defs), &d); err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for _, q := range d.Queues {
		present[q.Name] = true
	}
	// Every name has one declaration and at most one deletion after it.
	declared := map[string]lkResult{}
	deleted := map[string]lkResult{}
	for _, op := range ops {
		in := op.Input.(lkOp)
		if in.Op == "declare" {
			declared[in.Key] = op.Output.(lkResult)
		} else {
			deleted[in.Key] = op.Output.(lkResult)
		}
	}
	for key, dr := range declared {
		del, hasDel := deleted[key]
		var want, sure bool
		switch {
		case dr == resRefused:
			want, sure = false, true
		case dr == resOK && !hasDel, dr == resOK && del == resRefused:
			want, sure = true, true
		case dr == resOK && del == resOK:
			want, sure = false, true
		}
		if sure && present[key] != want {
			t.Errorf("%s: present=%t after declare %s, delete %q", key, present[key], dr, del)
		}
		if dr == resOK && del == resAbsent {
			t.Errorf("%s: declared (ok), then not found by its deletion on the same node", key)
		}
	}

	// Final reads on every node, after everything, then the check.
	final := h.now()
	for i, n := range nodes {
		c, err := amqp091.Dial(n.url())
		if err != nil {
			t.Fatal(err)
		}
		for key := range declared {
			ch, err := c.Channel()
			if err != nil {
				t.Fatal(err)
			}
			_, err = ch.QueueDeclarePassive(key, true, false, false, false, nil)
			res := resPresent
			if err != nil {
				if classify(err) != resAbsent {
					t.Fatal(err)
				}
				res = resAbsent
			} else {
				ch.Close()
			}
			ops = append(ops, porcupine.Operation{ClientId: workers + i, Input: lkOp{Key: key, Op: "read"}, Call: final, Output: res, Return: h.now()})
		}
		c.Close()
	}
	var checked []porcupine.Operation
	for _, op := range ops {
		if op.Output != resRefused {
			checked = append(checked, op)
		}
	}
	switch res := porcupine.CheckOperationsTimeout(setModel, checked, time.Minute); res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Logf("linearizability check timed out on %d operations", len(checked))
	default:
		t.Fatalf("the history of %d operations is not linearizable (%s)", len(checked), res)
	}
}

// TestClusterLeaderKillFastElection: when the metadata leader is SIGKILLed,
// the followers see its cluster-port session end and elect a new leader
// with short timeouts (the lease timeout) instead of waiting out the
// heartbeat timeout; the next declaration through a survivor succeeds, and
// the survivors say in their logs that they took the fast way.
func TestClusterLeaderKillFastElection(t *testing.T) {
	nodes := threeNodes(t, localIPs)
	startCluster(t, nodes...)
	var leader *wnode
	var survivors []*wnode
	waitFor(t, "a leader", func() bool {
		_, name := nodes[0].members()
		leader, survivors = nil, nil
		for _, n := range nodes {
			if n.name == name {
				leader = n
			} else {
				survivors = append(survivors, n)
			}
		}
		return leader != nil
	})
	leader.kill()
	waitFor(t, "a declaration through a survivor", func() bool {
		c, err := amqp091.Dial(survivors[0].url())
		if err != nil {
			return false
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			return false
		}
		_, err = ch.QueueDeclare("after-kill", true, false, false, false, nil)
		return err == nil
	})
	const line = "the metadata leader's session broke: electing with short timeouts"
	fast := 0
	for _, n := range survivors {
		if strings.Contains(n.logs.String(), line) {
			fast++
		}
	}
	if fast == 0 {
		t.Fatalf("no survivor logged %q", line)
	}
}
