package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/urfave/cli/v2"
)

// runWithConfig parses args with the server flags, applies the config
// file, and returns the context's view of the given flags.
func runWithConfig(t *testing.T, args []string, names ...string) map[string]string {
	t.Helper()
	got := make(map[string]string)
	app := &cli.App{Flags: serverFlags(), Action: func(cc *cli.Context) error {
		if err := applyConfigFile(cc); err != nil {
			return err
		}
		for _, n := range names {
			got[n] = cc.String(n)
		}
		return nil
	}}
	if err := app.Run(append([]string{"warren"}, args...)); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestConfigFilePrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "warren.conf")
	conf := `# Warren
amqp-addr = ":6000"
default-vhost = "/prod"
tls-verify = optional
loopback-users =
`
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WARREN_DEFAULT_VHOST", "/env")
	got := runWithConfig(t, []string{"--config", path, "--tls-verify", "required"},
		"amqp-addr", "default-vhost", "tls-verify", "loopback-users", "log-level")
	want := map[string]string{
		"amqp-addr":      ":6000",    // file over default
		"default-vhost":  "/env",     // env over file
		"tls-verify":     "required", // flag over file
		"loopback-users": "",
		"log-level":      "info", // default
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if u := loopbackUsers(got["loopback-users"]); len(u) != 0 || u == nil {
		t.Errorf("loopbackUsers(%q) = %#v, want empty, non-nil", got["loopback-users"], u)
	}
}

func TestConfigFileErrors(t *testing.T) {
	dir := t.TempDir()
	for name, conf := range map[string]string{
		"unknown key": "no-such-setting = 1\n",
		"no equals":   "amqp-addr\n",
		"bad quote":   "amqp-addr = \"oops\n",
		"twice":       "amqp-addr = a\namqp-addr = b\n",
		"bad value":   "max-connections = many\n",
	} {
		path := filepath.Join(dir, "c.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		app := &cli.App{Flags: serverFlags(), Action: applyConfigFile}
		if err := app.Run([]string{"warren", "--config", path}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLoadTLSErrors(t *testing.T) {
	if _, err := loadTLS("", "", "", "none"); err == nil {
		t.Error("no certificate accepted")
	}
	if _, err := loadTLS("/nonexistent", "/nonexistent", "", "none"); err == nil {
		t.Error("missing files accepted")
	}
}

func TestMaxTableDepthSetting(t *testing.T) {
	if got := runWithConfig(t, nil, "max-table-depth")["max-table-depth"]; got != "32" {
		t.Errorf("default max-table-depth = %q, want 32", got)
	}
	path := filepath.Join(t.TempDir(), "warren.conf")
	if err := os.WriteFile(path, []byte("max-table-depth = 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := runWithConfig(t, []string{"--config", path}, "max-table-depth")["max-table-depth"]; got != "5" {
		t.Errorf("max-table-depth from the file = %q, want 5", got)
	}
	t.Setenv("WARREN_MAX_TABLE_DEPTH", "7")
	if got := runWithConfig(t, []string{"--config", path}, "max-table-depth")["max-table-depth"]; got != "7" {
		t.Errorf("max-table-depth from the environment = %q, want 7", got)
	}
}
