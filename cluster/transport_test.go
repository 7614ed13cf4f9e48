package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/warrenmq/warren/store"
)

// member is one in-process Warren node of these tests: its cluster port
// (Node), its store, and the Raft groups it runs over the node's transport.
type member struct {
	id    int
	node  *Node
	logs  *observer.ObservedLogs
	st    *store.Store
	rafts map[uint64]*raft.Raft
	fsms  map[uint64]*listFSM
	trans map[uint64]*raft.NetworkTransport
	// tune, when set, adjusts the Raft configuration of its groups.
	tune func(*raft.Config)
}

// writeSecret writes a cluster secret file, mode 0600, and returns its path.
func writeSecret(t testing.TB, secret string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startMember starts the cluster port of node n<id>@test on 127.0.0.1 and
// opens its store.
func startMember(t testing.TB, id int, clusterID, secretFile string) *member {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	log := zap.New(zapcore.NewTee(core, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Core()))
	n, err := New(Config{ClusterID: clusterID, NodeName: fmt.Sprintf("n%d@test", id), ClusterAddr: "127.0.0.1:0",
		SecretFile: secretFile, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	return &member{id: id, node: n, logs: logs, st: openStore(t, t.TempDir(), true),
		rafts: map[uint64]*raft.Raft{}, fsms: map[uint64]*listFSM{}, trans: map[uint64]*raft.NetworkTransport{}}
}

// startGroup starts the member's replica of group g, bootstrapping it with
// servers when given.
func (m *member) startGroup(t testing.TB, g uint64, servers []raft.Server, prepare func(RaftStore)) {
	t.Helper()
	tr, err := m.node.Transport(g)
	if err != nil {
		t.Fatal(err)
	}
	rs := NewRaftStore(m.st.Log(g))
	snaps, err := raft.NewFileSnapshotStore(t.TempDir(), 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	conf := raftConfig(m.id)
	if m.tune != nil {
		m.tune(conf)
	}
	if servers != nil {
		if err := raft.BootstrapCluster(conf, rs, rs, snaps, tr, raft.Configuration{Servers: servers}); err != nil {
			t.Fatal(err)
		}
	}
	if prepare != nil {
		prepare(rs)
	}
	m.fsms[g] = &listFSM{}
	r, err := raft.NewRaft(conf, m.fsms[g], rs, rs, snaps, tr)
	if err != nil {
		t.Fatal(err)
	}
	m.rafts[g], m.trans[g] = r, tr
}

// stop shuts the member's groups, its cluster port and its store down.
func (m *member) stop(t testing.TB) {
	t.Helper()
	if m.node == nil {
		return
	}
	for g, r := range m.rafts {
		if err := r.Shutdown().Error(); err != nil {
			t.Error(err)
		}
		if err := m.trans[g].Close(); err != nil {
			t.Error(err)
		}
	}
	if err := m.node.Close(); err != nil {
		t.Error(err)
	}
	if err := m.st.Close(); err != nil {
		t.Error(err)
	}
	m.node = nil
}

func servers(ms []*member) []raft.Server {
	var s []raft.Server
	for _, m := range ms {
		s = append(s, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", m.id)), Address: raft.ServerAddress(m.node.Addr())})
	}
	return s
}

// groupLeader returns the running member leading group g.
func groupLeader(t testing.TB, ms []*member, g uint64) *member {
	t.Helper()
	var l *member
	waitFor(t, fmt.Sprintf("a leader of group %d", g), func() bool {
		for _, m := range ms {
			if m.node != nil && m.rafts[g] != nil && m.rafts[g].State() == raft.Leader {
				l = m
				return true
			}
		}
		return false
	})
	return l
}

// applyTo applies cmd to group g through its leader, trying again on a
// leadership change.
func applyTo(t *testing.T, ms []*member, g uint64, cmd string) {
	t.Helper()
	for range 50 {
		err := groupLeader(t, ms, g).rafts[g].Apply([]byte(cmd), 10*time.Second).Error()
		if err == nil {
			return
		}
		if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrEnqueueTimeout) {
			t.Fatalf("apply %q: %v", cmd, err)
		}
	}
	t.Fatalf("apply %q: no stable leader", cmd)
}

// established counts the established TCP connections accepted on the given
// listening ports, from the kernel's table (/proc/net/tcp): the server end
// of each connection, so each connection once.
func established(t *testing.T, ports []int) int {
	t.Helper()
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || fs[3] != "01" { // 01: TCP_ESTABLISHED
			continue
		}
		_, hexPort, ok := strings.Cut(fs[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err == nil && slices.Contains(ports, int(p)) {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestClusterRaftGroups runs two Raft groups on three nodes over the
// authenticated cluster port (real TCP on 127.0.0.1, a store per node): they
// elect leaders and apply commands over one TCP connection per node pair; the
// leader of group 1 shuts down, the others elect a new leader, and the two
// survivors end with the same commands, every committed one among them.
func TestClusterRaftGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Raft groups")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	secret := writeSecret(t, "0123456789abcdef-cluster-secret")
	ms := make([]*member, 3)
	for i := range ms {
		ms[i] = startMember(t, i, "test", secret)
	}
	defer func() {
		for _, m := range ms {
			m.stop(t)
		}
	}()
	groupIDs := []uint64{1, 2}
	for _, g := range groupIDs {
		for _, m := range ms {
			m.startGroup(t, g, servers(ms), nil)
		}
	}
	want := map[uint64][]string{}
	for i := range 40 {
		for _, g := range groupIDs {
			cmd := fmt.Sprintf("g%d-%d", g, i)
			applyTo(t, ms, g, cmd)
			want[g] = append(want[g], cmd)
		}
	}
	// Both groups talk over one connection per node pair: three in all.
	// When one node leads both groups its followers have no Raft traffic
	// with each other: a link stream makes every pair connect.
	for _, m := range ms {
		for _, o := range ms {
			if o != m {
				if c, err := m.node.DialLink(o.node.Addr(), 5*time.Second); err == nil {
					c.Close()
				}
			}
		}
	}
	var ports []int
	for _, m := range ms {
		ports = append(ports, port(t, m.node.Addr()))
		waitFor(t, m.node.Name()+" to have sessions with both peers", func() bool { return len(m.node.Peers()) == 2 })
	}
	waitFor(t, "one TCP connection per node pair", func() bool { return established(t, ports) == 3 })
	for _, m := range ms {
		for _, g := range groupIDs {
			waitFor(t, "every node to apply every command", func() bool { return len(m.fsms[g].list()) >= len(want[g]) })
		}
	}
	if n := established(t, ports); n != 3 {
		t.Fatalf("%d TCP connections between 3 nodes running 2 groups, want 3", n)
	}

	// The leader of group 1 goes down; the others elect a new one and go on.
	old := groupLeader(t, ms, 1)
	old.stop(t)
	for i := 40; i < 70; i++ {
		for _, g := range groupIDs {
			cmd := fmt.Sprintf("g%d-%d", g, i)
			applyTo(t, ms, g, cmd)
			want[g] = append(want[g], cmd)
		}
	}
	var live []*member
	for _, m := range ms {
		if m != old {
			live = append(live, m)
		}
	}
	for _, g := range groupIDs {
		waitFor(t, fmt.Sprintf("group %d survivors to agree", g), func() bool {
			a, b := live[0].fsms[g].list(), live[1].fsms[g].list()
			return len(a) >= len(want[g]) && slices.Equal(a, b)
		})
		got := live[0].fsms[g].list()
		for _, cmd := range want[g] {
			if !slices.Contains(got, cmd) {
				t.Fatalf("group %d lost committed command %q", g, cmd)
			}
		}
		if before := old.fsms[g].list(); !slices.Equal(before, got[:len(before)]) {
			t.Fatalf("group %d: the old leader applied %v, not a prefix of the survivors' %v", g, before, got)
		}
	}
}

// refusal returns the "refused cluster peer" log lines of m naming peer.
func refusal(m *member, peer string) []observer.LoggedEntry {
	return m.logs.FilterMessage("refused cluster peer").FilterField(zap.String("peer", peer)).All()
}

// TestClusterRefusesWrongSecret starts a node with a wrong secret that leads
// its own group at a much higher term and tries to add a member of the real
// group as a voter, which would make that member follow it and take its log
// if its Raft RPCs got through. They must not: the member refuses the
// connection with a log line naming the peer, its log and state machine hold
// nothing from the rogue, and its term never jumps. A node of another
// cluster id is refused the same way.
func TestClusterRefusesWrongSecret(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Raft groups")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	secret := writeSecret(t, "0123456789abcdef-cluster-secret")
	ms := make([]*member, 3)
	for i := range ms {
		ms[i] = startMember(t, i, "test", secret)
	}
	rogue := startMember(t, 3, "test", writeSecret(t, "another-secret-of-32-bytes-long!"))
	defer func() {
		for _, m := range append(ms, rogue) {
			m.stop(t)
		}
	}()
	for _, m := range ms {
		m.startGroup(t, 1, servers(ms), nil)
	}
	for i := range 10 {
		applyTo(t, ms, 1, fmt.Sprintf("cmd-%d", i))
	}
	rogue.startGroup(t, 1, servers([]*member{rogue}), func(rs RaftStore) {
		if err := rs.SetUint64([]byte("CurrentTerm"), 1000); err != nil {
			t.Fatal(err)
		}
	})
	rogues := []*member{rogue}
	for i := range 3 {
		applyTo(t, rogues, 1, fmt.Sprintf("rogue-%d", i))
	}
	target := ms[0]
	rogue.rafts[1].AddVoter("n0", raft.ServerAddress(target.node.Addr()), 0, 0)
	// The rogue cannot reach a quorum of its new configuration: it loses
	// its leadership (or, were its RPCs let through, the member would
	// follow it at its term).
	waitFor(t, "the rogue to step down or win the member over", func() bool {
		term, _ := strconv.Atoi(target.rafts[1].Stats()["term"])
		return rogue.rafts[1].State() != raft.Leader || term >= 1000
	})
	applyTo(t, ms, 1, "after")
	for _, m := range ms {
		waitFor(t, "the group to apply its last command", func() bool {
			l := m.fsms[1].list()
			return len(l) > 0 && l[len(l)-1] == "after"
		})
		for _, c := range m.fsms[1].list() {
			if strings.HasPrefix(c, "rogue") {
				t.Fatalf("%s applied %q from the rogue", m.node.Name(), c)
			}
		}
		err := m.st.Log(1).Entries(1, 1<<62, func(e *store.LogEntry) error {
			if strings.HasPrefix(string(e.Data), "rogue") || e.Term >= 1000 {
				return fmt.Errorf("entry %d (term %d) %q from the rogue", e.Index, e.Term, e.Data)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s log: %v", m.node.Name(), err)
		}
		if term, _ := strconv.Atoi(m.rafts[1].Stats()["term"]); term >= 1000 {
			t.Fatalf("%s is at term %d: the rogue's RPCs reached it", m.node.Name(), term)
		}
		if peers := m.node.Peers(); slices.Contains(peers, "n3@test") {
			t.Fatalf("%s has a session with the rogue: %v", m.node.Name(), peers)
		}
	}
	refused := refusal(target, "n3@test")
	if len(refused) == 0 {
		t.Fatal("no log line refusing the rogue")
	}
	if reason := refused[0].ContextMap()["reason"].(string); !strings.Contains(reason, "authentication failed") {
		t.Fatalf("refusal reason %q, want an authentication failure", reason)
	}

	// A node of another cluster (with the right secret) is refused as well,
	// on both sides, with the reason in the log line.
	other := startMember(t, 4, "other", secret)
	defer other.stop(t)
	_, err := other.node.Connect(context.Background(), target.node.Addr())
	if !errors.Is(err, ErrWrongCluster) {
		t.Fatalf("connect from another cluster: %v, want ErrWrongCluster", err)
	}
	waitFor(t, "the member to refuse the other cluster's node", func() bool { return len(refusal(target, "n4@test")) > 0 })
	if reason := refusal(target, "n4@test")[0].ContextMap()["reason"].(string); !strings.Contains(reason, `cluster "other"`) {
		t.Fatalf("refusal reason %q, want the other cluster named", reason)
	}
	if len(refusal(other, target.node.Name())) == 0 {
		t.Fatal("the other cluster's node logged no refusal")
	}
}

// TestClusterLink opens a broker link stream between two nodes: the handler
// gets the authenticated peer's name and the stream's bytes, both ways.
func TestClusterLink(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	secret := writeSecret(t, "0123456789abcdef-cluster-secret")
	a := startMember(t, 0, "test", secret)
	defer a.stop(t)
	core, _ := observer.New(zap.InfoLevel)
	b, err := New(Config{ClusterID: "test", NodeName: "n1@test", ClusterAddr: "127.0.0.1:0", SecretFile: secret, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	b.HandleLink(func(peer string, c net.Conn) {
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil {
			_, _ = c.Write([]byte(peer + ":" + line))
		}
	})
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := a.node.DialLink(b.Addr(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || got != "n0@test:ping\n" {
		t.Fatalf("link echo %q, %v", got, err)
	}
}

// TestSecretFile checks what Start accepts as a secret.
func TestSecretFile(t *testing.T) {
	for _, tc := range []struct {
		name, secret string
		mode         os.FileMode
		want         error
	}{
		{"empty", " \n", 0o600, ErrNoSecret},
		{"short", "short-secret", 0o600, ErrWeakSecret},
		{"readable by others", "0123456789abcdef-cluster-secret", 0o644, ErrSecretFileMode},
		{"good", "0123456789abcdef-cluster-secret", 0o400, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "secret")
			if err := os.WriteFile(p, []byte(tc.secret), tc.mode); err != nil {
				t.Fatal(err)
			}
			n, err := New(Config{ClusterAddr: "127.0.0.1:0", SecretFile: p})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			if err := n.Start(); !errors.Is(err, tc.want) {
				t.Fatalf("Start: %v, want %v", err, tc.want)
			}
		})
	}
}
