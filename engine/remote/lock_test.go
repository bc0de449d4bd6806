package remote_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/remote"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/server"
)

// gate holds one request to path at the server until proceed closes,
// closing arrived when it comes and handled once the server answered it.
// The request is served as if the server had not noticed its client
// leaving: its context does not end with the connection.
type gate struct {
	path                      string
	arrived, proceed, handled chan struct{}
}

func newGate(path string) *gate {
	return &gate{path: path, arrived: make(chan struct{}), proceed: make(chan struct{}), handled: make(chan struct{})}
}

// gatedServer serves st through a handler that holds back the request the
// armed gate names, and returns a remote engine on it.
func gatedServer(t *testing.T, st *stead.Store, armed *atomic.Pointer[gate]) *remote.Engine {
	t.Helper()
	srv := server.New(st, server.Options{ClientClock: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g := armed.Load()
		if g == nil || r.URL.Path != g.path || !armed.CompareAndSwap(g, nil) {
			srv.ServeHTTP(w, r)
			return
		}
		close(g.arrived)
		<-g.proceed
		srv.ServeHTTP(w, r.WithContext(context.WithoutCancel(r.Context())))
		close(g.handled)
	}))
	t.Cleanup(hs.Close)
	eng, err := remote.Open(t.Context(), remote.Config{URL: hs.URL})
	if err != nil {
		t.Fatalf("remote.Open: %v", err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

// TestLockGrantAfterCancel: a Lock whose context ends while its request
// is in flight, the server granting that request after the holder's
// release, leaves the lock free; a late answer with a grant the owner
// already held leaves that grant alone.
func TestLockGrantAfterCancel(t *testing.T) {
	t.Parallel()
	st, err := stead.Open(t.Context(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var armed atomic.Pointer[gate]
	eng := gatedServer(t, st, &armed)
	clk := clock.NewFake(time.Date(2031, 2, 3, 4, 5, 6, 0, time.UTC))
	locks := lock.NewStore(eng.Locks(), lock.Options{Now: clk.Now})
	const ttl = time.Hour

	// run cancels owner's Lock of name while its request waits at the
	// server, runs between (with the request still held), then lets the
	// server answer it, and returns Lock's error once both are done.
	run := func(name, owner string, ttl time.Duration, between func()) error {
		g := newGate("/v1/locks/" + name + "/acquire")
		armed.Store(g)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			lk, err := locks.Lock(ctx, name, owner, ttl)
			if lk != nil {
				err = fmt.Errorf("cancelled Lock returned a handle, token %d", lk.Token())
			}
			done <- err
		}()
		<-g.arrived
		cancel()
		between()
		close(g.proceed)
		<-g.handled
		return <-done
	}

	t.Run("released as the waiter gives up", func(t *testing.T) {
		for i := range 20 {
			name := fmt.Sprintf("job-%d", i)
			alice, ok, err := locks.TryLock(t.Context(), name, "alice", ttl)
			if err != nil || !ok {
				t.Fatalf("TryLock(%s, alice) = %v, %v", name, ok, err)
			}
			err = run(name, "bob", ttl, func() {
				if ok, err := alice.Release(t.Context()); err != nil || !ok {
					t.Fatalf("Release(alice) = %v, %v", ok, err)
				}
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled Lock(%s, bob) = %v, want context.Canceled", name, err)
			}
			carol, ok, err := locks.TryLock(t.Context(), name, "carol", ttl)
			if err != nil || !ok {
				t.Fatalf("round %d: TryLock(%s, carol) after bob gave up = %v, %v; want the lock free", i, name, ok, err)
			}
			if carol.Token() != 3 {
				t.Fatalf("round %d: carol's token %d, want 3 (bob's late grant was 2)", i, carol.Token())
			}
		}
	})

	// However the re-acquire's instant and TTL compare with the grant's.
	for i, tc := range []struct {
		advance, ttl time.Duration
	}{
		{time.Second, ttl},
		{0, ttl},                         // the same instant and TTL: the same expiry
		{time.Second, ttl - time.Second}, // a later instant landing on the same expiry
	} {
		t.Run(fmt.Sprintf("a grant already held is kept, %v later for %v", tc.advance, tc.ttl), func(t *testing.T) {
			name := fmt.Sprintf("kept-%d", i)
			alice, ok, err := locks.TryLock(t.Context(), name, "alice", ttl)
			if err != nil || !ok {
				t.Fatalf("TryLock(%s, alice) = %v, %v", name, ok, err)
			}
			clk.Advance(tc.advance)
			if err := run(name, "alice", tc.ttl, func() {}); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled Lock(%s, alice) = %v, want context.Canceled", name, err)
			}
			if ok, err := alice.Release(t.Context()); err != nil || !ok {
				t.Fatalf("Release of alice's first grant = %v, %v; want it still held", ok, err)
			}
		})
	}
}
