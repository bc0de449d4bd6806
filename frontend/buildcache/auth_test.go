package buildcache_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/frontend/buildcache"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/server"
	"github.com/steadkit/stead/server/access"
)

// serveCacheUsers serves the cache with two users: runner may read and
// write it, reader only read; neither may use /v1.
func serveCacheUsers(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var lines strings.Builder
	for _, u := range []string{"runner", "reader"} {
		h, err := bcrypt.GenerateFromPassword([]byte(u+"-pw"), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		lines.WriteString(u + ":" + string(h) + "\n")
	}
	rules := "rules:\n  - who: [runner]\n    cache: [read, write]\n  - who: [reader]\n    cache: [read]\n"
	for name, body := range map[string]string{"htpasswd": lines.String(), "access.yaml": rules} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a, err := access.New(access.Config{Htpasswd: filepath.Join(dir, "htpasswd"), Access: filepath.Join(dir, "access.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	st, err := stead.Open(context.Background(), "sqlite://"+filepath.Join(dir, "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cache := buildcache.New(st, buildcache.Options{MaxBlobSize: 1 << 20})
	return fronttest.Serve(t, st, server.Options{Access: a, Mounts: []server.Mount{
		{Prefix: buildcache.Prefix, Handler: cache},
		{Prefix: buildcache.GradlePrefix, Handler: cache.Gradle()},
		{Prefix: buildcache.TurboPrefix, Handler: cache.Turbo()},
	}})
}

// TestTurboReader: a user who may only read the cache queries
// Turborepo's artifacts (POST v8/artifacts, a read) and sends its events
// (telemetry, not kept), and is refused a put.
func TestTurboReader(t *testing.T) {
	t.Parallel()
	addr := serveCacheUsers(t)
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/v8/artifacts", `{"hashes": ["abc123"]}`, 200},
		{"POST", "/v8/artifacts/events", `[{"sessionId": "s", "source": "REMOTE", "event": "HIT", "hash": "abc123", "duration": 1}]`, 200},
		{"GET", "/v8/artifacts/status", "", 200},
		{"PUT", "/v8/artifacts/abc123", "artifact", 403},
	} {
		req, _ := http.NewRequest(c.method, "http://"+addr+c.path, strings.NewReader(c.body))
		req.SetBasicAuth("reader", "reader-pw")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("reader %s %s = %d; want %d", c.method, c.path, resp.StatusCode, c.want)
		}
	}
}

// TestCacheUsers: Basic credentials read and write within the rules; a
// reader's write is 403, no or wrong credentials 401 with a Basic
// challenge, and /v1 is closed to both.
func TestCacheUsers(t *testing.T) {
	t.Parallel()
	addr := serveCacheUsers(t)
	content := []byte("an object file")
	for _, c := range []struct {
		method, path, user, pass string
		want                     int
	}{
		{"PUT", "/cache/cas/" + hexOf(content), "reader", "reader-pw", 403},
		{"PUT", "/cache/cas/" + hexOf(content), "runner", "runner-pw", 200},
		{"GET", "/cache/cas/" + hexOf(content), "reader", "reader-pw", 200},
		{"GET", "/cache/cas/" + hexOf(content), "reader", "wrong", 401},
		{"GET", "/cache/cas/" + hexOf(content), "", "", 401},
		{"GET", "/v1/info", "runner", "runner-pw", 403},
	} {
		req, _ := http.NewRequest(c.method, "http://"+addr+c.path, strings.NewReader(string(content)))
		if c.user != "" {
			req.SetBasicAuth(c.user, c.pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s as %s = %d; want %d", c.method, c.path, c.user, resp.StatusCode, c.want)
		}
		if c.want == 401 && !strings.Contains(strings.Join(resp.Header.Values("WWW-Authenticate"), " "), `Basic realm="stead"`) {
			t.Errorf("%s %s: challenges %v; want Basic among them", c.method, c.path, resp.Header.Values("WWW-Authenticate"))
		}
	}
}

// TestCcacheUserPassword: ccache with user:password in its remote
// storage URL writes and then hits the cache.
func TestCcacheUserPassword(t *testing.T) {
	t.Parallel()
	ccache := fronttest.Tool(t, "ccache", "STEAD_CCACHE", "STEAD_REQUIRE_CCACHE")
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatalf("ccache needs a C compiler: %v", err)
	}
	addr := serveCacheUsers(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mul.c"), []byte("int mul(int a, int b) { return a * b; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	remote := "http://runner:runner-pw@" + addr + "/cache|layout=bazel"
	if s := ccacheCompile(t, ccache, cc, dir, remote, "c1", "mul.c", "first.o"); s["remote_storage_miss"] != "1" || s["remote_storage_error"] != "0" {
		t.Fatalf("first compile: %v", s)
	}
	if s := ccacheCompile(t, ccache, cc, dir, remote, "c2", "mul.c", "second.o"); s["remote_storage_hit"] != "1" || s["remote_storage_error"] != "0" {
		t.Fatalf("second compile: %v", s)
	}
}
