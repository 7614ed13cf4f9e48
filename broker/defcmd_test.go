package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
	"github.com/warrenmq/warren/store"
)

// recordingLog is a DefinitionLog that applies each command at once, as a
// single node does, and records the command and what its apply returned.
type recordingLog struct {
	m       broker.DefinitionMachine
	cmds    [][]byte
	results []string
}

func (l *recordingLog) Propose(_ context.Context, cmd []byte) (broker.DefResult, error) {
	r := l.m.ApplyDefinition(cmd)
	l.cmds = append(l.cmds, bytes.Clone(cmd))
	l.results = append(l.results, r.String())
	return r, nil
}

// defsBroker returns a broker on a store of its own in a new directory.
func defsBroker(t *testing.T, cfg broker.Config) *broker.Broker {
	t.Helper()
	st, err := store.Open(store.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	cfg.Store = st
	b, err := broker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// snapshotOf is b's definitions snapshot without the default user's
// password hash: each broker salts it at random in New (a cluster's nodes
// will take it from the first node's snapshot), while every hash that
// comes through the log is the same everywhere.
func snapshotOf(t *testing.T, b *broker.Broker) string {
	t.Helper()
	s, err := b.SnapshotDefinitions()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(s, &m); err != nil {
		t.Fatal(err)
	}
	for _, u := range m["users"].([]any) {
		if u := u.(map[string]any); u["name"] == "guest" {
			u["password_hash"] = ""
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// randomDefinitionChange makes one random definition change on b through
// its admin and management methods, as the HTTP API and definitions import
// do. Refusals are part of the workload.
func randomDefinitionChange(b *broker.Broker, r *rand.Rand) {
	vhosts := []string{"/", "/", "/", "v1"}
	vh := vhosts[r.IntN(len(vhosts))]
	q := fmt.Sprintf("q%d", r.IntN(6))
	x := fmt.Sprintf("x%d", r.IntN(5))
	types := []string{"direct", "topic", "fanout", "headers"}
	key := fmt.Sprintf("k%d", r.IntN(3))
	user := fmt.Sprintf("u%d", r.IntN(3))
	switch r.IntN(20) {
	case 0, 1, 2:
		var args amqp.Table
		if r.IntN(3) == 0 {
			args = amqp.Table{"x-max-length": int32(r.IntN(10) + 1)}
		}
		_ = b.DeclareQueue(vh, "", broker.QueueSpec{Name: q, Durable: r.IntN(2) == 0, AutoDelete: r.IntN(4) == 0, Arguments: args})
	case 3:
		_, _ = b.DeleteQueue(vh, q, false, false)
	case 4, 5:
		_ = b.DeclareExchange(vh, "", broker.ExchangeSpec{Name: x, Type: types[r.IntN(len(types))],
			Durable: r.IntN(2) == 0, AutoDelete: r.IntN(2) == 0})
	case 6:
		_ = b.DeleteExchange(vh, "", x, r.IntN(2) == 0)
	case 7, 8, 9:
		_ = b.Bind(vh, "", x, q, false, key, nil, true)
	case 10:
		_ = b.Bind(vh, "", x, fmt.Sprintf("x%d", r.IntN(5)), true, key, nil, true)
	case 11:
		if r.IntN(2) == 0 {
			_ = b.Bind(vh, "", x, q, false, key, nil, false)
		} else {
			_ = b.Bind(vh, "", x, fmt.Sprintf("x%d", r.IntN(5)), true, key, nil, false)
		}
	case 12:
		def := map[string]any{"max-length": int64(r.IntN(100))}
		if r.IntN(2) == 0 {
			def = map[string]any{"message-ttl": int64(r.IntN(100000)), "alternate-exchange": x}
		}
		_ = b.SetPolicy(vh, fmt.Sprintf("p%d", r.IntN(3)), "^q[0-"+fmt.Sprint(r.IntN(6))+"]", "all", r.IntN(3), def, false)
	case 13:
		_ = b.SetPolicy(vh, fmt.Sprintf("op%d", r.IntN(2)), "^q", "queues", 0, map[string]any{"max-length": int64(r.IntN(50))}, true)
	case 14:
		_ = b.ClearPolicy(vh, fmt.Sprintf("p%d", r.IntN(3)), false)
	case 15:
		switch r.IntN(4) {
		case 0:
			_ = b.SetUserLimits(user, map[string]int64{broker.UserLimitMaxChannels: int64(r.IntN(5) - 1)})
		case 1:
			_ = b.ClearUserLimit(user, []string{broker.UserLimitMaxChannels, "all"}[r.IntN(2)])
		default:
			_ = b.PutUserHash(user, []byte{1, 2, 3, 4, byte(r.IntN(256))}, broker.HashSHA256, []string{"tag" + fmt.Sprint(r.IntN(2))})
		}
	case 16:
		if r.IntN(3) == 0 {
			_ = b.DeleteUser(user)
		} else {
			_ = b.ClearPermissions(user, vh)
		}
	case 17:
		_ = b.SetPermissions(user, vh, ".*", "^q", "^"+x)
		_ = b.SetTopicPermissions(user, vh, x, "^"+key, ".*")
	case 18:
		if r.IntN(3) == 0 {
			_ = b.DeleteVHost("v1")
		} else {
			_ = b.AddVHost("v1")
		}
	case 19:
		if r.IntN(2) == 0 {
			_, _ = b.SetGlobalParameter(fmt.Sprintf("g%d", r.IntN(2)), []byte(fmt.Sprint(r.IntN(9))))
		} else {
			_, _ = b.DeleteGlobalParameter(fmt.Sprintf("g%d", r.IntN(2)))
		}
	}
}

// TestDefinitionsReplayDeterministic records the definition commands of a
// long random workload on one broker, replays them into a fresh broker and
// into one restored from a snapshot taken half way: the same results
// (ids, deletions, refusals) command by command and the same definitions
// (snapshots, which hold the export, the ids and the counters).
func TestDefinitionsReplayDeterministic(t *testing.T) {
	const steps = 1500
	var log *recordingLog
	a := defsBroker(t, broker.Config{DefinitionLog: func(m broker.DefinitionMachine) broker.DefinitionLog {
		log = &recordingLog{m: m}
		return log
	}})
	r := rand.New(rand.NewPCG(14, 15))
	var mid string
	var midRaw []byte
	midCmds := 0
	for i := range steps {
		if i == steps/2 {
			mid, midCmds = snapshotOf(t, a), len(log.cmds)
			var err error
			if midRaw, err = a.SnapshotDefinitions(); err != nil {
				t.Fatal(err)
			}
		}
		randomDefinitionChange(a, r)
	}
	final := snapshotOf(t, a)

	// The workload covers what it should: refusals, cascades of
	// auto-delete exchanges, ids.
	all := strings.Join(log.results, "\n")
	for _, want := range []string{"err=", "deleted=[queue", "exchange x", "existed=true", "policy p"} {
		if !strings.Contains(all, want) {
			t.Errorf("the workload never produced %q", want)
		}
	}
	if len(log.cmds) < steps/2 {
		t.Fatalf("only %d commands for %d steps", len(log.cmds), steps)
	}

	replay := func(t *testing.T, b *broker.Broker, from int) {
		t.Helper()
		for i := from; i < len(log.cmds); i++ {
			if i == midCmds && from == 0 {
				if got := snapshotOf(t, b); got != mid {
					t.Fatalf("after %d commands the replay's definitions differ:\n got %s\nwant %s", i, got, mid)
				}
			}
			if got := b.ApplyDefinition(log.cmds[i]).String(); got != log.results[i] {
				t.Fatalf("command %d %s: replay gave %q, the original %q", i, log.cmds[i], got, log.results[i])
			}
		}
		if got := snapshotOf(t, b); got != final {
			t.Fatalf("definitions after the replay differ:\n got %s\nwant %s", got, final)
		}
	}
	t.Run("fresh", func(t *testing.T) {
		replay(t, defsBroker(t, broker.Config{}), 0)
	})
	t.Run("from snapshot", func(t *testing.T) {
		b := defsBroker(t, broker.Config{})
		if err := b.RestoreDefinitions(midRaw); err != nil {
			t.Fatal(err)
		}
		if got := snapshotOf(t, b); got != mid {
			t.Fatalf("restored definitions differ from the snapshot:\n got %s\nwant %s", got, mid)
		}
		replay(t, b, midCmds)
	})
}

// lockedLog is a recordingLog for a serving broker: its connections
// propose concurrently.
type lockedLog struct {
	mu sync.Mutex
	recordingLog
}

func (l *lockedLog) Propose(ctx context.Context, cmd []byte) (broker.DefResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recordingLog.Propose(ctx, cmd)
}

// deletions returns the names of the queues the applies of the logged
// commands deleted.
func (l *lockedLog) deletions() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]bool{}
	for _, r := range l.results {
		_, del, _ := strings.Cut(r, "deleted=[")
		del, _, _ = strings.Cut(del, "]")
		// "queue a exchange x queue b ...": the names here have no spaces.
		f := strings.Fields(del)
		for i := 0; i+1 < len(f); i += 2 {
			if f[i] == "queue" {
				out[f[i+1]] = true
			}
		}
	}
	return out
}

// TestAutomaticDeletionsAreCommands checks that the deletions nobody asks
// for (the exclusive queue of a closed connection, an auto-delete queue
// whose last consumer left, a queue unused for its x-expires) go through
// the definitions log like the declarations, and that replaying the log
// gives the same definitions.
func TestAutomaticDeletionsAreCommands(t *testing.T) {
	log := &lockedLog{}
	s := brokertest.Start(t, &broker.Config{DefinitionLog: func(m broker.DefinitionMachine) broker.DefinitionLog {
		log.m = m
		return log
	}})
	c1 := dial(t, s)
	ch1 := open(t, c1)
	if _, err := ch1.QueueDeclare("excl", false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	ch := open(t, dial(t, s))
	if _, err := ch.QueueDeclare("auto", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("expiring", true, false, false, false, amqp091.Table{"x-expires": int32(1000)}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("kept", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume("auto", "c", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Cancel("c", false); err != nil {
		t.Fatal(err)
	}
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the three automatic deletions in the log", func() bool {
		d := log.deletions()
		return d["excl"] && d["auto"] && d["expiring"]
	})
	if log.deletions()["kept"] {
		t.Fatal("the log deletes a queue nothing deleted")
	}
	qs, err := s.Broker.Queues("/")
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || qs[0].Name != "kept" {
		t.Fatalf("queues left: %+v", qs)
	}

	log.mu.Lock()
	cmds, results := slices.Clone(log.cmds), slices.Clone(log.results)
	log.mu.Unlock()
	want := snapshotOf(t, s.Broker)
	// The replay is over long before its own x-expires timer (1 s) could
	// delete "expiring" a second time.
	b := defsBroker(t, broker.Config{})
	for i, c := range cmds {
		if got := b.ApplyDefinition(c).String(); got != results[i] {
			t.Fatalf("command %d %s: replay gave %q, the original %q", i, c, got, results[i])
		}
	}
	if got := snapshotOf(t, b); got != want {
		t.Fatalf("definitions after the replay differ:\n got %s\nwant %s", got, want)
	}
}

// queueIDs reads the queues' ids from b's definitions snapshot.
func queueIDs(t *testing.T, b *broker.Broker) map[string]uint64 {
	t.Helper()
	s, err := b.SnapshotDefinitions()
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Queues []struct {
			Name string
			ID   uint64 `json:"warren_id"`
		}
	}
	if err := json.Unmarshal(s, &m); err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, q := range m.Queues {
		out[q.Name] = q.ID
	}
	return out
}

// TestDefinitionIDsSurviveRestart: a durable queue keeps its id across a
// restart, and ids given after it go on past every id given before, those
// of deleted queues included.
func TestDefinitionIDsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	for _, q := range []string{"kept", "gone"} {
		if err := s.Broker.DeclareQueue("/", "", broker.QueueSpec{Name: q, Durable: true}); err != nil {
			t.Fatal(err)
		}
	}
	before := queueIDs(t, s.Broker)
	if _, err := s.Broker.DeleteQueue("/", "gone", false, false); err != nil {
		t.Fatal(err)
	}
	stop()
	s, stop = startOn(t, dir)
	defer stop()
	if err := s.Broker.DeclareQueue("/", "", broker.QueueSpec{Name: "new", Durable: true}); err != nil {
		t.Fatal(err)
	}
	after := queueIDs(t, s.Broker)
	if after["kept"] == 0 || after["kept"] != before["kept"] {
		t.Fatalf("kept's id was %d, is %d after the restart", before["kept"], after["kept"])
	}
	if after["new"] <= before["gone"] {
		t.Fatalf("ids before the restart: %v (gone deleted since); after: %v", before, after)
	}
}
