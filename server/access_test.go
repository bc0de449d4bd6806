package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/server"
	"github.com/steadkit/stead/server/access"
)

// TestAccessAreas: /v1 routes need read, write or gc of the v1 area and
// /metrics metrics; a known caller outside its rules gets 403 forbidden,
// an unknown one 401 with Bearer and Basic challenges, and an address
// that fails too often 429 too_many_attempts.
func TestAccessAreas(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var lines strings.Builder
	for _, u := range []string{"reader", "writer", "ops"} {
		h, _ := bcrypt.GenerateFromPassword([]byte(u+"-pw"), bcrypt.MinCost)
		lines.WriteString(u + ":" + string(h) + "\n")
	}
	rules := `
rules:
  - who: [reader]
    v1: [read]
  - who: [writer]
    v1: [read, write]
  - who: [ops]
    v1: [gc]
    metrics: true
`
	for name, body := range map[string]string{"htpasswd": lines.String(), "access.yaml": rules} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a, err := access.New(access.Config{Htpasswd: filepath.Join(dir, "htpasswd"), Access: filepath.Join(dir, "access.yaml"), FailBurst: 2})
	if err != nil {
		t.Fatal(err)
	}
	st, err := stead.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewServer(server.New(st, server.Options{Access: a, Logger: quiet}))
	t.Cleanup(srv.Close)
	do := func(method, path, user, pass string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader("hello"))
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, c := range []struct {
		method, path, user string
		status             int
		code               string
	}{
		{"GET", "/v1/info", "reader", 200, ""},
		{"POST", "/v1/blobs", "reader", 403, wire.CodeForbidden},
		{"POST", "/v1/blobs", "writer", 201, ""},
		{"POST", "/v1/gc/sweep", "writer", 403, wire.CodeForbidden},
		{"GET", "/v1/gc/sources", "ops", 200, ""},
		{"GET", "/v1/info", "ops", 403, wire.CodeForbidden},
		{"GET", "/metrics", "ops", 200, ""},
		{"GET", "/metrics", "writer", 403, wire.CodeForbidden},
		{"GET", "/v1/info", "", 401, wire.CodeUnauthorized},
		{"GET", "/healthz", "", 200, ""},
	} {
		resp := do(c.method, c.path, c.user, c.user+"-pw")
		if resp.StatusCode != c.status || resp.Header.Get(wire.CodeHeader) != c.code {
			t.Errorf("%s %s as %q = %d %q; want %d %q", c.method, c.path, c.user, resp.StatusCode, resp.Header.Get(wire.CodeHeader), c.status, c.code)
		}
		if c.status == 401 && len(resp.Header.Values("WWW-Authenticate")) != 2 {
			t.Errorf("challenges %v; want Bearer and Basic", resp.Header.Values("WWW-Authenticate"))
		}
	}
	for range 2 {
		if resp := do("GET", "/v1/info", "reader", "guess"); resp.StatusCode != 401 {
			t.Fatalf("wrong password = %d", resp.StatusCode)
		}
	}
	if resp := do("GET", "/v1/info", "reader", "reader-pw"); resp.StatusCode != 429 || resp.Header.Get(wire.CodeHeader) != wire.CodeTooManyAttempts || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("after 2 failures = %d %v; want 429 too_many_attempts", resp.StatusCode, resp.Header)
	}
}
