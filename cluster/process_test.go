package cluster_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testport"
)

// Tests of real warren processes forming a cluster. The binary is built
// once per test run (warrenBinary), without -race.

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// warrenBinary builds cmd/warren once for the whole test run.
func warrenBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("cluster process tests run the real binary")
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "warren-cluster-test")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "warren")
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		out, err := exec.Command(goTool, "build", "-o", binPath, "../cmd/warren").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// wnode is one warren process of a test cluster: its identity and
// addresses stay the same across restarts.
type wnode struct {
	t           testing.TB
	name        string
	ip          string
	dir         string
	clusterAddr string
	secret      string
	join        []string
	extra       []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	logs   *lockedBuffer
	exited chan error
	amqp   string
	http   string
}

// freePort returns an address on ip for a node's cluster port, below the
// ephemeral range (testport.Below).
func freePort(t testing.TB, ip string) string { return testport.Below(t, ip) }

// writeSecret writes a cluster secret file.
func writeSecret(t testing.TB, secret string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// newNode describes a node on ip (a loopback address) with its own data dir.
func newNode(t testing.TB, name, ip, secret string, join []string, extra ...string) *wnode {
	return &wnode{t: t, name: name, ip: ip, dir: filepath.Join(t.TempDir(), name), clusterAddr: freePort(t, ip),
		secret: secret, join: join, extra: extra}
}

// start runs the node and returns once its listeners are up.
func (n *wnode) start() {
	t := n.t
	t.Helper()
	args := []string{"--data-dir", n.dir, "--amqp-addr", n.ip + ":0", "--http-addr", n.ip + ":0", "--metrics-addr", "-",
		"--log-format", "json", "--node-name", n.name, "--cluster-addr", n.clusterAddr, "--cluster-secret-file", n.secret,
		"--cluster-propose-timeout", "3s"}
	if len(n.join) > 0 {
		args = append(args, "--join", strings.Join(n.join, ","))
	}
	args = append(args, n.extra...)
	// While a node was down, an outgoing connection on this machine may
	// have been given its cluster port: start once the port is free again.
	waitFor(t, n.name+"'s cluster port free", func() bool {
		ln, err := net.Listen("tcp", n.clusterAddr)
		if err != nil {
			return false
		}
		ln.Close()
		return true
	})
	cmd := exec.Command(warrenBinary(t), args...)
	logs := &lockedBuffer{}
	cmd.Stdout = logs
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	ready := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			_, _ = logs.Write(append(sc.Bytes(), '\n'))
			var rec struct {
				Msg       string
				Listeners []string
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "Warren started" {
				select {
				case ready <- rec.Listeners:
				default:
				}
			}
		}
		_, _ = io.Copy(logs, stderr)
		exited <- cmd.Wait()
	}()
	n.mu.Lock()
	n.cmd, n.logs, n.exited = cmd, logs, exited
	n.mu.Unlock()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		err := <-exited
		exited <- err
		if t.Failed() {
			t.Logf("%s output:\n%s", n.name, logs.String())
		}
	})
	select {
	case ls := <-ready:
		n.mu.Lock()
		for _, l := range ls {
			kind, addr, _ := strings.Cut(l, " ")
			switch kind {
			case "amqp":
				n.amqp = addr
			case "http":
				n.http = addr
			}
		}
		n.mu.Unlock()
	case err := <-exited:
		exited <- err
		t.Fatalf("%s exited before serving: %v\n%s", n.name, err, logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start\n%s", n.name, logs.String())
	}
}

// kill SIGKILLs the node and waits for it.
func (n *wnode) kill() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	_ = cmd.Process.Kill()
	err := <-exited
	exited <- err
}

// stop SIGTERMs the node and waits for it.
func (n *wnode) stop() {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-n.exited:
		n.exited <- err
	case <-time.After(30 * time.Second):
		n.kill()
	}
}

func (n *wnode) url() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return "amqp://guest:guest@" + n.amqp + "/"
}

func (n *wnode) httpAddr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.http
}

// api calls the node's management API as guest; out, when set, gets the
// JSON answer of a 2xx.
func (n *wnode) api(method, path string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+n.httpAddr()+path, rd)
	if err != nil {
		return 0, err
	}
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json")
	c := http.Client{Timeout: 15 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil && len(b) > 0 {
		return resp.StatusCode, json.Unmarshal(b, out)
	}
	return resp.StatusCode, nil
}

