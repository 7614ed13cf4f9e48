package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// failoverConfig is `warren bench failover`: clients declare and delete
// queues in a loop through every node of a cluster while something else
// (scripts/cluster-perf.sh) kills nodes and writes one event line per kill
// to Events, and "end" (or ends the input) after the last:
//
//	kill NODE [UNIX_NANOS]
//	end
//
// NODE is the killed node's position in URIs, from 1; UNIX_NANOS the wall
// clock time of the kill, taken just before sending SIGKILL (the time the
// line is read when it is missing). For each kill the run reports the time
// from the kill to the first declare-ok, on a node other than the killed one,
// of a declare sent after the kill.
type failoverConfig struct {
	URIs           []string
	ClientsPerNode int
	// Duration caps the run; 0 = until Events ends (and Settle has passed).
	Duration time.Duration
	// Settle is how long the run goes on after the last event, so that the
	// last kill has its answer; a kill with no answer within it (or before
	// the next kill) counts as not recovered.
	Settle time.Duration
	Events io.Reader
	Out    io.Writer
	// onDeclare, when set, is called after every declare-ok with the
	// node's index (from 0), on the client's goroutine (tests).
	onDeclare func(node int)
}

func (cfg *failoverConfig) validate() error {
	switch {
	case len(cfg.URIs) < 2:
		return errors.New("failover needs the URIs of at least two nodes (--uri, repeated)")
	case cfg.ClientsPerNode < 1:
		return fmt.Errorf("--clients %d: want at least 1 per node", cfg.ClientsPerNode)
	case cfg.Events == nil:
		return errors.New("no event input")
	case cfg.Duration < 0 || cfg.Settle < 0:
		return errors.New("--duration and --settle must be >= 0")
	}
	return nil
}

// failoverKill is one kill event and its outcome.
type failoverKill struct {
	Node int       // 1-based, into URIs
	At   time.Time // of the SIGKILL
	// Recovered is the time from At to the first declare-ok on another
	// node of a declare sent after At; OK says whether there was one
	// before the next kill or the end of the run.
	Recovered time.Duration
	OK        bool
	// By is the node (1-based) that answered first.
	By int
	// Failures counts failed declares and deletes (on any node, the killed
	// one included) from At to the recovery.
	Failures uint64
}

// failoverResult is a failover run: each kill, the median recovery, the
// totals per node.
type failoverResult struct {
	Kills    []failoverKill
	Median   time.Duration // of the recovered kills
	Declared []uint64      // declare-ok per node
	Failures uint64
	Duration time.Duration
}

// failoverStopGrace is how long the clients get to return at the end before
// their connections are closed under them.
const failoverStopGrace = 10 * time.Second

// failoverOp is one declare-ok: when the declare was sent and answered.
type failoverOp struct{ sent, done int64 }

// failoverClient loops declares and deletes through one node. Its ops and
// failure times are read after its goroutine ends.
type failoverClient struct {
	node  int // 0-based
	dc    declareClient
	ops   []failoverOp
	fails []int64 // UnixNano of each failure
}

// errEventsEnd is parseFailoverEvent's answer to "end".
var errEventsEnd = errors.New("end of events")

// parseFailoverEvent parses a "kill NODE [UNIX_NANOS]" line; now is the
// time used when the line has none. Empty lines and lines starting with #
// return ok == false and no error; "end" returns errEventsEnd.
func parseFailoverEvent(line string, nodes int, now time.Time) (failoverKill, bool, error) {
	f := strings.Fields(line)
	if len(f) == 0 || strings.HasPrefix(f[0], "#") {
		return failoverKill{}, false, nil
	}
	if len(f) == 1 && f[0] == "end" {
		return failoverKill{}, false, errEventsEnd
	}
	if f[0] != "kill" || len(f) < 2 || len(f) > 3 {
		return failoverKill{}, false, fmt.Errorf("event %q: want \"kill NODE [UNIX_NANOS]\"", line)
	}
	n, err := strconv.Atoi(f[1])
	if err != nil || n < 1 || n > nodes {
		return failoverKill{}, false, fmt.Errorf("event %q: node must be 1..%d", line, nodes)
	}
	k := failoverKill{Node: n, At: now}
	if len(f) == 3 {
		ns, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || ns <= 0 {
			return failoverKill{}, false, fmt.Errorf("event %q: bad UNIX_NANOS", line)
		}
		k.At = time.Unix(0, ns)
	}
	return k, true, nil
}

