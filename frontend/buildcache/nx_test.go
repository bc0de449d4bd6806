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

// nxWorkspace is an npm workspace of one Nx project whose cached build
// writes dist/out.txt.
var nxWorkspace = map[string]string{
	"package.json":              `{"name":"ws","private":true,"workspaces":["packages/*"]}`,
	"nx.json":                   `{}`,
	"packages/app/package.json": `{"name":"app","version":"1.0.0","scripts":{"build":"mkdir -p dist && echo built > dist/out.txt"},"nx":{"targets":{"build":{"cache":true,"outputs":["{projectRoot}/dist"]}}}}`,
}

// TestNxRemoteHit runs an Nx build twice, each with an empty local cache,
// against the Nx cache behind a bearer token: the first stores its
// output in stead, the second is a cache hit restoring it.
func TestNxRemoteHit(t *testing.T) {
	t.Parallel()
	nx := fronttest.Tool(t, "nx", "STEAD_NX", "STEAD_REQUIRE_NX")
	st := openSQLite(t)
	cache := buildcache.New(st, buildcache.Options{})
	addr := fronttest.Serve(t, st, server.Options{Token: "nx-token", Mounts: []server.Mount{{Prefix: buildcache.NxPrefix, Handler: cache.Nx()}}})
	dir := t.TempDir()
	writeFiles(t, dir, nxWorkspace)
	// Nx runs from the workspace's node_modules: the one nx came from.
	modules := filepath.Dir(filepath.Dir(nx))
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	build := func(run string) string {
		t.Helper()
		for _, d := range []string{"packages/app/dist", ".nx"} {
			if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, nx, "run", "app:build", "--outputStyle=stream")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "NX_SELF_HOSTED_REMOTE_CACHE_SERVER=http://"+addr+"/nx", "NX_SELF_HOSTED_REMOTE_CACHE_ACCESS_TOKEN=nx-token",
			"NX_NO_CLOUD=true", "NX_DAEMON=false", "NX_TUI=false", "NX_CACHE_DIRECTORY="+filepath.Join(t.TempDir(), run))
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nx run app:build: %v\n%s", err, b)
		}
		return string(b)
	}
	if out := build("first"); !strings.Contains(out, "0/1 hit") {
		t.Fatalf("first build: want a miss\n%s", out)
	}
	if page, err := st.Refs.List(context.Background(), "cache/nx/", "", 10); err != nil || len(page) != 1 {
		t.Fatalf("entries after the first build: %v, %v; want one", page, err)
	}
	if out := build("second"); !strings.Contains(out, "1/1 hit") {
		t.Fatalf("second build: want a remote hit\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "packages/app/dist/out.txt")); err != nil || string(b) != "built\n" {
		t.Fatalf("restored output = %q, %v", b, err)
	}
}
