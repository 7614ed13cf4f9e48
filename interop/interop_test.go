// Package interop runs client libraries in other languages against an
// in-process Warren broker: Python pika (Debian's python3-pika), Node
// amqplib (from npm, see package.json) and amqp-tools' command line
// programs.
//
// When a client is not installed the test is skipped, saying so and how to
// run it, unless WARREN_INTEROP=1 (set by the README's test command, bash
// scripts/test.sh, which installs the clients), which makes a missing
// client a failure. go test shows skip messages with -v only; make test
// says so at its end.
package interop

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/broker/brokertest"
)

// need fails or skips the test when the client at path is missing.
func need(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		fail, msg := missing(path, err)
		if fail {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// missing says what a test does about a client it needs that is missing:
// fail with WARREN_INTEROP=1, skip otherwise, and why.
func missing(path string, err error) (fail bool, msg string) {
	if os.Getenv("WARREN_INTEROP") == "1" {
		return true, fmt.Sprintf("%s is required (WARREN_INTEROP=1): %v", path, err)
	}
	return false, fmt.Sprintf("SKIPPED: %s is not installed; set WARREN_INTEROP=1 to make that a failure, or run bash scripts/test.sh, which installs the clients and sets it", path)
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

// TestMissingClient: a missing client fails the test under WARREN_INTEROP=1
// and otherwise skips it saying how to run it, so that a plain go test
// ./... does not pass over the interop tests unawares.
func TestMissingClient(t *testing.T) {
	t.Setenv("WARREN_INTEROP", "")
	fail, msg := missing("/usr/bin/some-client", os.ErrNotExist)
	if fail {
		t.Errorf("without WARREN_INTEROP a missing client fails the test: %s", msg)
	}
	for _, want := range []string{"/usr/bin/some-client", "WARREN_INTEROP=1", "bash scripts/test.sh"} {
		if !strings.Contains(msg, want) {
			t.Errorf("skip message %q does not say %q", msg, want)
		}
	}
	t.Setenv("WARREN_INTEROP", "1")
	if fail, msg := missing("/usr/bin/some-client", os.ErrNotExist); !fail || !strings.Contains(msg, "/usr/bin/some-client") {
		t.Errorf("with WARREN_INTEROP=1 a missing client is not a failure: %v %s", fail, msg)
	}
}
