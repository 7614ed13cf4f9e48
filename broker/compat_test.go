package broker_test

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestOpensDataDirOfEarlierBuild opens a data dir written by the warren
// binary of commit 37f19b6 (testdata/datadir-37f19b6.tar.gz: made by
// running that binary, declaring and publishing over AMQP and the HTTP
// API, and stopping it) and checks that its definitions and messages are
// all there: a durable direct exchange compat.x bound to the classic queue
// compat.q and the quorum queue compat.quorum with key k, ten persistent
// messages compat-0..9 in each (the first two of compat.q delivered and
// left unacknowledged when the broker stopped), compat.limited with four,
// (their one-day TTL long past, they expire), the policy compat-pol, the user compat (password compat-pw, tag
// monitoring) with permissions on the vhost compat-vh.
func TestOpensDataDirOfEarlierBuild(t *testing.T) {
	dir := t.TempDir()
	untarGz(t, filepath.Join("testdata", "datadir-37f19b6.tar.gz"), dir)
	s, _, stop := startWithStore(t, filepath.Join(dir, "data"))
	defer stop()

	for name, want := range map[string]int{"compat.q": 10, "compat.quorum": 10} {
		qi, err := s.Queue("/", name)
		if err != nil {
			t.Fatalf("queue %s: %v", name, err)
		}
		if !qi.Durable || qi.Ready != want {
			t.Fatalf("queue %s: durable %v ready %d, want %d", name, qi.Durable, qi.Ready, want)
		}
	}
	// compat.limited's four messages were published with its
	// x-message-ttl of one day shortly after 2026-12-03 13:14 UTC: they
	// are there until a day later, and expire then (not brought back by
	// the recovery).
	qi, err := s.Queue("/", "compat.limited")
	if err != nil {
		t.Fatalf("queue compat.limited: %v", err)
	}
	if !qi.Durable || fmt.Sprint(qi.Arguments["x-message-ttl"]) != "86400000" {
		t.Fatalf("queue compat.limited: durable %v arguments %v", qi.Durable, qi.Arguments)
	}
	written := time.Date(2026, 12, 3, 13, 14, 0, 0, time.UTC)
	switch age := time.Since(written); {
	case age < 23*time.Hour:
		if qi.Ready != 4 {
			t.Fatalf("queue compat.limited: ready %d, want 4", qi.Ready)
		}
	case age > 25*time.Hour:
		waitFor(t, "compat.limited's messages expired", func() bool {
			qi, err := s.Queue("/", "compat.limited")
			return err == nil && qi.Ready == 0
		})
	}
	pols, err := s.Policies("/")
	if err != nil || len(pols) != 1 || pols[0].Name != "compat-pol" || pols[0].Pattern != `^compat\.limited$` {
		t.Fatalf("policies %+v %v", pols, err)
	}
	found := false
	for _, u := range s.Users() {
		if u.Name == "compat" && len(u.Tags) == 1 && u.Tags[0] == "monitoring" {
			found = true
		}
	}
	if !found {
		t.Fatalf("user compat missing: %+v", s.Users())
	}

	c := dial(t, s)
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"compat.q", "compat.quorum"} {
		for i := 0; i < 10; i++ {
			d, ok, err := ch.Get(q, true)
			if err != nil || !ok {
				t.Fatalf("%s: get %d: %v %v", q, i, ok, err)
			}
			if got := string(d.Body); got != fmt.Sprintf("compat-%d", i) || d.MessageId != fmt.Sprint("id-", i) || d.Headers["n"] != int32(i) {
				t.Fatalf("%s: message %d is %q %q %v", q, i, got, d.MessageId, d.Headers)
			}
			if redelivered := q == "compat.q" && i < 2; d.Redelivered != redelivered {
				t.Fatalf("%s: message %d redelivered %v, want %v", q, i, d.Redelivered, redelivered)
			}
		}
	}
	// The binding routes after the restart.
	if err := ch.Publish("compat.x", "k", false, false, amqp091.Publishing{Body: []byte("new")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new message in compat.q", func() bool {
		qi, _ := s.Queue("/", "compat.q")
		return qi.Ready == 1
	})
	uc, err := amqp091.Dial(fmt.Sprintf("amqp://compat:compat-pw@%s/compat-vh", s.Addr))
	if err != nil {
		t.Fatalf("user compat on compat-vh: %v", err)
	}
	_ = uc.Close()
}

// untarGz extracts the tar.gz file src into dir.
func untarGz(t *testing.T, src, dir string) {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Clean(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			if err := out.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestPurgeBeyondOneChunkSurvivesRestart purges a durable queue holding
// more persistent messages than one purge command drops (purgeChunk): the
// count covers them all and none comes back after a restart.
func TestPurgeBeyondOneChunkSurvivesRestart(t *testing.T) {
	const n = 2500
	dir := t.TempDir()
	s, _, stop := startWithStore(t, dir)
	ch := open(t, dial(t, s))
	if _, err := ch.QueueDeclare("purged", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, n))
	for i := 0; i < n; i++ {
		if err := ch.Publish("", "purged", false, false, amqp091.Publishing{DeliveryMode: 2, Body: []byte("m")}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if c := <-confirms; !c.Ack {
			t.Fatal("nack")
		}
	}
	got, err := ch.QueuePurge("purged", false)
	if err != nil || got != n {
		t.Fatalf("purged %d, %v; want %d", got, err, n)
	}
	stop()

	s2, _, stop2 := startWithStore(t, dir)
	defer stop2()
	qi, err := s2.Queue("/", "purged")
	if err != nil || qi.Ready != 0 {
		t.Fatalf("after restart: %+v %v", qi, err)
	}
}
