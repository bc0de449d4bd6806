package server_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/server"
)

// TestLockGrantToClientGone: a grant made as its client leaves, with or
// without a wait, is released, so that the lock is free at once rather
// than held, until it expires, by a token nobody knows.
func TestLockGrantToClientGone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		wait bool
	}{{"no wait", false}, {"after a wait", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mem, err := stead.Open(t.Context(), "mem://")
			if err != nil {
				t.Fatal(err)
			}
			eng := &gatedEngine{Engine: mem.Engine(), locks: &gatedLocks{Backend: mem.Engine().Locks(), granted: make(chan struct{}, 1), refused: make(chan struct{}, 1)}}
			st, err := stead.New(t.Context(), eng)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			srv := server.New(st, server.Options{Logger: quiet})
			handled := make(chan struct{}, 1)
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				srv.ServeHTTP(w, r)
				handled <- struct{}{}
			}))
			t.Cleanup(hs.Close)

			body := `{"owner":"bob","ttl":"1h"}`
			var alice *lock.Lock
			if tc.wait {
				body = `{"owner":"bob","ttl":"1h","wait":"1m"}`
				var ok bool
				if alice, ok, err = st.Locks.TryLock(t.Context(), "job", "alice", time.Hour); err != nil || !ok {
					t.Fatalf("TryLock(alice) = %v, %v", ok, err)
				}
			}
			ctx, cancel := context.WithCancel(t.Context())
			req, err := http.NewRequestWithContext(ctx, "POST", hs.URL+"/v1/locks/job/acquire", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() {
				resp, err := hs.Client().Do(req)
				if err == nil {
					resp.Body.Close()
				}
				errc <- err
			}()
			if alice != nil {
				<-eng.locks.refused // bob waits
				if ok, err := alice.Release(t.Context()); err != nil || !ok {
					t.Fatalf("Release(alice) = %v, %v", ok, err)
				}
			}
			<-eng.locks.granted
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled request = %v", err)
			}
			<-handled
			if _, ok, err := st.Locks.TryLock(t.Context(), "job", "carol", time.Hour); err != nil || !ok {
				t.Fatalf("TryLock(carol) after bob left = %v, %v; want the lock free", ok, err)
			}
		})
	}
}

// noFlush is a middleware's ResponseWriter that neither flushes nor
// unwraps: http.ResponseController reports http.ErrNotSupported for it.
type noFlush struct{ w http.ResponseWriter }

func (n noFlush) Header() http.Header         { return n.w.Header() }
func (n noFlush) Write(b []byte) (int, error) { return n.w.Write(b) }
func (n noFlush) WriteHeader(code int)        { n.w.WriteHeader(code) }

// TestLockGrantBehindMiddleware: a grant answered through a ResponseWriter
// that cannot flush was delivered, and stays held, with or without a wait.
func TestLockGrantBehindMiddleware(t *testing.T) {
	t.Parallel()
	mem, err := stead.Open(t.Context(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	eng := &gatedEngine{Engine: mem.Engine(), locks: &gatedLocks{Backend: mem.Engine().Locks(), refused: make(chan struct{}, 1)}}
	st, err := stead.New(t.Context(), eng)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := server.New(st, server.Options{Logger: quiet})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		srv.ServeHTTP(noFlush{w}, r)
	}))
	t.Cleanup(hs.Close)
	post := func(op, body string) int {
		resp, err := hs.Client().Post(hs.URL+"/v1/locks/job/"+op, "application/json", strings.NewReader(body))
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	wantHeld := func(by string) {
		t.Helper()
		if _, ok, err := st.Locks.TryLock(t.Context(), "job", "carol", time.Hour); err != nil || ok {
			t.Fatalf("TryLock(carol) of %s's lock = %v, %v; want it held", by, ok, err)
		}
	}
	if code := post("acquire", `{"owner":"alice","ttl":"1h"}`); code != http.StatusOK {
		t.Fatalf("alice's acquire = %d", code)
	}
	wantHeld("alice")

	// Bob waits for alice's grant; the grant his wait brings is his.
	done := make(chan int, 1)
	go func() { done <- post("acquire", `{"owner":"bob","ttl":"1h","wait":"1m"}`) }()
	<-eng.locks.refused
	if code := post("release", `{"owner":"alice","token":1}`); code != http.StatusOK {
		t.Fatalf("alice's release = %d", code)
	}
	if code := <-done; code != http.StatusOK {
		t.Fatalf("bob's waiting acquire = %d", code)
	}
	wantHeld("bob")
}

// gatedLocks signals bob's refusals on refused, as far as its buffer
// holds. With a gate, it holds bob's waiting attempts (Wait set) until the
// gate is closed. With granted, it holds each grant to bob (only those of
// waiting attempts, with waitOnly) until the request's context ends,
// signalling it on granted: the grant happened just as the client left.
type gatedLocks struct {
	lock.Backend
	gate             chan struct{}
	granted, refused chan struct{}
	waitOnly         bool
}

