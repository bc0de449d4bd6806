package buildcache_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/frontend/buildcache"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/server"
)

// turboWorkspace is an npm workspace of one package whose build writes
// dist/out.txt, its task's output.
var turboWorkspace = map[string]string{
	"package.json":              `{"name":"ws","private":true,"packageManager":"npm@11.0.0","workspaces":["packages/*"]}`,
	"package-lock.json":         `{"name":"ws","lockfileVersion":3,"requires":true,"packages":{"":{"name":"ws","workspaces":["packages/*"]},"node_modules/app":{"resolved":"packages/app","link":true},"packages/app":{"version":"1.0.0"}}}`,
	"turbo.json":                `{"tasks":{"build":{"outputs":["dist/**"],"inputs":["package.json"]}}}`,
	"packages/app/package.json": `{"name":"app","version":"1.0.0","scripts":{"build":"mkdir -p dist && echo built > dist/out.txt"}}`,
}

// TestTurboRemoteHit runs a Turborepo build twice with no local cache
// against the Turborepo cache behind a bearer token: the second run is a
// full remote hit and restores the first's output.
func TestTurboRemoteHit(t *testing.T) {
	t.Parallel()
	turbo := fronttest.Tool(t, "turbo", "STEAD_TURBO", "STEAD_REQUIRE_TURBO")
	st := openSQLite(t)
	cache := buildcache.New(st, buildcache.Options{})
	addr := fronttest.Serve(t, st, server.Options{Token: "turbo-token", Mounts: []server.Mount{{Prefix: buildcache.TurboPrefix, Handler: cache.Turbo()}}})
	dir := t.TempDir()
	writeFiles(t, dir, turboWorkspace)
	build := func() string {
		t.Helper()
		for _, d := range []string{"packages/app/dist", "packages/app/.turbo", ".turbo"} {
			if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, turbo, "run", "build", "--cache=remote:rw", "--no-daemon")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TURBO_API=http://"+addr, "TURBO_TOKEN=turbo-token", "TURBO_TEAM=team1",
			"TURBO_TELEMETRY_DISABLED=1", "DO_NOT_TRACK=1", "TURBO_NO_UPDATE_NOTIFIER=1", "TURBO_CACHE_DIR="+filepath.Join(dir, ".turbo", "cache"))
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("turbo run build: %v\n%s", err, b)
		}
		return string(b)
	}
	if out := build(); !strings.Contains(out, "cache miss") || !strings.Contains(out, "Remote caching enabled") {
		t.Fatalf("first build: want a remote cache miss\n%s", out)
	}
	out := build()
	if !strings.Contains(out, "cache hit") || !strings.Contains(out, "FULL TURBO") {
		t.Fatalf("second build: want a full remote hit\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "packages/app/dist/out.txt")); err != nil || string(b) != "built\n" {
		t.Fatalf("restored output = %q, %v", b, err)
	}
}
