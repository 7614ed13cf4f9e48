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

func TestPika(t *testing.T) {
	need(t, "/usr/lib/python3/dist-packages/pika")
	s := brokertest.Start(t, nil)
	out := run(t, "/usr/bin/python3", "pika_scenario.py", s.URL)
	if !strings.Contains(out, "pika scenario ok") {
		t.Fatalf("unexpected output: %s", out)
	}
}

func TestAmqplib(t *testing.T) {
	need(t, filepath.Join("node_modules", "amqplib"))
	node, err := exec.LookPath("node")
	if err != nil {
		need(t, "/usr/bin/node")
		node = "/usr/bin/node"
	}
	s := brokertest.Start(t, nil)
	out := run(t, node, "amqplib_scenario.js", s.URL)
	if !strings.Contains(out, "amqplib scenario ok") {
		t.Fatalf("unexpected output: %s", out)
	}
}

func TestPikaStream(t *testing.T) {
	need(t, "/usr/lib/python3/dist-packages/pika")
	s := brokertest.Start(t, nil)
	out := run(t, "/usr/bin/python3", "pika_stream_scenario.py", s.URL)
	if !strings.Contains(out, "pika stream scenario ok") {
		t.Fatalf("unexpected output: %s", out)
	}
}

func TestAmqplibStream(t *testing.T) {
	need(t, filepath.Join("node_modules", "amqplib"))
	node, err := exec.LookPath("node")
	if err != nil {
		need(t, "/usr/bin/node")
		node = "/usr/bin/node"
	}
	s := brokertest.Start(t, nil)
	out := run(t, node, "amqplib_stream_scenario.js", s.URL)
	if !strings.Contains(out, "amqplib stream scenario ok") {
		t.Fatalf("unexpected output: %s", out)
	}
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