// clusterStatus is /api/cluster/status.
type clusterStatus struct {
	Node  string `json:"node"`
	Nodes []struct {
		Name           string   `json:"name"`
		Running        bool     `json:"running"`
		MetadataLeader bool     `json:"metadata_leader"`
		Partitions     []string `json:"partitions"`
	} `json:"nodes"`
}

func (n *wnode) status() (clusterStatus, error) {
	var st clusterStatus
	_, err := n.api("GET", "/api/cluster/status", nil, &st)
	return st, err
}

// members returns the names of the running members n sees and the leader.
func (n *wnode) members() (running []string, leader string) {
	st, err := n.status()
	if err != nil {
		return nil, ""
	}
	for _, m := range st.Nodes {
		if m.Running {
			running = append(running, m.Name)
		}
		if m.MetadataLeader {
			leader = m.Name
		}
	}
	return running, leader
}

// definitions is the node's /api/definitions, normalised for comparison.
func (n *wnode) definitions() (string, error) {
	var d map[string]any
	if _, err := n.api("GET", "/api/definitions", nil, &d); err != nil {
		return "", err
	}
	b, err := json.Marshal(d)
	return string(b), err
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startCluster starts nodes: the first founds the cluster, the others join
// it; it returns once every node sees all of them running with a leader.
func startCluster(t testing.TB, nodes ...*wnode) {
	t.Helper()
	for _, n := range nodes {
		n.start()
	}
	waitForMembers(t, len(nodes), nodes...)
}

// waitForMembers waits until every node of nodes sees want running members
// and a leader.
func waitForMembers(t testing.TB, want int, nodes ...*wnode) {
	t.Helper()
	for _, n := range nodes {
		waitFor(t, n.name+" sees the cluster", func() bool {
			running, leader := n.members()
			return len(running) == want && leader != ""
		})
	}
}

// threeNodes describes a founding node and two that join it.
func threeNodes(t testing.TB, ips [3]string, extra ...string) []*wnode {
	secret := writeSecret(t, "cluster-test-secret-0123456789")
	n1 := newNode(t, "n1", ips[0], secret, nil, extra...)
	n2 := newNode(t, "n2", ips[1], secret, []string{n1.clusterAddr}, extra...)
	n3 := newNode(t, "n3", ips[2], secret, []string{n1.clusterAddr}, extra...)
	return []*wnode{n1, n2, n3}
}

var localIPs = [3]string{"127.0.0.1", "127.0.0.1", "127.0.0.1"}

// waitSameDefinitions waits until all nodes export the same definitions,
// and returns them.
func waitSameDefinitions(t testing.TB, nodes ...*wnode) string {
	t.Helper()
	var defs string
	waitFor(t, "identical definitions on every node", func() bool {
		first := ""
		for i, n := range nodes {
			d, err := n.definitions()
			if err != nil {
				return false
			}
			if i == 0 {
				first = d
			} else if d != first {
				return false
			}
		}
		defs = first
		return true
	})
	return defs
}

// dial connects to a node.
func dial(t testing.TB, n *wnode) (*amqp091.Connection, *amqp091.Channel) {
	t.Helper()
	c, err := amqp091.Dial(n.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return c, ch
}

// passive reports whether the queue exists on node n (a passive declare).
func passive(n *wnode, queue string) (bool, error) {
	c, err := amqp091.Dial(n.url())
	if err != nil {
		return false, err
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return false, err
	}
	_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var ae *amqp091.Error
	if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
		return false, nil
	}
	return err == nil, err
}

// TestClusterReplicatesDefinitions: three processes form a cluster;
// exchanges, queues and bindings declared over AMQP on one node, users,
// vhosts, permissions and policies made through the API of the others, are
// present on every node; /api/nodes lists the three with one metadata
// leader; a fourth process with another secret never joins, and its log
// says why.
func TestClusterReplicatesDefinitions(t *testing.T) {
	nodes := threeNodes(t, localIPs)
	startCluster(t, nodes...)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]

	_, ch := dial(t, n2)
	if err := ch.ExchangeDeclare("repl.x", "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("repl.q", true, false, false, false, amqp091.Table{"x-max-length": int32(10)}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("repl.q", "a.#", "repl.x", false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n3.api("PUT", "/api/vhosts/v2", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n3.api("PUT", "/api/users/alice", map[string]any{"password": "secret", "tags": "management"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.api("PUT", "/api/permissions/v2/alice", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.api("PUT", "/api/policies/%2F/lim", map[string]any{"pattern": "^repl\\.", "definition": map[string]any{"max-length": 5}, "apply-to": "queues"}, nil); err != nil {
		t.Fatal(err)
	}
	defs := waitSameDefinitions(t, nodes...)
	for _, want := range []string{`"repl.x"`, `"repl.q"`, `"a.#"`, `"v2"`, `"alice"`, `"lim"`} {
		if !strings.Contains(defs, want) {
			t.Fatalf("definitions lack %s:\n%s", want, defs)
		}
	}
	// Used through the other nodes: the declarations are there.
	for _, n := range []*wnode{n1, n3} {
		_, ch := dial(t, n)
		if err := ch.ExchangeDeclarePassive("repl.x", "topic", true, false, false, false, nil); err != nil {
			t.Fatalf("%s: exchange: %v", n.name, err)
		}
		if _, err := ch.QueueDeclarePassive("repl.q", true, false, false, false, nil); err != nil {
			t.Fatalf("%s: queue: %v", n.name, err)
		}
		// Equivalence is checked against the replicated arguments.
		if _, err := ch.QueueDeclare("repl.q", true, false, false, false, nil); err == nil {
			t.Fatalf("%s: redeclaring repl.q without its x-max-length was accepted", n.name)
		}
	}

	var list []map[string]any
	if _, err := n3.api("GET", "/api/nodes", nil, &list); err != nil {
		t.Fatal(err)
	}
	leaders := 0
	for _, it := range list {
		if it["running"] != true {
			t.Fatalf("/api/nodes: %v not running", it["name"])
		}
		if it["metadata_leader"] == true {
			leaders++
		}
	}
	if len(list) != 3 || leaders != 1 {
		t.Fatalf("/api/nodes lists %d nodes with %d metadata leaders: %v", len(list), leaders, list)
	}

	// A process with another secret is refused.
	intruder := newNode(t, "n4", "127.0.0.1", writeSecret(t, "another-secret-0123456789abcdef"), []string{n1.clusterAddr})
	intruder.start()
	waitFor(t, "the intruder's refusal in its log", func() bool {
		return strings.Contains(intruder.logs.String(), "refused cluster peer")
	})
	var st clusterStatus
	waitFor(t, "the cluster's status", func() bool {
		var err error
		st, err = n1.status()
		return err == nil
	})
	for _, m := range st.Nodes {
		if m.Name == intruder.name {
			t.Fatalf("the intruder is a member: %+v", st)
		}
	}
	if !strings.Contains(intruder.logs.String(), "auth") {
		t.Fatalf("the intruder's log does not say the secret was refused:\n%s", intruder.logs.String())
	}
	if _, err := intruder.api("PUT", "/api/queues/%2F/intruder-q", map[string]any{"durable": true}, nil); err == nil {
		t.Fatal("a node outside the cluster accepted a declaration")
	}
	if ok, _ := passive(n1, "intruder-q"); ok {
		t.Fatal("the intruder's queue reached the cluster")
	}
}

