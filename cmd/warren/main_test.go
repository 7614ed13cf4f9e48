package main

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestSIGTERMClosesConnections runs the real binary, connects, sends it
// SIGTERM and expects connection.close 320 CONNECTION_FORCED, then exit
// status 0.
func TestSIGTERMClosesConnections(t *testing.T) {
	w := startWarren(t, buildWarren(t), filepath.Join(t.TempDir(), "data"))
	c, err := amqp091.Dial(fmt.Sprintf("amqp://guest:guest@%s/", w.addr))
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

	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
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
	case err := <-w.exited:
		w.exited <- err // for the cleanup
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
