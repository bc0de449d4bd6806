package server_test

import (
	"context"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/internal/testing/apicheck"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/server"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// storeBehindProxy opens a store on a fresh PostgreSQL schema reached
// through a proxy the test can cut.
func storeBehindProxy(t *testing.T) (st *stead.Store, p *pgtest.Proxy, user string) {
	t.Helper()
	storeURL, p := pgtest.New(t).Proxied(t)
	st, err := stead.Open(context.Background(), storeURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	u, err := url.Parse(storeURL)
	if err != nil {
		t.Fatal(err)
	}
	return st, p, u.User.Username()
}

// TestDatabaseDown cuts the database off under a running server: probes
// and requests answer 503 with Retry-After, and no answer names the
// database's host, port, user or driver.
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	st, p, user := storeBehindProxy(t)
	srv := httptest.NewServer(apicheck.Load(t).Wrap(t, server.New(st, server.Options{Logger: quiet})))
	t.Cleanup(srv.Close)
	if a := do(t, "GET", srv.URL+"/readyz", "", nil); a.status != 200 {
		t.Fatalf("readyz with the database up = %d %s", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/metrics", "", nil); !strings.Contains(a.body, "stead_pool_connections_max 8") {
		t.Fatalf("/metrics lacks the pool's size:\n%s", a.body)
	}
	p.CutOff()
	secrets := []string{p.Addr(), p.Target(), user, "pgx", "dial", "connect", "127.0.0.1", "sql"}
	for _, req := range []struct{ method, path, body string }{
		{"GET", "/readyz", ""},
		{"PUT", "/v1/blobs", "value"},
		{"GET", "/v1/blobs/sha256:" + strings.Repeat("0", 64), ""},
		{"GET", "/v1/blobs", ""},
		{"POST", "/v1/locks/job/acquire", `{"owner":"a","ttl":"30s"}`},
		{"GET", "/v1/records/r", ""},
		{"PUT", "/v1/groups/g", ""},
	} {
		a := do(t, req.method, srv.URL+req.path, req.body, nil)
		if a.status != 503 || a.errCode(t) != "unavailable" || a.header.Get("Retry-After") == "" {
			t.Errorf("%s %s with the database down = %d %v %s, want 503 unavailable with Retry-After", req.method, req.path, a.status, a.header, a.body)
		}
		for _, s := range secrets {
			if s != "" && strings.Contains(strings.ToLower(a.body), strings.ToLower(s)) {
				t.Errorf("%s %s answer %s names %q", req.method, req.path, a.body, s)
			}
		}
	}
	// The database comes back: the server is ready again, no restart.
	p.Restore()
	testkit.Until(t, "readyz to answer 200 once the database is back", func() bool {
		return do(t, "GET", srv.URL+"/readyz", "", nil).status == 200
	})
	if a := do(t, "PUT", srv.URL+"/v1/blobs", "value", nil); a.status != 201 {
		t.Fatalf("put after the database came back = %d %s", a.status, a.body)
	}
}

// TestDatabaseHangs: a database that accepts connections but never
// answers gets 503 unavailable with Retry-After from probes and data
// routes, within the request's database deadline, not an empty reply.
func TestDatabaseHangs(t *testing.T) {
	t.Parallel()
	st, p, _ := storeBehindProxy(t)
	srv := httptest.NewServer(apicheck.Load(t).Wrap(t, server.New(st, server.Options{Logger: quiet, RequestTimeout: 3 * time.Second})))
	t.Cleanup(srv.Close)
	p.Blackhole()
	for _, req := range []struct{ method, path, body string }{
		{"GET", "/readyz", ""},
		{"PUT", "/v1/blobs", "value"},
		{"GET", "/v1/blobs/sha256:" + strings.Repeat("0", 64), ""},
		{"POST", "/v1/locks/job/acquire", `{"owner":"a","ttl":"30s"}`},
		{"GET", "/v1/records/r", ""},
	} {
		a := do(t, req.method, srv.URL+req.path, req.body, nil)
		if a.status != 503 || a.errCode(t) != "unavailable" || a.header.Get("Retry-After") == "" {
			t.Errorf("%s %s with the database hanging = %d %v %s, want 503 unavailable with Retry-After", req.method, req.path, a.status, a.header, a.body)
		}
	}
}

// TestNotFoundHidesDriverText: a missing record or blob over PostgreSQL
// answers 404 without the driver's words.
func TestNotFoundHidesDriverText(t *testing.T) {
	t.Parallel()
	st, err := stead.Open(context.Background(), pgtest.New(t).StoreURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewServer(apicheck.Load(t).Wrap(t, server.New(st, server.Options{Logger: quiet})))
	t.Cleanup(srv.Close)
	for _, path := range []string{"/v1/records/x", "/v1/groups/g"} {
		a := do(t, "GET", srv.URL+path, "", nil)
		if a.status != 404 || strings.Contains(a.body, "rows") {
			t.Errorf("GET %s = %d %s, want 404 without driver text", path, a.status, a.body)
		}
	}
}
