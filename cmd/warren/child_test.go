package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// lockedBuffer collects a child process's output.
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

// goTool is the go command that runs this test.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// buildWarren builds the real binary into a temporary directory.
func buildWarren(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "warren")
	if out, err := exec.Command(goTool(), "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// child is a warren process started by a test.
type child struct {
	cmd  *exec.Cmd
	addr string
	logs *lockedBuffer
	// exited receives the process's exit once; put it back after reading
	// so that the cleanup does not wait forever.
	exited chan error
}

// startWarren runs bin on dataDir with the AMQP listener on a free port,
// and returns once the listener is up. The address is read back from the
// log: a port picked free beforehand may be taken by another test by the
// time the broker binds it. The process is killed at cleanup.
func startWarren(t *testing.T, bin, dataDir string) *child {
	t.Helper()
	cmd := exec.Command(bin, "--amqp-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--data-dir", dataDir, "--log-format", "json")
	logs := &lockedBuffer{}
	cmd.Stdout = logs
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, logs: logs, exited: make(chan error, 1)}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			_, _ = logs.Write(append(sc.Bytes(), '\n'))
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "amqp listener started" {
				select {
				case addrc <- rec.Addr:
				default:
				}
			}
		}
		_, _ = io.Copy(logs, stderr)
		c.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		err := <-c.exited
		c.exited <- err
		if t.Failed() {
			t.Logf("warren output:\n%s", logs.String())
		}
	})
	select {
	case c.addr = <-addrc:
	case err := <-c.exited:
		c.exited <- err
		t.Fatalf("warren exited before serving: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("warren did not log its AMQP address\n%s", logs.String())
	}
	return c
}

// kill SIGKILLs the process and waits for it.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	err := <-c.exited
	c.exited <- err
}