// dialEach opens a channel to each node, in confirm mode with confirm.
func dialEach(t *testing.T, nodes []*wnode, confirm bool) []*amqp091.Channel {
	t.Helper()
	chans := make([]*amqp091.Channel, len(nodes))
	for i, n := range nodes {
		_, chans[i] = dial(t, n)
		if confirm {
			if err := chans[i].Confirm(false); err != nil {
				t.Fatal(err)
			}
		}
	}
	return chans
}

// TestClusterDeclareThenUseElsewhere: a queue or exchange declared
// through one node is there, at once, for a client of another: a passive
// declare, basic.get and publishes through the other nodes, made as soon
// as the declare returned, never get NOT_FOUND, and a message published
// with a confirm to the queue through another node is in it (the declare
// is answered once the other nodes applied it, and a node that finds
// nothing syncs its definitions with the metadata leader before it answers
// so).
func TestClusterDeclareThenUseElsewhere(t *testing.T) {
	nodes := threeNodes(t, localIPs)
	startCluster(t, nodes...)
	chans := dialEach(t, nodes, true)
	publish := func(ch *amqp091.Channel, ex, key string) error {
		c, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), ex, key, false, false,
			amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(key)})
		if err != nil {
			return err
		}
		if ok, err := c.WaitContext(t.Context()); err != nil || !ok {
			return fmt.Errorf("confirm: %v %v", ok, err)
		}
		return nil
	}
	const rounds = 60
	for i := range rounds {
		d := i % 3
		x, q := fmt.Sprintf("ryw.x.%d", i), fmt.Sprintf("ryw.q.%d", i)
		if err := chans[d].ExchangeDeclare(x, "fanout", false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := chans[d].QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		// Alternate which of the other two nodes goes first.
		for _, j := range []int{(d + 1 + i/3%2) % 3, (d + 2 - i/3%2) % 3} {
			ch, at := chans[j], fmt.Sprintf("round %d: %s, declared through %s, used through %s", i, q, nodes[d].name, nodes[j].name)
			if err := ch.ExchangeDeclarePassive(x, "fanout", false, true, false, false, nil); err != nil {
				t.Fatalf("%s: passive exchange: %v", at, err)
			}
			// Unroutable (no bindings), but not refused: a refusal
			// closes the channel, and the next call fails.
			if err := publish(ch, x, "none"); err != nil {
				t.Fatalf("%s: publish to the exchange: %v", at, err)
			}
			if err := publish(ch, "", q); err != nil {
				t.Fatalf("%s: publish to the queue: %v", at, err)
			}
			st, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
			if err != nil {
				t.Fatalf("%s: passive queue: %v", at, err)
			}
			if st.Messages != 1 {
				t.Fatalf("%s: %d messages after a confirmed publish, want 1", at, st.Messages)
			}
			if _, ok, err := ch.Get(q, true); err != nil || !ok {
				t.Fatalf("%s: basic.get: %v %v", at, ok, err)
			}
		}
	}
}

