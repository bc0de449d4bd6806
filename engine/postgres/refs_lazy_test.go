package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/ref"
)

// TestRefLazyTouchOddMicroseconds: a lazy touch renews a ref with less
// than half its TTL left when the TTL is an odd number of microseconds
// (half of 3µs is 1.5µs, not 1µs), as the other engines do.
func TestRefLazyTouchOddMicroseconds(t *testing.T) {
	t.Parallel()
	e := open(t, pgtest.New(t), "")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	clk := func() time.Time { return now }
	bs := blob.NewStore(e.Blobs(), blob.Options{Now: clk})
	rs := ref.NewStore(e.Refs(), ref.Options{Now: clk})
	key, err := bs.Put(t.Context(), bytes.NewReader([]byte("lazy half")))
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 3 * time.Microsecond
	if _, err := rs.Set(t.Context(), "c/x", key, ref.SetOptions{TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(2 * time.Microsecond) // 1µs left: less than half
	got, err := rs.GetTouch(t.Context(), "c/x", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if want := now.Add(ttl); !got.Expiry.Equal(want) {
		t.Fatalf("GetTouch with 1µs of 3µs left: expiry %v, want renewed to %v", got.Expiry, want)
	}
}

// TestRefSetAfterLockWait: a Set that waited on its key's row lock (held
// here as an arbitration holds it) returns a ref that is live: its expiry
// runs from when the lock was granted, not from when the statement began.
func TestRefSetAfterLockWait(t *testing.T) {
	t.Parallel()
	e := open(t, pgtest.New(t), "")
	bs := blob.NewStore(e.Blobs(), blob.Options{})
	rs := ref.NewStore(e.Refs(), ref.Options{})
	ctx := t.Context()
	key, err := bs.Put(ctx, bytes.NewReader([]byte("ttl after a lock wait")))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := e.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+pgx.Identifier{e.Schema()}.Sanitize()+".blobs WHERE key = $1 FOR UPDATE", key.String()); err != nil {
		tx.Rollback(context.Background())
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() { // the lock is held 1.5 s, then released
		defer close(released)
		time.Sleep(1500 * time.Millisecond)
		tx.Rollback(context.Background())
	}()
	t.Cleanup(func() { <-released })
	r, err := rs.Set(ctx, "c/wait", key, ref.SetOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Get(ctx, "c/wait"); err != nil {
		t.Fatalf("Get right after Set(TTL 1s) that waited 1.5s for its lock = %v (expiry %v): the ref was returned expired", err, r.Expiry)
	}
}

// TestRefTouchMovingRef: Touch renews a live ref however often other
// callers move it to other blobs meanwhile; it never fails for that.
func TestRefTouchMovingRef(t *testing.T) {
	t.Parallel()
	e := open(t, pgtest.New(t), "")
	bs := blob.NewStore(e.Blobs(), blob.Options{})
	rs := ref.NewStore(e.Refs(), ref.Options{})
	ctx := t.Context()
	var keys []blob.Key
	for i := range 4 {
		k, err := bs.Put(ctx, bytes.NewReader(fmt.Appendf(nil, "moving %d", i)))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if _, err := rs.Set(ctx, "hot", keys[0], ref.SetOptions{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				if _, err := rs.Set(ctx, "hot", keys[(i+w)%4], ref.SetOptions{TTL: time.Hour}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 100 {
		if _, err := rs.Touch(ctx, "hot", 2*time.Hour); err != nil {
			t.Errorf("Touch of a live ref being moved: %v", err)
			break
		}
	}
	stop.Store(true)
	wg.Wait()
}
