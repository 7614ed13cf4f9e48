// Package warren_test holds checks of the module as a whole.
package warren_test

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/warrenmq/warren"

// mayImport is the import direction of Warren's packages: each top-level
// package (with its subpackages, such as amqp/internal/gen and the test
// helper broker/brokertest) and the Warren packages it may import. A
// lower package never imports a higher one:
//
//	amqp, store  ←  queue, exchange  ←  broker  ←  web  ←  cmd
//
// cluster (replication) sits beside broker on store and amqp,
// and none of broker, queue, exchange, store or amqp may import it.
// interop holds only tests of the whole broker with real clients;
// internal holds helpers of tests (internal/testport).
var mayImport = map[string][]string{
	"amqp":     nil,
	"store":    nil,
	"internal": nil,
	"queue":    {"amqp"},
	"exchange": {"amqp"},
	"cluster":  {"amqp", "store", "internal"},
	"broker":   {"amqp", "exchange", "queue", "store"},
	"web":      {"amqp", "exchange", "queue", "store", "broker"},
	"cmd":      {"amqp", "exchange", "queue", "store", "broker", "cluster", "web"},
	"interop":  {"amqp", "exchange", "queue", "store", "broker", "cluster", "web", "internal"},
}

// unit is the top-level package a Warren import path belongs to.
func unit(importPath string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(importPath, module), "/")
	u, _, _ := strings.Cut(rel, "/")
	return u
}

// TestImportDirection fails when a package of the module imports, in its
// code or in its tests, a Warren package its place does not allow.
func TestImportDirection(t *testing.T) {
	checked := 0
	for dir, imports := range warrenImports(t) {
		u := unit(module + "/" + filepath.ToSlash(dir))
		allowed, known := mayImport[u]
		if !known {
			t.Errorf("%s: package %q has no place in the import direction: add it to mayImport", dir, u)
			continue
		}
		for _, imp := range imports {
			if iu := unit(imp); iu != u && !slices.Contains(allowed, iu) {
				t.Errorf("%s imports %s: %s may import only %v", dir, imp, u, allowed)
			}
		}
		checked++
	}
	if checked < len(mayImport)-1 { // cluster does not exist yet
		t.Fatalf("checked only %d packages", checked)
	}
}

// warrenImports returns, per package directory of the module (relative to
// the module root, the root itself left out), the Warren packages its Go
// files import: non-test files, in-package tests and external tests, for
// every GOOS and build tag (go/build with UseAllFiles).
func warrenImports(t *testing.T) map[string][]string {
	t.Helper()
	ctx := build.Default
	ctx.UseAllFiles = true
	out := make(map[string][]string)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if path == "." {
			return nil
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
			return filepath.SkipDir // another module
		}
		p, err := ctx.ImportDir(path, build.ImportComment)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			t.Errorf("%s: %v", path, err)
			return nil
		}
		var ws []string
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				ws = append(ws, imp)
			}
		}
		out[path] = ws
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
