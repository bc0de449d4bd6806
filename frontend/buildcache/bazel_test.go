package buildcache_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/frontend/buildcache"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/server"
	"github.com/steadkit/stead/server/access"
)

// TestBazelRemoteHit builds a genrule with Bazel against stead's gRPC
// port, then after a clean again (a remote cache hit), then after a
// clean over the HTTP cache at /cache/ (a hit on the entries the gRPC
// build stored), behind a bearer token.
func TestBazelRemoteHit(t *testing.T) {
	t.Parallel()
	bazel := fronttest.Tool(t, "bazel", "STEAD_BAZEL", "STEAD_REQUIRE_BAZEL")
	st := openSQLite(t)
	cache := buildcache.New(st, buildcache.Options{})
	addr := fronttest.Serve(t, st, server.Options{Token: "bz-token", Mounts: []server.Mount{{Prefix: buildcache.Prefix, Handler: cache}}})
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := cache.GRPC(func(header, _, _ string) error {
		if header != "Bearer bz-token" {
			return access.ErrUnauthenticated
		}
		return nil
	})
	go func() { _ = gs.Serve(gln) }()
	t.Cleanup(gs.Stop)

	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{
		"WORKSPACE": "",
		"BUILD":     "genrule(\n    name = \"hello\",\n    outs = [\"hello.txt\"],\n    cmd = \"echo built by a genrule > $@\",\n)\n",
	})
	root := filepath.Join(t.TempDir(), "bazel-root")
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bazel, append([]string{"--output_user_root=" + root}, args...)...)
		cmd.Dir = ws
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bazel %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	t.Cleanup(func() { _ = exec.Command(bazel, "--output_user_root="+root, "shutdown").Run() })
	header := "--remote_header=Authorization=Bearer bz-token"
	grpcCache := "--remote_cache=grpc://" + gln.Addr().String()
	if out := run("build", "//:hello", grpcCache, header); strings.Contains(out, "remote cache hit") {
		t.Fatalf("first build hit an empty cache:\n%s", out)
	}
	run("clean")
	if out := run("build", "//:hello", grpcCache, header); !strings.Contains(out, "1 remote cache hit") {
		t.Fatalf("second build over gRPC: want a remote cache hit\n%s", out)
	}
	run("clean")
	if out := run("build", "//:hello", "--remote_cache=http://"+addr+"/cache", header); !strings.Contains(out, "1 remote cache hit") {
		t.Fatalf("third build over HTTP: want a remote cache hit\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "bazel-bin", "hello.txt")); err != nil || string(b) != "built by a genrule\n" {
		t.Fatalf("restored output = %q, %v", b, err)
	}
}
