package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/frontend/registry"
)

// TestServeSweeps: a server with the registry sweeps on its interval, and
// its sweeps show in /metrics; a negative interval is a usage error.
func TestServeSweeps(t *testing.T) {
	t.Parallel()
	if code, _, stderr := run(t, context.Background(), "--db", "mem://", "serve", "--gc-interval", "-1s"); code != 2 || !strings.Contains(stderr, "negative") {
		t.Fatalf("serve --gc-interval -1s = %d %q, want 2 naming it negative", code, stderr)
	}
	s := startServe(t, nil, "--db", "mem://", "serve", "--addr", "127.0.0.1:0", "--gc-interval", "1ms")
	base := s.url(t, "http://")
	// An empty store declares no liveness: its sweeps delete nothing and
	// are counted so. Wait (bounded) for the first.
	const want = `stead_gc_sweeps_total{result="no_liveness"}`
	var body string
	for range 1000 {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if body = string(b); strings.Contains(body, want) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	code, stderr := s.stop()
	if !strings.Contains(body, want) {
		t.Fatalf("no sweep in /metrics:\n%s", body)
	}
	if code != 0 {
		t.Fatalf("serve exited %d: %s", code, stderr)
	}
}

// TestRetentionCommand: stead retention --dry-run lists the tags a policy
// would delete and deletes nothing; without it they go. A bad policy is a
// usage error.
func TestRetentionCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite://" + filepath.Join(dir, "s.db")
	st, err := stead.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(st, registry.Options{})
	srv := httptest.NewServer(reg)
	put := func(method, path, ct string, body []byte) {
		req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 201 {
			t.Fatalf("%s %s: %v %v", method, path, resp, err)
		}
		resp.Body.Close()
	}
	cfg := []byte("{}")
	d := blob.KeyOf(cfg).String()
	put("POST", "/v2/app/blobs/uploads/?digest="+d, "application/octet-stream", cfg)
	for i, tag := range []string{"old", "new"} {
		man := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":2},"layers":[],"annotations":{"n":"%d"}}`, d, i)
		put("PUT", "/v2/app/manifests/"+tag, "application/vnd.oci.image.manifest.v1+json", []byte(man))
	}
	srv.Close()
	st.Close()

	policy := filepath.Join(dir, "retention.yaml")
	if err := os.WriteFile(policy, []byte("rules:\n  - repositories: [app]\n    keep_most_recent: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := run(t, context.Background(), "--db", db, "retention", "--dry-run", policy)
	if code != 0 || !strings.Contains(stdout, "old") || strings.Contains(stdout, "new") {
		t.Fatalf("retention --dry-run = %d %q %q", code, stdout, stderr)
	}
	code, stdout, _ = run(t, context.Background(), "--db", db, "ref", "ls", "oci/app/_tags/")
	if code != 0 || !strings.Contains(stdout, "_tags/old") {
		t.Fatalf("a dry run deleted a tag: %q", stdout)
	}
	if code, stdout, stderr = run(t, context.Background(), "--db", db, "retention", policy); code != 0 || !strings.Contains(stdout, "old") {
		t.Fatalf("retention = %d %q %q", code, stdout, stderr)
	}
	code, stdout, _ = run(t, context.Background(), "--db", db, "ref", "ls", "oci/app/_tags/")
	if code != 0 || strings.Contains(stdout, "_tags/old") || !strings.Contains(stdout, "_tags/new") {
		t.Fatalf("tags after retention: %q", stdout)
	}
	if err := os.WriteFile(policy, []byte("rules:\n  - repositories: [app]\n    keep_most_recnt: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(t, context.Background(), "--db", db, "retention", policy); code != 2 || !strings.Contains(stderr, "keep_most_recnt") {
		t.Fatalf("a bad policy = %d %q", code, stderr)
	}
}

// TestUsageCommand: stead usage counts the prefix's distinct blobs once.
func TestUsageCommand(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "s.db")
	for _, args := range [][]string{
		{"put", "--ref", "app/a", "-"}, {"put", "--ref", "app/b", "-"}, {"put", "--ref", "other/c", "-"},
	} {
		var stdout, stderr bytes.Buffer
		if code := execute(context.Background(), append([]string{"--db", db}, args...), &env{stdin: strings.NewReader("same bytes"), stdout: &stdout, stderr: &stderr}); code != 0 {
			t.Fatalf("stead %v = %d %s", args, code, stderr.String())
		}
	}
	code, stdout, stderr := run(t, context.Background(), "--db", db, "usage", "--json", "app/")
	var u stead.Usage
	if err := json.Unmarshal([]byte(stdout), &u); code != 0 || err != nil {
		t.Fatalf("usage = %d %q %q", code, stdout, stderr)
	}
	if want := (stead.Usage{Prefix: "app/", Refs: 2, Blobs: 1, Bytes: 10, ReferencedBytes: 20, DedupSavedBytes: 10}); u != want {
		t.Fatalf("usage = %+v, want %+v", u, want)
	}
}
