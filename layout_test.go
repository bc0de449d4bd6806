package stead_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/steadkit/stead"

// levels orders the module's packages from the leaves up (docs/design.md,
// "Layout"): a package may import its own level and the ones below, never
// one above. A pattern is a package path relative to the module, or a
// subtree when it ends in "/..."; the first that matches gives the level.
var levels = []struct {
	level   int
	pattern string
}{
	{0, "steaderr"}, {0, "internal/validate"}, {0, "internal/wake"}, {0, "internal/clock"}, {0, "internal/httprange"}, {0, "internal/clientaddr"},
	{1, "blob/..."}, {1, "gc/..."}, {1, "ref/..."}, {1, "lock/..."}, {1, "record/..."},
	{2, "engine"},
	{3, "engine/..."},
	{4, ""},
	{5, "server/..."}, {5, "frontend/..."},
	{6, "cmd/..."},
}

// testKits are imported by tests and other test kits only, and may import
// any level.
var testKits = []string{"engine/enginetest/...", "internal/testing/..."}

func matches(rel, pattern string) bool {
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == tree || strings.HasPrefix(rel, tree+"/")
	}
	return rel == pattern
}

func isTestKit(rel string) bool {
	for _, k := range testKits {
		if matches(rel, k) {
			return true
		}
	}
	return false
}

func levelOf(t *testing.T, rel string) int {
	t.Helper()
	for _, l := range levels {
		if matches(rel, l.pattern) {
			return l.level
		}
	}
	t.Fatalf("package %q has no level in layout_test.go: give it one", rel)
	return 0
}

// engineOf is the engine a package under engine/ belongs to ("" for the
// seam, the helpers under engine/internal and the test kits).
func engineOf(rel string) string {
	if !matches(rel, "engine/...") || rel == "engine" || matches(rel, "engine/internal/...") || isTestKit(rel) {
		return ""
	}
	return strings.SplitN(strings.TrimPrefix(rel, "engine/"), "/", 2)[0]
}

// TestLayout checks with go list, for each system's files, that no
// package imports one above its level, that engines never import each
// other (nor the helpers they share an engine) and that only tests and
// other test kits import the test kits. A package's tests may import any
// level (their imports are not listed).
func TestLayout(t *testing.T) {
	t.Parallel()
	// Files built for other systems only (lock_other.go) count too:
	// freebsd stands for every system not named.
	var out []byte
	for _, goos := range []string{"linux", "darwin", "windows", "freebsd"} {
		cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
		cmd.Env = append(os.Environ(), "GOOS="+goos)
		b, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("GOOS=%s go list: %v\n%s", goos, err, ee.Stderr)
			}
			t.Fatalf("GOOS=%s go list: %v", goos, err)
		}
		out = append(out, b...)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	seen := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		seen++
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		kit := isTestKit(rel)
		level := -1
		if !kit {
			level = levelOf(t, rel)
		}
		for _, imp := range p.Imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			switch {
			case isTestKit(dep):
				if !kit {
					t.Errorf("%s imports the test kit %s", p.ImportPath, imp)
				}
			case kit:
			case levelOf(t, dep) > level:
				t.Errorf("%s (level %d) imports %s (level %d), a level above", p.ImportPath, level, imp, levelOf(t, dep))
			case engineOf(rel) != "" && engineOf(dep) != "" && engineOf(rel) != engineOf(dep):
				t.Errorf("engine %s imports engine %s", p.ImportPath, imp)
			case matches(rel, "engine/internal/...") && engineOf(dep) != "":
				t.Errorf("%s, shared by the engines, imports the engine %s", p.ImportPath, imp)
			}
		}
	}
	if seen < 3*20 {
		t.Fatalf("go list named %d packages; want the whole module", seen)
	}
}
