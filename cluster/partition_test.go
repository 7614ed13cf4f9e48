package cluster_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// iptables runs iptables with args.
func iptables(args ...string) error {
	out, err := exec.Command("iptables", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// cutOff drops all traffic between ip and each of others (rules on those
// loopback addresses only, in a chain of the test's own) and returns the
// function that heals the partition.
func cutOff(t *testing.T, ip string, others ...string) func() {
	t.Helper()
	chain := fmt.Sprintf("WARREN-TEST-%d", os.Getpid())
	if err := iptables("-N", chain); err != nil {
		t.Fatal(err)
	}
	for _, o := range others {
		for _, r := range [][2]string{{ip, o}, {o, ip}} {
			if err := iptables("-A", chain, "-s", r[0], "-d", r[1], "-j", "DROP"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := iptables("-I", "INPUT", "-j", chain); err != nil {
		t.Fatal(err)
	}
	healed := false
	heal := func() {
		if healed {
			return
		}
		healed = true
		_ = iptables("-D", "INPUT", "-j", chain)
		_ = iptables("-F", chain)
		_ = iptables("-X", chain)
	}
	t.Cleanup(heal)
	return heal
}

// needIptables skips a test that cannot cut nodes off.
func needIptables(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the partition test needs root for iptables")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("the partition test needs iptables (apt-get install iptables)")
	}
	if err := iptables("-L", "INPUT", "-n"); err != nil {
		t.Skipf("iptables does not work here: %v", err)
	}
}

// TestClusterPartition cuts one node of three off with iptables rules on
// 127.0.0.2-4: the majority goes on taking changes, the minority node
// refuses them with a clear error (541, "no quorum") within seconds while
// still serving its queues; after healing every node has the same
// definitions, the majority's.
func TestClusterPartition(t *testing.T) {
	needIptables(t)
	nodes := threeNodes(t, [3]string{"127.0.0.2", "127.0.0.3", "127.0.0.4"})
	startCluster(t, nodes...)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	// Declared through n3, so that the queue lives there (its home node).
	if _, err := n3.api("PUT", "/api/queues/%2F/before", map[string]any{"durable": true}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "before on n3", func() bool { ok, _ := passive(n3, "before"); return ok })

	heal := cutOff(t, n3.ip, n1.ip, n2.ip)

	// The majority elects a leader (if n3 led) and takes changes.
	waitFor(t, "a declaration on the majority side", func() bool {
		_, err := n1.api("PUT", "/api/queues/%2F/majority", map[string]any{"durable": true}, nil)
		return err == nil
	})
	// The minority refuses, with the reason in the close.
	c, ch := dial(t, n3)
	start := time.Now()
	_, err := ch.QueueDeclare("minority", true, false, false, false, nil)
	took := time.Since(start)
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.InternalError || !strings.Contains(ae.Reason, "metadata store") {
		t.Fatalf("declare on the minority: %v, want 541 naming the metadata store", err)
	}
	t.Logf("minority refused the declaration after %v: %s", took, ae.Reason)
	c.Close()
	// What needs no change goes on: the queue n3 has takes and gives a message.
	_, ch = dial(t, n3)
	if _, err := ch.QueueDeclarePassive("before", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "before", false, false, amqp091.Publishing{Body: []byte("still here")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the message on the minority", func() bool {
		m, ok, err := ch.Get("before", true)
		return err == nil && ok && string(m.Body) == "still here"
	})

	heal()
	defs := waitSameDefinitions(t, nodes...)
	if !strings.Contains(defs, `"majority"`) {
		t.Fatalf("healed definitions lack the majority's queue:\n%s", defs)
	}
	// A refusal is only an answer whose outcome is known: an attempt cut
	// off while it was being committed may still commit after the heal,
	// whatever a later attempt was told ("outcome is unknown; last: ...
	// was refused").
	if strings.Contains(ae.Reason, "was refused") && !strings.Contains(ae.Reason, "outcome is unknown") &&
		strings.Contains(defs, `"minority"`) {
		t.Fatalf("a refused declaration is in the healed definitions:\n%s", defs)
	}
}
