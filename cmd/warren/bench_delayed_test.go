package main

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestBenchDelayed runs `warren bench delayed` small against an in-process
// broker: every steady and burst message arrives, none before its due
// time, the backlog is confirmed, and the run deletes what it declared.
func TestBenchDelayed(t *testing.T) {
	s := startBenchBroker(t)
	res, err := runDelayed(t.Context(), delayedConfig{
		URI: s.URL, Waiting: 500, MaxDelay: 2 * time.Minute, Size: 32, Settle: 10 * time.Millisecond,
		Rate: 200, Steady: time.Second, Lead: 300 * time.Millisecond, Burst: 300,
		PID: os.Getpid(), Out: io.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.PublishRate <= 0 || res.RSSIdle == 0 || res.RSSPeak < res.RSSAt {
		t.Errorf("backlog: rate %.0f, RSS idle %d, peak %d, settled %d", res.PublishRate, res.RSSIdle, res.RSSPeak, res.RSSAt)
	}
	for name, l := range map[string]lateness{"steady": res.Steady, "burst": res.Burst} {
		// Lateness is from the publisher's clock: the broker counts the
		// delay from the message's arrival, a little later.
		if l.Early != 0 || l.P50 < -1 || l.P50 > l.P99 || l.P99 > l.Max {
			t.Errorf("%s: %+v", name, l)
		}
	}
	if res.Steady.Count != 200 || res.Burst.Count != 300 {
		t.Errorf("received %d steady and %d burst messages, want 200 and 300", res.Steady.Count, res.Burst.Count)
	}
	exs, err := s.Exchanges("/")
	if err != nil {
		t.Fatal(err)
	}
	qs, err := s.Queues("/")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, ex := range exs {
		left = append(left, "exchange "+ex.Name)
	}
	for _, q := range qs {
		left = append(left, "queue "+q.Name)
	}
	for _, name := range left {
		if strings.Contains(name, " warren-bench-delayed-") {
			t.Errorf("%s left behind", name)
		}
	}
}
