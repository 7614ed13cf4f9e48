package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestDamagedDataDirExitsWithOneLine runs the real binary on data dirs
// with a damaged table, value log and MANIFEST: each start must fail with
// exit status 1 and one line on stderr naming the file and what to do,
// never a panic or a stack trace.
func TestDamagedDataDirExitsWithOneLine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	bin := buildWarren(t)
	fixture := filepath.Join(t.TempDir(), "data")
	w := startWarren(t, bin, fixture)
	c, err := amqp091.Dial(fmt.Sprintf("amqp://guest:guest@%s/", w.addr))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("kept", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	body := []byte(strings.Repeat("b", 2000))
	for i := 0; i < 500; i++ {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "kept", false, false,
			amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if i == 499 && !dc.Wait() {
			t.Fatal("nacked")
		}
	}
	_ = c.Close()
	// A clean stop writes the memtable out as a table.
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.exited:
		w.exited <- err
	case <-time.After(30 * time.Second):
		t.Fatal("warren did not stop")
	}

	cases := []struct {
		name, glob string
		damage     func(path string, size int64) error
	}{
		{"table cut short", "*.sst", func(p string, n int64) error { return os.Truncate(p, n/2) }},
		{"value log cut short", "*.vlog", cutInsideBody},
		{"MANIFEST cut short", "MANIFEST", func(p string, n int64) error { return os.Truncate(p, 10) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if out, err := exec.Command("cp", "-r", fixture, dir).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v %s", err, out)
			}
			files, _ := filepath.Glob(filepath.Join(dir, tc.glob))
			if len(files) != 1 {
				t.Fatalf("%s in %s: %v", tc.glob, dir, files)
			}
			st, err := os.Stat(files[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.damage(files[0], st.Size()); err != nil {
				t.Fatal(err)
			}
			// A start that does not fail runs until killed: bound it.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "--amqp-addr", "127.0.0.1:0", "--http-addr", "-", "--data-dir", dir)
			var stderr, stdout lockedBuffer
			cmd.Stderr, cmd.Stdout = &stderr, &stdout
			err = cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1\n%s", err, stderr.String())
			}
			out := strings.TrimSpace(stderr.String())
			if strings.Count(out, "\n") != 0 || strings.Contains(out, "panic") || strings.Contains(out, "goroutine") ||
				!strings.HasPrefix(out, "warren: data dir damaged: "+files[0]+": ") || !strings.Contains(out, "restore the data dir from a backup") {
				t.Errorf("stderr:\n%s", out)
			}
		})
	}
}

// cutInsideBody cuts the value log at p in the middle of a message body
// past its middle, so that it ends inside an entry and in data, as a file
// cut short by a copy does.
func cutInsideBody(p string, n int64) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	i := bytes.Index(data[n/2:], bytes.Repeat([]byte("b"), 64))
	if i < 0 {
		return fmt.Errorf("no message body past the middle of %s", p)
	}
	return os.Truncate(p, n/2+int64(i)+32)
}
