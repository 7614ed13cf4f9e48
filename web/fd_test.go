package web

import (
	"os"
	"testing"
)

// TestOpenFiles counts /proc/self/fd as a directory listing does, and
// follows files opened and closed.
func TestOpenFiles(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc/self/fd")
	}
	count := func() int {
		// The listing's own descriptor is counted by both ways.
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		if n := openFiles(); n != len(ents) {
			t.Fatalf("openFiles %d, ReadDir %d", n, len(ents))
		}
		return len(ents)
	}
	before := count()
	var fs []*os.File
	for range 600 { // more entries than one 8 KiB read returns
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	if n := count(); n != before+600 {
		t.Fatalf("%d open after opening 600 more than %d", n, before)
	}
	for _, f := range fs {
		f.Close()
	}
	if n := count(); n != before {
		t.Fatalf("%d open after closing, want %d", n, before)
	}
}
