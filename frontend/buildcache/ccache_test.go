package buildcache_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/frontend/buildcache"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/server"
)

// serveCache opens a store at url and serves it with the build cache
// mounted, returning the store and the server's host:port.
func serveCache(t *testing.T, url, token string, opts buildcache.Options) (*stead.Store, string) {
	t.Helper()
	st, err := stead.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	addr := fronttest.Serve(t, st, server.Options{Token: token, Mounts: []server.Mount{{Prefix: buildcache.Prefix, Handler: buildcache.New(st, opts)}}})
	return st, addr
}

// openSQLite opens a store on a new SQLite file, closed when the test ends.
func openSQLite(t *testing.T) *stead.Store {
	t.Helper()
	st, err := stead.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// writeFiles writes files, each a path relative to dir and its content,
// making the directories they need.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// ccacheCompile compiles src in dir to out with ccache over remote storage
// (its CCACHE_REMOTE_STORAGE), the local cache in dir/cacheDir and no
// machine's own configuration, and returns ccache's statistics.
func ccacheCompile(t *testing.T, ccache, cc, dir, remote, cacheDir, src, out string) map[string]string {
	t.Helper()
	env := append(os.Environ(),
		"CCACHE_CONFIGPATH="+filepath.Join(dir, "none.conf"),
		"CCACHE_DIR="+filepath.Join(dir, cacheDir),
		"CCACHE_REMOTE_STORAGE="+remote,
		"CCACHE_NOHASHDIR=1", "CCACHE_BASEDIR="+dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ccache, cc, "-c", src, "-o", out)
	cmd.Dir, cmd.Env = dir, env
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ccache cc: %v\n%s", err, b)
	}
	cmd = exec.CommandContext(ctx, ccache, "--print-stats")
	cmd.Dir, cmd.Env = dir, env
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("ccache --print-stats: %v", err)
	}
	stats := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "\t"); ok {
			stats[k] = v
		}
	}
	return stats
}

// TestCcacheRemoteHit compiles a C file twice with ccache, each time with
// an empty local cache, against the build cache on SQLite and on
// PostgreSQL, behind a bearer token: the second compile is a remote hit,
// and its object file is the first's.
func TestCcacheRemoteHit(t *testing.T) {
	t.Parallel()
	ccache := fronttest.Tool(t, "ccache", "STEAD_CCACHE", "STEAD_REQUIRE_CCACHE")
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatalf("ccache needs a C compiler: %v", err)
	}
	for _, e := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "s.db") }},
		{"postgres", func(t *testing.T) string { return pgtest.New(t).StoreURL() }},
	} {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			_, addr := serveCache(t, e.url(t), "cache-token", buildcache.Options{})
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "add.c"), []byte("int add(int a, int b) { return a + b; }\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			compile := func(cacheDir, out string) map[string]string {
				return ccacheCompile(t, ccache, cc, dir, "http://"+addr+"/cache|layout=bazel|bearer-token=cache-token", cacheDir, "add.c", out)
			}
			first := compile("c1", "first.o")
			if first["remote_storage_miss"] != "1" || first["remote_storage_write"] == "0" || first["remote_storage_error"] != "0" {
				t.Fatalf("first compile: remote miss %s, writes %s, errors %s; want a miss that writes", first["remote_storage_miss"], first["remote_storage_write"], first["remote_storage_error"])
			}
			second := compile("c2", "second.o")
			if second["remote_storage_hit"] != "1" || second["remote_storage_error"] != "0" {
				t.Fatalf("second compile: remote hits %s, errors %s; want a remote hit", second["remote_storage_hit"], second["remote_storage_error"])
			}
			a, _ := os.ReadFile(filepath.Join(dir, "first.o"))
			b, _ := os.ReadFile(filepath.Join(dir, "second.o"))
			if len(a) == 0 || !bytes.Equal(a, b) {
				t.Fatalf("object files differ (%d and %d bytes)", len(a), len(b))
			}
		})
	}
}