// TestClusterRedeclareAfterDeleteElsewhere: a queue deleted through its
// home node and at once declared again through another node exists
// afterwards: the other node, which may not have applied the deletion when
// the declare comes, hears from the home node that the queue is gone and
// declares it anew, rather than answering NOT_FOUND to a declare.
func TestClusterRedeclareAfterDeleteElsewhere(t *testing.T) {
	nodes := threeNodes(t, localIPs)
	startCluster(t, nodes...)
	_, ch1 := dial(t, nodes[0])
	_, ch2 := dial(t, nodes[1])
	const rounds = 40
	for i := range rounds {
		q := fmt.Sprintf("redecl.%d", i)
		// Declared through n1: its home is n1.
		if _, err := ch1.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		// n2 knows it before the deletion.
		if _, err := ch2.QueueDeclarePassive(q, true, false, false, false, nil); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if _, err := ch1.QueueDelete(q, false, false, false); err != nil {
			t.Fatal(err)
		}
		if _, err := ch2.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatalf("round %d: declaring %s through n2 right after its deletion through n1: %v", i, q, err)
		}
		for _, n := range nodes {
			if ok, err := passive(n, q); err != nil || !ok {
				t.Fatalf("round %d: %s on %s after the second declare: %v %v", i, q, n.name, ok, err)
			}
		}
	}
}