func (l *gatedLocks) Acquire(ctx context.Context, p lock.AcquireParams) (lock.AcquireResult, error) {
	if p.Owner != "bob" {
		return l.Backend.Acquire(ctx, p)
	}
	if p.Wait && l.gate != nil {
		<-l.gate
	}
	res, err := l.Backend.Acquire(context.WithoutCancel(ctx), p)
	switch {
	case err == nil && res.Granted && l.granted != nil && (p.Wait || !l.waitOnly):
		l.granted <- struct{}{}
		<-ctx.Done()
	case err == nil && !res.Granted:
		select {
		case l.refused <- struct{}{}:
		default:
		}
	}
	return res, err
}

type gatedEngine struct {
	engine.Engine
	locks *gatedLocks
}

func (e *gatedEngine) Locks() lock.Backend { return e.locks }

// TestLockWaitGrantAlreadyHeld: a waiting request whose wait ends with a
// grant its owner already held (another of its requests made it) and
// whose client then leaves does not release that grant.
func TestLockWaitGrantAlreadyHeld(t *testing.T) {
	t.Parallel()
	mem, err := stead.Open(t.Context(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	eng := &gatedEngine{Engine: mem.Engine(), locks: &gatedLocks{Backend: mem.Engine().Locks(),
		gate: make(chan struct{}), granted: make(chan struct{}, 1), refused: make(chan struct{}, 1), waitOnly: true}}
	st, err := stead.New(t.Context(), eng)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := server.New(st, server.Options{Logger: quiet})
	handled := make(chan struct{}, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		srv.ServeHTTP(w, r)
		handled <- struct{}{}
	}))
	t.Cleanup(hs.Close)

	alice, ok, err := st.Locks.TryLock(t.Context(), "job", "alice", time.Hour)
	if err != nil || !ok {
		t.Fatalf("TryLock(alice) = %v, %v", ok, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, "POST", hs.URL+"/v1/locks/job/acquire", strings.NewReader(`{"owner":"bob","ttl":"1h","wait":"1m"}`))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		resp, err := hs.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-eng.locks.refused // bob's request waits
	if ok, err := alice.Release(t.Context()); err != nil || !ok {
		t.Fatalf("Release(alice) = %v, %v", ok, err)
	}
	// Another of bob's requests takes the lock; the waiting one then gets
	// that grant back, and its client leaves.
	bob, ok, err := st.Locks.TryLock(t.Context(), "job", "bob", time.Hour)
	if err != nil || !ok {
		t.Fatalf("TryLock(bob) = %v, %v", ok, err)
	}
	close(eng.locks.gate)
	<-eng.locks.granted
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request = %v", err)
	}
	<-handled
	if ok, err := bob.Release(t.Context()); err != nil || !ok {
		t.Fatalf("Release of bob's grant = %v, %v; want it still held", ok, err)
	}
}

// TestListingsOverHTTP: the held locks and the leased records a page at
// a time, next set on a full page; a bad query is a 400 and reaches no
// engine.
func TestListingsOverHTTP(t *testing.T) {
	t.Parallel()
	st, err := stead.Open(t.Context(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	hs := httptest.NewServer(server.New(st, server.Options{Logger: quiet}))
	t.Cleanup(hs.Close)
	for _, name := range []string{"a%1", "a%2", "ab"} {
		if _, ok, err := st.Locks.TryLock(t.Context(), name, "o", time.Hour); err != nil || !ok {
			t.Fatalf("TryLock(%q) = %v, %v", name, ok, err)
		}
	}
	if err := st.Records.RegisterGroup(t.Context(), "g"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"r1", "r2"} {
		if _, err := st.Records.Save(t.Context(), record.Record{ID: id, Group: "g", Status: record.Active}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Records.Claim(t.Context(), "g", id, "w", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for path, want := range map[string][]string{
		"/v1/locks?prefix=a%25&limit=1":           {`"name":"a%1"`, `"next":"a%1"`},
		"/v1/locks?prefix=a%25&after=a%251":       {`"name":"a%2"`},
		"/v1/groups/g/leased?limit=1":             {`"id":"r1"`, `"next":"r1"`},
		"/v1/groups/g/leased?after=r1":            {`"id":"r2"`},
		"/v1/groups/never-registered/leased":      {`"records":[]`},
		"/v1/locks?prefix=nothing":                {`"locks":[]`},
		"/v1/groups/g/leased?after=r2&limit=1000": {`"records":[]`},
	} {
		code, body := get(path)
		for _, w := range want {
			if code != http.StatusOK || !strings.Contains(body, w) {
				t.Errorf("GET %s = %d %s, want 200 with %s", path, code, body, w)
			}
		}
		if strings.Contains(path, "after=") && strings.Contains(body, `"next"`) {
			t.Errorf("GET %s = %s: a page not full has no next", path, body)
		}
	}
	for _, path := range []string{
		"/v1/locks?limit=0", "/v1/locks?limit=1001", "/v1/locks?limit=x", "/v1/locks?prefix=%00", "/v1/locks?after=%ff",
		"/v1/locks?prefix=" + strings.Repeat("x", 256), "/v1/locks?now=2030-01-01T00:00:00Z",
		"/v1/groups/g/leased?limit=0", "/v1/groups/g/leased?limit=-1", "/v1/groups/g/leased?after=%0a", "/v1/groups/%ff/leased",
	} {
		if code, body := get(path); code != http.StatusBadRequest {
			t.Errorf("GET %s = %d %s, want 400", path, code, body)
		}
	}
}
