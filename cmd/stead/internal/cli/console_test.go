package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/server"
)

// consoleFixture is a stead server with a registry whose retention keeps
// only "v*" tags of team/app, and an image pushed: team/app:v1 and
// team/app:scratch, one manifest of a config and a layer.
type consoleFixture struct {
	base                    string
	st                      *stead.Store
	manifest, layer, config string
	// bytes is what the image's blobs hold.
	bytes int64
}

const consoleToken = "console-secret"

func newConsoleFixture(t *testing.T, token string) *consoleFixture {
	t.Helper()
	st := openStore(t, storeURL(t))
	ret, err := registry.ParseRetention([]byte("rules:\n  - repositories: [team/app]\n    keep_tags: [\"v*\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(st, registry.Options{Retention: ret, Logger: slog.New(slog.DiscardHandler)})
	h := server.New(st, server.Options{Token: token, Logger: slog.New(slog.DiscardHandler),
		Mounts: []server.Mount{registryMount(reg)}})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f := &consoleFixture{base: srv.URL, st: st}
	f.manifest, f.layer, f.config, f.bytes = pushImage(t, srv.URL, func(req *http.Request) {
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
	})
	return f
}

// pushImage pushes team/app:v1 and team/app:scratch to the registry at
// base, one manifest of a config and a layer, each request passed to auth
// first, and returns their digests and the bytes the three hold.
func pushImage(t *testing.T, base string, auth func(*http.Request)) (manifest, layer, config string, size int64) {
	t.Helper()
	push := func(method, path, ct string, body []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		auth(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("%s %s = %d %s", method, path, resp.StatusCode, b)
		}
	}
	digest := func(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }
	cfg, lay := []byte(`{"architecture":"amd64","os":"linux"}`), []byte("a layer's bytes, pretend gzip")
	config, layer = digest(cfg), digest(lay)
	push("POST", "/v2/team/app/blobs/uploads/?digest="+config, "", cfg)
	push("POST", "/v2/team/app/blobs/uploads/?digest="+layer, "", lay)
	const mt = "application/vnd.oci.image.manifest.v1+json"
	man := []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":%q,"size":%d}]}`,
		mt, config, len(cfg), layer, len(lay)))
	manifest = digest(man)
	push("PUT", "/v2/team/app/manifests/v1", mt, man)
	push("PUT", "/v2/team/app/manifests/scratch", mt, man)
	return manifest, layer, config, int64(len(cfg) + len(lay) + len(man))
}

// get fetches a console page with the fixture's token when auth is set.
func (f *consoleFixture) get(t *testing.T, path string, auth bool) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", f.base+path, nil)
	if auth {
		req.Header.Set("Authorization", "Bearer "+consoleToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// sweep runs one sweep through the API.
func (f *consoleFixture) sweep(t *testing.T) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.base+"/v1/gc/sweep", nil)
	req.Header.Set("Authorization", "Bearer "+consoleToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("sweep = %d", resp.StatusCode)
	}
}