// TestClusterLeaveAndRejoin: a node leaves (its declarations are refused,
// the others go on), joins again and catches up; a stopped node restarted
// catches up from the log with nothing applied twice.
func TestClusterLeaveAndRejoin(t *testing.T) {
	nodes := threeNodes(t, localIPs)
	startCluster(t, nodes...)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]

	if _, err := n2.api("PUT", "/api/queues/%2F/before-leave", map[string]any{"durable": true}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.api("POST", "/api/cluster/leave", nil, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "n2 out of the cluster", func() bool {
		running, _ := n1.members()
		return len(running) == 2
	})
	if _, err := n1.api("PUT", "/api/queues/%2F/after-leave", map[string]any{"durable": true}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.api("PUT", "/api/queues/%2F/on-the-leaver", map[string]any{"durable": true}, nil); err == nil {
		t.Fatal("a node that left accepted a declaration")
	}
	if ok, _ := passive(n2, "after-leave"); ok {
		t.Fatal("a node that left got a later declaration")
	}
	if _, err := n2.api("POST", "/api/cluster/join", map[string]any{"node": n3.clusterAddr}, nil); err != nil {
		t.Fatal(err)
	}
	waitForMembers(t, 3, nodes...)
	waitFor(t, "n2 catches up", func() bool { ok, _ := passive(n2, "after-leave"); return ok })
	// The leader plans the data groups once it has three members (if it
	// had not before n2 left): let that be done, so that the definitions
	// compared after the restarts below do not change meanwhile.
	waitDataGroups(t, nodes...)

	// A queue deleted and declared again, holding a persistent message on
	// n3: replaying those commands at n3's restart would delete the queue
	// it has (and its message) and make a new one.
	// Declared through n3, so that the queue lives there (its home node).
	_, ch := dial(t, n3)
	if _, err := ch.QueueDeclare("cycle", true, false, false, false, amqp091.Table{"x-max-length": int32(100)}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete("cycle", false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("cycle", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// And one declared and deleted: a replay would declare it again
	// (under a new id) and its deletion, by the old id, would miss it.
	if _, err := ch.QueueDeclare("ghost", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete("ghost", false, false, false); err != nil {
		t.Fatal(err)
	}
	// A vhost deleted and added again (deletions of vhosts go by name):
	// a replay would delete the vhost n3 has, with its queue and message.
	for _, step := range []struct{ method, path string }{{"PUT", "/api/vhosts/vx"}, {"DELETE", "/api/vhosts/vx"},
		{"PUT", "/api/vhosts/vx"}, {"PUT", "/api/permissions/vx/guest"}, {"PUT", "/api/queues/vx/vq"}} {
		body := map[string]any{"durable": true}
		if strings.Contains(step.path, "permissions") {
			body = map[string]any{"configure": ".*", "write": ".*", "read": ".*"}
		}
		if _, err := n3.api(step.method, step.path, body, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "vq on n3", func() bool { _, err := n3.api("GET", "/api/queues/vx/vq", nil, nil); return err == nil })
	if _, err := n3.api("POST", "/api/exchanges/vx/amq.default/publish", map[string]any{"routing_key": "vq", "payload": "kept",
		"payload_encoding": "string", "properties": map[string]any{"delivery_mode": 2}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "cycle on n3", func() bool { ok, _ := passive(n3, "cycle"); return ok })
	_, ch3 := dial(t, n3)
	if err := ch3.Confirm(false); err != nil {
		t.Fatal(err)
	}
	conf, err := ch3.PublishWithDeferredConfirmWithContext(t.Context(), "", "cycle", false, false,
		amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("kept")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := conf.WaitContext(t.Context()); err != nil || !ok {
		t.Fatalf("publish to cycle on n3: %v %v", ok, err)
	}

	// Restart: stop n3, change things, start it again.
	n3.stop()
	for i := range 20 {
		if _, err := n1.api("PUT", fmt.Sprintf("/api/queues/%%2F/while-down-%d", i), map[string]any{"durable": true}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n1.api("DELETE", "/api/queues/%2F/before-leave", nil, nil); err != nil {
		t.Fatal(err)
	}
	n3.start()
	defs := waitSameDefinitions(t, nodes...)
	if strings.Contains(defs, "before-leave") || strings.Contains(defs, "ghost") || !strings.Contains(defs, "while-down-19") {
		t.Fatalf("definitions after n3's restart:\n%s", defs)
	}
	_, ch3 = dial(t, n3)
	if q, err := ch3.QueueDeclarePassive("cycle", true, false, false, false, nil); err != nil || q.Messages != 1 {
		t.Fatalf("cycle on n3 after its restart: %+v %v, want its message", q, err)
	}
	var vq struct {
		Messages int `json:"messages"`
	}
	waitFor(t, "vq's message counted on n3", func() bool {
		_, err := n3.api("GET", "/api/queues/vx/vq", nil, &vq)
		return err == nil && vq.Messages > 0
	})
	// And once more with nothing new: the restarted node replays nothing twice.
	n3.kill()
	n3.start()
	waitRestored(t, n3, defs, "n3 after a second restart")
}

// TestClusterRestartServesCaughtUp: a node restarted after an outage
// during which queues were declared and deleted serves its first client
// only once it has caught up: a client that connects as soon as the node
// is up finds every queue declared meanwhile and none deleted.
func TestClusterRestartServesCaughtUp(t *testing.T) {
	nodes := threeNodes(t, localIPs)
	startCluster(t, nodes...)
	n1, n3 := nodes[0], nodes[2]
	_, ch1 := dial(t, n1)
	if _, err := ch1.QueueDeclare("gone-while-down", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "gone-while-down on n3", func() bool { ok, _ := passive(n3, "gone-while-down"); return ok })
	n3.kill()
	const declared = 300
	for i := range declared {
		if _, err := ch1.QueueDeclare(fmt.Sprintf("made-while-down-%d", i), true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ch1.QueueDelete("gone-while-down", false, false, false); err != nil {
		t.Fatal(err)
	}
	n3.start()
	_, ch3 := dial(t, n3)
	for _, i := range []int{declared - 1, 0, declared / 2} {
		if _, err := ch3.QueueDeclarePassive(fmt.Sprintf("made-while-down-%d", i), true, false, false, false, nil); err != nil {
			t.Fatalf("n3's first client: made-while-down-%d: %v", i, err)
		}
	}
	if ok, err := passive(n3, "gone-while-down"); ok || err != nil {
		t.Fatalf("n3's first clients see a queue deleted while it was down (exists %v, %v)", ok, err)
	}
	n3.mu.Lock()
	logs := n3.logs.String()
	n3.mu.Unlock()
	if !strings.Contains(logs, "definitions caught up with the cluster") {
		t.Fatalf("n3 did not log catching up:\n%s", logs)
	}
}

// TestClusterSnapshotCatchUp: with a low snapshot threshold the leader's log
// is compacted, so a node that joins late is sent a snapshot; it ends with
// the same definitions, and keeps them across a restart.
func TestClusterSnapshotCatchUp(t *testing.T) {
	nodes := threeNodes(t, localIPs, "--cluster-snapshot-threshold", "16", "--cluster-trailing-logs", "4")
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	startCluster(t, n1, n2)
	for i := range 60 {
		if _, err := n2.api("PUT", fmt.Sprintf("/api/exchanges/%%2F/snap-x-%d", i), map[string]any{"type": "fanout", "durable": true}, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a snapshot on n1", func() bool {
		return strings.Count(n1.logs.String(), "snapshot complete") > 0 || hasSnapshots(n1)
	})
	n3.start()
	waitForMembers(t, 3, nodes...)
	// With three members the leader plans the data groups (a global
	// parameter): compare the definitions once that is done.
	waitFor(t, "the data groups planned", func() bool {
		d, err := n1.definitions()
		return err == nil && strings.Contains(d, "warren_data_groups")
	})
	defs := waitSameDefinitions(t, nodes...)
	if !strings.Contains(defs, "snap-x-59") {
		t.Fatalf("definitions lack snap-x-59:\n%s", defs)
	}
	n3.kill()
	n3.start()
	waitRestored(t, n3, defs, "n3 after a restart")
}

// waitRestored waits until a restarted node exports defs. A replicated
// definition change is applied once its Raft entry is durable, and stored
// in the node's records in a later group commit: a SIGKILL in between loses
// the record, and the node applies the change again from its log once the
// leader tells it the entry is committed, a round trip after it starts.
func waitRestored(t testing.TB, n *wnode, defs, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := n.definitions()
		if err == nil && d == defs {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (%v):\n%s\nwant\n%s", what, err, d, defs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hasSnapshots reports whether a node's metadata group has more than its
// first snapshot on disk.
func hasSnapshots(n *wnode) bool {
	entries, err := os.ReadDir(filepath.Join(n.dir, "raft", "metadata", "snapshots"))
	if err != nil {
		return false
	}
	names := []string{}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	// The first snapshot is at a low index; a later one follows the 60 changes.
	for _, name := range names {
		var term, index uint64
		if _, err := fmt.Sscanf(name, "%d-%d-", &term, &index); err == nil && index > 20 {
			return true
		}
	}
	return false
}

// queryEscape escapes a name for a management API path.
func queryEscape(s string) string { return url.PathEscape(s) }
