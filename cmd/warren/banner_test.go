package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// logRecord waits for the child's JSON log line with message msg.
func logRecord(t *testing.T, c *child, msg string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(c.logs.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
				return rec
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no log line %q in:\n%s", msg, c.logs.String())
	return nil
}

// TestStartupBanner runs the real binary and checks the banner: the
// listeners, the console URL, the data dir, and the guest/guest warning,
// which goes once the password is changed.
func TestStartupBanner(t *testing.T) {
	bin := buildWarren(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	w := startWarren(t, bin, dataDir)
	rec := logRecord(t, w, "Warren started")
	var listeners []string
	for _, l := range rec["listeners"].([]any) {
		listeners = append(listeners, l.(string))
	}
	all := strings.Join(listeners, ",")
	if !strings.Contains(all, "amqp "+w.addr) || !strings.Contains(all, "http 127.0.0.1:") || !strings.Contains(all, "prometheus 127.0.0.1:") {
		t.Errorf("listeners %v", listeners)
	}
	console, _ := rec["console"].(string)
	if !strings.HasPrefix(console, "http://127.0.0.1:") || !strings.Contains(all, "http "+strings.TrimSuffix(strings.TrimPrefix(console, "http://"), "/")) {
		t.Errorf("console %q, listeners %v", console, listeners)
	}
	if rec["data-dir"] != dataDir {
		t.Errorf("data-dir %v, want %s", rec["data-dir"], dataDir)
	}
	warn := logRecord(t, w, "the default user guest with password guest exists: change its password (warren ctl change_password guest NEW) or delete it (warren ctl delete_user guest) once you have added an administrator")
	if warn["level"] != "warn" {
		t.Errorf("guest warning at %v", warn["level"])
	}

	if err := newApp().Run([]string{"warren", "ctl", "change_password", "--url", console, "guest", "changed"}); err != nil {
		t.Fatal(err)
	}
	w.kill()
	w2 := startWarren(t, bin, dataDir)
	logRecord(t, w2, "Warren started")
	if strings.Contains(w2.logs.String(), "the default user guest with password guest exists") {
		t.Errorf("guest warning after the password changed:\n%s", w2.logs.String())
	}
}