// TestConsolePages: each page of the console shows what the store holds
// (the repository pushed, its tags and manifest with sizes, a layer's
// explain graph naming the manifest that keeps it, the retention dry run
// listing the tag no rule keeps); hostile input is escaped or refused
// with a 400 page; a server that refuses anonymous callers asks for a
// login and shows nothing without one.
func TestConsolePages(t *testing.T) {
	t.Parallel()
	f := newConsoleFixture(t, consoleToken)
	if _, err := f.st.Refs.Set(t.Context(), "hostile/<script>alert(1)</script>", parseKeyT(t, f.layer), ref.SetOptions{Weak: true}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path   string
		status int
		want   []string
	}{
		{"/ui/", 200, []string{`href="/ui/repository?name=team%2fapp"`, ">team/app<"}},
		{"/ui/repository?name=team/app", 200, []string{">v1<", ">scratch<", f.manifest, "Last push", `href="/ui/refs?prefix=oci%2fteam%2fapp%2f_"`}},
		{"/ui/keys/" + f.layer, 200, []string{`href="/ui/keys/` + f.manifest + `"`, "parent blob", "oci/team/app/_blobs/" + f.layer, "<svg"}},
		{"/ui/keys/" + f.manifest, 200, []string{"oci/team/app/_tags/v1", "keeps it"}},
		{"/ui/refs?prefix=oci/team/app/_tags/", 200, []string{"oci/team/app/_tags/scratch", "oci/team/app/_tags/v1"}},
		{"/ui/retention", 200, []string{">scratch<", "no retention rule keeps the tag"}},
		{"/ui/gc", 200, []string{"No sweep since this server started"}},
		{"/ui/refs?prefix=hostile/", 200, []string{"hostile/&lt;script&gt;alert(1)&lt;/script&gt;"}},
		{"/ui/keys/sha256:nothex", 400, []string{"400"}},
		{"/ui/keys/%3Cscript%3E", 400, []string{"&lt;script&gt;"}},
		{"/ui/repository?name=", 400, []string{"repository name"}},
		{"/ui/repository?name=%3Cscript%3E/_x", 400, []string{"repository name"}},
		{"/ui/refs?prefix=" + strings.Repeat("a", 5000), 400, []string{"prefix too long"}},
		{"/ui/refs?prefix=%ff", 400, []string{"not UTF-8"}},
		{"/ui/?after=%ff", 400, []string{"not a page cursor"}},
		{"/ui/repository?name=team/app&tags_after=%ff", 400, []string{"not a page cursor"}},
		{"/ui/?after=zzz", 200, []string{"No repository yet"}},
		{"/ui/nowhere", 404, []string{"no such page"}},
		{"/ui/static/console.css", 200, []string{".node.key rect"}},
	} {
		status, hdr, body := f.get(t, c.path, true)
		if status != c.status {
			t.Errorf("GET %.80s = %d, want %d: %.300s", c.path, status, c.status, body)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %.80s lacks %q: %.2000s", c.path, w, body)
			}
		}
		if strings.Contains(body, "<script>") {
			t.Errorf("GET %.80s has a raw <script>", c.path)
		}
		if !strings.HasSuffix(c.path, ".css") && !strings.Contains(hdr.Get("Content-Security-Policy"), "script-src 'none'") {
			t.Errorf("GET %.80s: Content-Security-Policy %q", c.path, hdr.Get("Content-Security-Policy"))
		}
	}
	// Records: the claimable one and the leased one, each in its table,
	// the leased one with its owner; another group's absent.
	ctx := t.Context()
	for _, g := range []string{"workers", "others"} {
		if err := f.st.Records.RegisterGroup(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"job-free", "job-held", "job-theirs"} {
		g := "workers"
		if id == "job-theirs" {
			g = "others"
		}
		if _, err := f.st.Records.Save(ctx, record.Record{ID: id, Group: g, Status: record.Active, Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"job-held", "job-theirs"} {
		g := map[string]string{"job-held": "workers", "job-theirs": "others"}[id]
		if _, err := f.st.Records.Claim(ctx, g, id, "worker-1", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	status, _, body := f.get(t, "/ui/records?group=workers", true)
	claimable, leased, _ := strings.Cut(body, `id="leased"`)
	if status != 200 || !strings.Contains(claimable, "job-free") || strings.Contains(claimable, "job-held") || !strings.Contains(claimable, "1 claimable") ||
		!strings.Contains(leased, "job-held") || !strings.Contains(leased, "worker-1") || strings.Contains(leased, "job-free") ||
		strings.Contains(body, "job-theirs") || !strings.Contains(body, "1 leased") {
		t.Errorf("GET /ui/records?group=workers = %d %.3000s", status, body)
	}
	if status, _, body := f.get(t, "/ui/records?group=workers&leased_after=job-held", true); status != 200 || strings.Contains(body, "worker-1") ||
		!strings.Contains(body, "No record leased after job-held") {
		t.Errorf("GET /ui/records?group=workers&leased_after=job-held = %d %.3000s", status, body)
	}
	if status, _, body := f.get(t, "/ui/records?group=workers&leased_after=%0a", true); status != 400 {
		t.Errorf("GET /ui/records with a bad cursor = %d %.1000s", status, body)
	}
	// Locks: those held, 100 a page under a prefix; a released one is not.
	for i := range 101 {
		if _, ok, err := f.st.Locks.TryLock(ctx, fmt.Sprintf("jobs/%03d", i), "node-7", time.Hour); err != nil || !ok {
			t.Fatalf("TryLock = %v, %v", ok, err)
		}
	}
	lk, ok, err := f.st.Locks.TryLock(ctx, "jobs/released", "node-7", time.Hour)
	if err != nil || !ok {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	if _, err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.st.Locks.TryLock(ctx, "hostile/<script>", "<script>", time.Hour); err != nil {
		t.Fatal(err)
	}
	if status, _, body := f.get(t, "/ui/locks?prefix=jobs/", true); status != 200 || !strings.Contains(body, "jobs/099") || strings.Contains(body, "jobs/100") ||
		!strings.Contains(body, "node-7") || !strings.Contains(body, `after=jobs%2f099`) || !strings.Contains(body, `<a href="/ui/locks">Locks</a>`) {
		t.Errorf("first page of 101 locks: %d %.3000s", status, body)
	}
	if status, _, body := f.get(t, "/ui/locks?prefix=jobs/&after=jobs/099", true); status != 200 || !strings.Contains(body, "jobs/100") || strings.Contains(body, "jobs/099") ||
		strings.Contains(body, "jobs/released") || strings.Contains(body, "Next page") {
		t.Errorf("second page of 101 locks: %d %.3000s", status, body)
	}
	if status, _, body := f.get(t, "/ui/locks?prefix=hostile/", true); status != 200 || !strings.Contains(body, "hostile/&lt;script&gt;") || strings.Contains(body, "<script>") {
		t.Errorf("GET /ui/locks?prefix=hostile/ = %d %.1000s", status, body)
	}
	if status, _, body := f.get(t, "/ui/locks?prefix=nothing/", true); status != 200 || !strings.Contains(body, "No lock held under this prefix") {
		t.Errorf("GET /ui/locks?prefix=nothing/ = %d %.1000s", status, body)
	}
	for _, q := range []string{"prefix=%ff", "after=%00", "prefix=" + strings.Repeat("a", 300)} {
		if status, _, body := f.get(t, "/ui/locks?"+q, true); status != 400 {
			t.Errorf("GET /ui/locks?%.40s = %d %.1000s, want 400", q, status, body)
		}
	}
	if status, _, body := f.get(t, "/ui/records?group=nobody", true); status != 200 || !strings.Contains(body, "No group nobody") {
		t.Errorf("records of an unknown group = %d %.1000s", status, body)
	}
	if status, _, body := f.get(t, "/ui/records?group=%3Cscript%3E", true); (status != 200 && status != 400) || strings.Contains(body, "<script>") {
		t.Errorf("records of a hostile group = %d %.1000s", status, body)
	}
	// A page holds 100 refs and links to the next.
	for i := range 101 {
		if _, err := f.st.Refs.Set(t.Context(), fmt.Sprintf("many/%03d", i), parseKeyT(t, f.layer), ref.SetOptions{Weak: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, body := f.get(t, "/ui/refs?prefix=many/", true); !strings.Contains(body, "many/099") || strings.Contains(body, "many/100") ||
		!strings.Contains(body, `after=many%2f099`) {
		t.Errorf("first page of 101 refs: %.3000s", body)
	}
	if _, _, body := f.get(t, "/ui/refs?prefix=many/&after=many/099", true); !strings.Contains(body, "many/100") || strings.Contains(body, "many/099") || strings.Contains(body, "Next page") {
		t.Errorf("second page of 101 refs: %.3000s", body)
	}
	for _, p := range []string{"/ui/", "/ui/keys/" + f.layer, "/ui/retention", "/ui/locks", "/ui/static/console.css"} {
		status, hdr, body := f.get(t, p, false)
		if status != 401 || !strings.Contains(hdr.Get("WWW-Authenticate"), "Basic") || strings.Contains(body, "team/app") {
			t.Errorf("GET %s without credentials = %d %q, want 401 asking for Basic and nothing shown", p, status, hdr.Get("WWW-Authenticate"))
		}
	}
	// A sweep shows in the charts, with what the store held after it:
	// the image's three blobs, none pending (their pins last).
	f.sweep(t)
	status, _, body = f.get(t, "/ui/gc", true)
	for _, w := range []string{`id="chart-freed"`, `id="chart-stored"`, ">done<", `<circle class="stored"`, `<circle class="pending"`,
		fmt.Sprintf("<b>%d B</b> in 3 blobs", f.bytes), "<b>0 B</b> in 0 blobs"} {
		if status != 200 || !strings.Contains(body, w) {
			t.Errorf("GET /ui/gc after a sweep = %d, lacks %q: %.3000s", status, w, body)
		}
	}
}

// TestConsoleServe: the console of a real `stead serve` with its
// registry and users from --htpasswd asks for a login, and with one shows
// the repository just pushed through its /v2/, its tags and the explain
// graph of its layer naming the manifest that keeps it.
func TestConsoleServe(t *testing.T) {
	t.Parallel()
	htpasswd := filepath.Join(t.TempDir(), "htpasswd")
	if code := execute(context.Background(), []string{"user", "add", "--htpasswd", htpasswd, "ops"}, &env{stdin: strings.NewReader("pw\n"), stdout: io.Discard, stderr: io.Discard}); code != 0 {
		t.Fatalf("user add = %d", code)
	}
	base := startServe(t, nil, "--db", storeURL(t), "serve", "--addr", "127.0.0.1:0", "--registry", "--htpasswd", htpasswd, "--gc-interval", "0").url(t, "http://")
	login := func(req *http.Request) { req.SetBasicAuth("ops", "pw") }
	manifest, layer, _, _ := pushImage(t, base, login)
	get := func(path string, auth func(*http.Request)) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		auth(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	if status, hdr, body := get("/ui/", func(*http.Request) {}); status != 401 || !strings.Contains(hdr.Get("WWW-Authenticate"), "Basic") || strings.Contains(body, "team/app") {
		t.Errorf("GET /ui/ without a login = %d %q, want 401 asking for Basic and nothing shown", status, hdr.Get("WWW-Authenticate"))
	}
	if status, _, body := get("/ui/", func(req *http.Request) { req.SetBasicAuth("ops", "wrong") }); status != 401 || strings.Contains(body, "team/app") {
		t.Errorf("GET /ui/ with a wrong password = %d, want 401 and nothing shown", status)
	}
	for _, c := range []struct {
		path string
		want []string
	}{
		{"/ui/", []string{`href="/ui/repository?name=team%2fapp"`, ">team/app<"}},
		{"/ui/repository?name=team/app", []string{">v1<", ">scratch<", manifest}},
		{"/ui/keys/" + layer, []string{`href="/ui/keys/` + manifest + `"`, "parent blob"}},
	} {
		status, _, body := get(c.path, login)
		if status != 200 {
			t.Errorf("GET %s = %d: %.500s", c.path, status, body)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s lacks %q: %.2000s", c.path, w, body)
			}
		}
	}
}
