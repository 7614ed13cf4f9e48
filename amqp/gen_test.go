package amqp

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGenerateUpToDate regenerates methods_gen.go into a temporary file and
// checks that the committed file matches.
func TestGenerateUpToDate(t *testing.T) {
	const spec = "internal/gen/amqp-rabbitmq-0.9.1.json"
	if _, err := os.Stat(spec); err != nil {
		t.Skipf("spec not available: %v", err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not available")
	}
	out := filepath.Join(t.TempDir(), "methods_gen.go")
	cmd := exec.Command(goBin, "run", "./internal/gen", "-spec", spec, "-out", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generator failed: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("methods_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("methods_gen.go is out of date: run go generate ./amqp")
	}
}