// runFailover runs the clients until Events ends and Settle has passed, or
// Duration, or ctx; then matches every kill with the declares around it.
func runFailover(ctx context.Context, cfg failoverConfig) (failoverResult, error) {
	if err := cfg.validate(); err != nil {
		return failoverResult{}, err
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Duration > 0 {
		var c context.CancelFunc
		runCtx, c = context.WithTimeout(runCtx, cfg.Duration)
		defer c()
	}
	if f, ok := cfg.Events.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			cfg.Events = &followFile{ctx: runCtx, f: f}
		}
	}

	prefix := "warren-bench-failover-" + benchRunID()
	var clients []*failoverClient
	for node, uri := range cfg.URIs {
		for j := range cfg.ClientsPerNode {
			clients = append(clients, &failoverClient{node: node, dc: declareClient{uri: uri, name: fmt.Sprintf("warren-bench-failover-%d-%d", node+1, j)}})
		}
	}
	var declared atomic.Uint64
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			defer c.dc.close()
			for n := 0; runCtx.Err() == nil; n++ {
				ch, err := c.dc.channel()
				if err != nil {
					c.fails = append(c.fails, time.Now().UnixNano())
					sleepCtx(runCtx, 20*time.Millisecond) // the node is down: try again soon
					continue
				}
				name := fmt.Sprintf("%s-%d-%d", prefix, i, n)
				sent := time.Now().UnixNano()
				if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
					c.fails = append(c.fails, time.Now().UnixNano())
					continue
				}
				c.ops = append(c.ops, failoverOp{sent: sent, done: time.Now().UnixNano()})
				declared.Add(1)
				if cfg.onDeclare != nil {
					cfg.onDeclare(c.node)
				}
				if _, err := ch.QueueDelete(name, false, false, false); err != nil {
					c.fails = append(c.fails, time.Now().UnixNano())
				}
			}
		})
	}

	// The event reader: a kill is logged as it comes; the run ends Settle
	// after the input does.
	var (
		kmu   sync.Mutex
		kills []failoverKill
		bad   error
	)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(cfg.Events)
		for sc.Scan() {
			k, ok, err := parseFailoverEvent(sc.Text(), len(cfg.URIs), time.Now())
			if errors.Is(err, errEventsEnd) {
				break
			}
			if err != nil {
				kmu.Lock()
				bad = err
				kmu.Unlock()
				cancel()
				return
			}
			if ok {
				fmt.Fprintf(cfg.Out, "kill of node %d at +%.3fs\n", k.Node, k.At.Sub(start).Seconds())
				kmu.Lock()
				kills = append(kills, k)
				kmu.Unlock()
			}
		}
		sleepCtx(runCtx, cfg.Settle)
		cancel()
	}()
	rep := time.NewTicker(time.Second)
	var last uint64
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case <-rep.C:
			d := declared.Load()
			fmt.Fprintf(cfg.Out, "time %.0fs, declared %d/s\n", time.Since(start).Seconds(), d-last)
			last = d
		}
	}
	rep.Stop()
	if !waitGroupTimeout(&wg, failoverStopGrace) {
		// A declare is stuck on a node that neither answers nor closes:
		// fail the sockets so that the clients return.
		for _, c := range clients {
			c.dc.abort()
		}
		wg.Wait()
	}
	// The reader may be blocked on input that never ends (no Duration, ctx
	// cancelled): it is not waited for then.
	select {
	case <-readDone:
	default:
	}
	kmu.Lock()
	defer kmu.Unlock()
	if bad != nil {
		return failoverResult{}, bad
	}
	res := matchFailover(kills, clients, len(cfg.URIs), time.Now())
	res.Duration = time.Since(start)
	return res, nil
}

// followFile reads a regular file as `tail -f` does: at its end it waits
// for more to be appended, until ctx is done (then it reports io.EOF).
type followFile struct {
	ctx context.Context
	f   *os.File
}

func (r *followFile) Read(p []byte) (int, error) {
	for {
		n, err := r.f.Read(p)
		if n > 0 || (err != nil && err != io.EOF) {
			return n, err
		}
		sleepCtx(r.ctx, 10*time.Millisecond)
		if r.ctx.Err() != nil {
			return 0, io.EOF
		}
	}
}

// matchFailover finds, for each kill, the first declare-ok on another node
// of a declare sent after it and answered before the next kill (or end).
func matchFailover(kills []failoverKill, clients []*failoverClient, nodes int, end time.Time) failoverResult {
	res := failoverResult{Declared: make([]uint64, nodes)}
	for _, c := range clients {
		res.Declared[c.node] += uint64(len(c.ops))
		res.Failures += uint64(len(c.fails))
	}
	slices.SortStableFunc(kills, func(a, b failoverKill) int { return a.At.Compare(b.At) })
	var recovered []time.Duration
	for i := range kills {
		k := &kills[i]
		at := k.At.UnixNano()
		limit := end.UnixNano()
		if i+1 < len(kills) {
			limit = kills[i+1].At.UnixNano()
		}
		first := int64(-1)
		for _, c := range clients {
			if c.node == k.Node-1 {
				continue
			}
			// ops are in order of sending: the first sent after the kill
			// is the client's first answer to a post-kill declare.
			j, _ := slices.BinarySearchFunc(c.ops, at, func(o failoverOp, t int64) int {
				if o.sent < t {
					return -1
				}
				return 1
			})
			if j < len(c.ops) && c.ops[j].done <= limit && (first < 0 || c.ops[j].done < first) {
				first, k.By = c.ops[j].done, c.node+1
			}
		}
		stop := limit
		if first >= 0 {
			k.OK, k.Recovered, stop = true, time.Duration(first-at), first
			recovered = append(recovered, k.Recovered)
		}
		for _, c := range clients {
			for _, f := range c.fails {
				if f >= at && f <= stop {
					k.Failures++
				}
			}
		}
	}
	res.Kills = kills
	if len(recovered) > 0 {
		slices.Sort(recovered)
		n := len(recovered)
		res.Median = (recovered[(n-1)/2] + recovered[n/2]) / 2
	}
	return res
}
