package server_test

import (
	"context"
	"io"
	"net"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/internal/testing/apicheck"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/server"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// proxy forwards TCP connections to target until it is cut: then every
// connection is closed and new ones are refused, as when a database goes
// away.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cut    bool
	hole   bool // accept and hold new connections, forwarding nothing
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	t.Cleanup(func() {
		p.cutOff()
		ln.Close() // ends the accept loop
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.hole {
				p.conns = append(p.conns, c)
				p.mu.Unlock()
				continue
			}
			if p.cut {
				p.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

// restore lets connections through again.
func (p *proxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// blackhole drops the connections open and accepts new ones that never
// answer, as a database host that hangs.
func (p *proxy) blackhole() {
	p.cutOff()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hole = true
}

func (p *proxy) cutOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// storeBehindProxy opens a store on a fresh PostgreSQL schema reached
// through a proxy the test can cut.
func storeBehindProxy(t *testing.T) (st *stead.Store, p *proxy, user string) {
	t.Helper()
	db := pgtest.New(t)
	u, err := url.Parse(db.StoreURL())
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	if !strings.Contains(target, ":") {
		target += ":5432"
	}
	p = newProxy(t, target)
	u.Host = p.ln.Addr().String()
	st, err = stead.Open(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
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
	p.cutOff()
	secrets := []string{p.ln.Addr().String(), p.target, user, "pgx", "dial", "connect", "127.0.0.1", "sql"}
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
	p.restore()
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
	p.blackhole()
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
