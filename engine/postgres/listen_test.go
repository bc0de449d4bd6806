package postgres_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/record"
)

// stallProxy forwards TCP connections to target until stall, after which
// the connections it holds go silent: it stops forwarding and stops
// reading, and never closes them, as a peer behind a dead link does (no
// FIN, no RST). Connections accepted later are forwarded.
type stallProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	gen     int // connections of a generation below stalled are silent
	stalled int
	conns   []net.Conn
	done    chan struct{}
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target, done: make(chan struct{})}
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		close(p.done)
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *stallProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		d, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		gen := p.gen
		p.conns = append(p.conns, c, d)
		p.mu.Unlock()
		go p.pipe(d, c, gen)
		go p.pipe(c, d, gen)
	}
}

func (p *stallProxy) silent(gen int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return gen < p.stalled
}

func (p *stallProxy) pipe(dst, src net.Conn, gen int) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if p.silent(gen) {
			<-p.done // hold the connection open, reading nothing
			return
		}
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				dst.Close()
			}
			return
		}
	}
}

// stall silences every connection accepted so far.
func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	p.stalled = p.gen
}

// TestListenerNoticesASilentPeer cuts the listener's connection without a
// word: the listener proves its connection alive, finds it dead, tells its
// waiters (so a WaitClaimable with no lease to wait for does not sleep
// until its context ends) and listens again on a new connection.
func TestListenerNoticesASilentPeer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newStallProxy(t, u.Host)
	viaProxy := *u
	viaProxy.Host = proxy.ln.Addr().String()
	// PgBouncer mode with a listen URL: the pool connects directly, only
	// the listener through the proxy.
	ea := open(t, db, "&pgbouncer=true&listen_url="+url.QueryEscape(viaProxy.String()))
	postgres.SetProveEvery(ea, 200*time.Millisecond)
	a := record.NewStore(ea.Records(), record.Options{})
	_, b := node(t, db, nil)
	for _, g := range []string{"g", "h"} {
		if err := b.RegisterGroup(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	waitLive := func() (<-chan struct{}, func()) { t.Helper(); return watchLive(t, ea, "g") }
	wake, stop := waitLive()
	if _, err := b.Save(ctx, record.Record{ID: "g1", Group: "g", Status: record.Active}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(30 * time.Second):
		t.Fatal("no wake within 30s after a save on another node")
	}
	stop()
	wake, stop = waitLive()
	defer stop()

	proxy.stall()
	// A waiter of a group with nothing claimable and no lease: only a
	// wake or a poll can end its wait before its context does.
	waited := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		waited <- a.WaitClaimable(wctx, "h")
	}()
	time.Sleep(50 * time.Millisecond)
	if _, err := b.Save(ctx, record.Record{ID: "h1", Group: "h", Status: record.Active}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(30 * time.Second):
		t.Fatal("the listener's watchers were not told within 30s that its connection went silent")
	}
	if err := <-waited; err != nil {
		t.Fatalf("WaitClaimable over a silent listener: %v, want it to notice the save", err)
	}
	// It listens again, on a new connection.
	stop()
	wake, stop = waitLive()
	if _, err := b.Save(ctx, record.Record{ID: "g2", Group: "g", Status: record.Active}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(30 * time.Second):
		t.Fatal("no wake within 30s after the listener reconnected")
	}
}

// A LISTEN connection that fails is logged at warn through Config.Logger,
// saying that waiters poll meanwhile and that it was listening.
func TestListenerLogsLostConnection(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var logs testkit.Buffer
	cfg, err := postgres.ParseURL(db.StoreURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e := openConfig(t, cfg)
	alice := mustTryLock(t, lock.NewStore(e.Locks(), lock.Options{}), "job", "alice")
	bob := waiter(t, e, "job", "bob")
	pid := listenerPID(t, db, e, 0)
	if got := logs.String(); got != "" {
		t.Fatalf("logged before any failure: %s", got)
	}
	if _, err := db.Admin.Exec(t.Context(), "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	testkit.Until(t, "the lost LISTEN connection to be logged", func() bool {
		return strings.Contains(logs.String(), "the LISTEN connection failed; waiters poll until it is back")
	})
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "was_listening=true") {
		t.Errorf("log line %q: want level WARN and was_listening=true", got)
	}
	listenerPID(t, db, e, pid)
	mustRelease(t, alice)
	mustRelease(t, mustGet(t, bob))
}
