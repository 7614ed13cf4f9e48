package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
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

// TestSIGTERMClosesConnections runs the real binary, connects, sends it
// SIGTERM and expects connection.close 320 CONNECTION_FORCED, then exit
// status 0.
func TestSIGTERMClosesConnections(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "warren")
	if out, err := exec.Command(goTool(), "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// Port 0, and the address read back from the log: a port picked free
	// beforehand may be taken by another test's listener by the time the
	// broker binds it.
	cmd := exec.Command(bin, "--amqp-addr", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), "--log-format", "json")
	var logs lockedBuffer
	cmd.Stdout = &logs
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	exited := make(chan error, 1)
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
		_, _ = io.Copy(&logs, stderr)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("warren output:\n%s", logs.String())
		}
	})

	var addr string
	select {
	case addr = <-addrc:
	case err := <-exited:
		exited <- err
		t.Fatalf("warren exited before serving: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("warren did not log its AMQP address")
	}
	c, err := amqp091.Dial(fmt.Sprintf("amqp://guest:guest@%s/", addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp091.ConnectionForced {
			t.Fatalf("connection closed with %v, want 320 CONNECTION_FORCED", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no connection.close after SIGTERM")
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("warren exited with status %d", ee.ExitCode())
		}
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("warren did not exit after SIGTERM")
	}
}
