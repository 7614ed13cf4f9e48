// Package interop runs client libraries in other languages against an
// in-process Warren broker: Python pika (Debian's python3-pika), Node
// amqplib (from npm, see package.json) and amqp-tools' command line
// programs.
//
// When a client is not installed the test is skipped, unless
// WARREN_INTEROP=1 (set by the README's test command), which makes a
// missing client a failure.
package interop

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/broker/brokertest"
)

func need(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("WARREN_INTEROP") == "1" {
			t.Fatalf("%s is required (WARREN_INTEROP=1): %v", path, err)
		}
		t.Skipf("%s not installed", path)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// runPika runs a pika scenario script against a fresh broker; it must
// print "<name> ok".
func runPika(t *testing.T, script, name string) {
	need(t, "/usr/lib/python3/dist-packages/pika")
	s := brokertest.Start(t, nil)
	if out := run(t, "/usr/bin/python3", script, s.URL); !strings.Contains(out, name+" ok") {
		t.Fatalf("unexpected output: %s", out)
	}
}

// runAmqplib runs an amqplib scenario script against a fresh broker; it
// must print "<name> ok".
func runAmqplib(t *testing.T, script, name string) {
	need(t, filepath.Join("node_modules", "amqplib"))
	node, err := exec.LookPath("node")
	if err != nil {
		need(t, "/usr/bin/node")
		node = "/usr/bin/node"
	}
	s := brokertest.Start(t, nil)
	if out := run(t, node, script, s.URL); !strings.Contains(out, name+" ok") {
		t.Fatalf("unexpected output: %s", out)
	}
}

func TestPika(t *testing.T) { runPika(t, "pika_scenario.py", "pika scenario") }

func TestAmqplib(t *testing.T) { runAmqplib(t, "amqplib_scenario.js", "amqplib scenario") }

func TestPikaStream(t *testing.T) { runPika(t, "pika_stream_scenario.py", "pika stream scenario") }

func TestAmqplibStream(t *testing.T) {
	runAmqplib(t, "amqplib_stream_scenario.js", "amqplib stream scenario")
}

func TestAmqpTools(t *testing.T) {
	need(t, "/usr/bin/amqp-publish")
	s := brokertest.Start(t, nil)
	url := s.URL
	run(t, "/usr/bin/amqp-declare-queue", "--url", url, "-q", "tools")
	run(t, "/usr/bin/amqp-publish", "--url", url, "-r", "tools", "-b", "hello from amqp-tools")
	out := run(t, "/usr/bin/amqp-get", "--url", url, "-q", "tools")
	if strings.TrimSpace(out) != "hello from amqp-tools" {
		t.Fatalf("amqp-get returned %q", out)
	}
	run(t, "/usr/bin/amqp-delete-queue", "--url", url, "-q", "tools")
}
