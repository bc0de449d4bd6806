package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// testRefResolve covers Open (Backend.Resolve): a ref and its blob read
// in one call, its lazy renewal, and its refusals. Values over a few
// bytes are chunked (on a run with a bytes tier, objects).
func testRefResolve(t *testing.T, h Harness) {
	runTests(t, h, []suiteTest{
		{"Forms", resolveForms},
		{"Expired", resolveExpired},
		{"WeakGone", resolveWeakGone},
		{"Lazy", resolveLazy},
		{"RacesSweep", resolveRacesSweep},
		{"Refused", resolveRefused},
	})
}

// mustOpen opens name (renewing with ttl) and checks it names want and
// reads value.
func mustOpen(t *testing.T, s *ref.Store, name string, ttl time.Duration, want blob.Key, value []byte) ref.Ref {
	t.Helper()
	r, rd, err := s.Open(t.Context(), name, ttl)
	if err != nil {
		t.Fatalf("Open(%q): %v", name, err)
	}
	defer rd.Close()
	got, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("Open(%q): read: %v", name, err)
	}
	if r.Name != name || r.Key != want || rd.Key() != want || rd.Size() != int64(len(value)) || !bytes.Equal(got, value) {
		t.Fatalf("Open(%q) = %+v, a reader of %s (%d bytes) reading %d bytes; want key %s, %d bytes", name, r, rd.Key(), rd.Size(), len(got), want, len(value))
	}
	return r
}

// resolveForms opens refs to an empty, an inline and chunked values (one
// chunk, several), weak and strong, and reads them back whole and at an
// offset.
func resolveForms(t *testing.T, h Harness) {
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprint("chunked=", chunked), func(t *testing.T) {
			t.Parallel()
			hc := h
			hc.chunked = chunked
			b := setup(t, hc)
			for i, n := range []int{0, 10, tinyInline + 1, 3*tinyChunk + 17} {
				value := testValue(fmt.Sprint("resolve form ", n), n)
				key := mustPut(t, b.store, value)
				name := fmt.Sprint("forms/", n)
				set := mustSet(t, b.refs, name, key, ref.SetOptions{Weak: i%2 == 1, Annotation: []byte("a"), TTL: time.Hour})
				got := mustOpen(t, b.refs, name, 0, key, value)
				if got.Version != set.Version || got.Weak != set.Weak || !got.Expiry.Equal(set.Expiry) || string(got.Annotation) != "a" {
					t.Fatalf("Open(%q) = %+v, want %+v", name, got, set)
				}
				if n > 1 {
					_, rd, err := b.refs.Open(t.Context(), name, 0)
					if err != nil {
						t.Fatal(err)
					}
					p := make([]byte, 1)
					if _, err := rd.ReadAt(p, int64(n-1)); err != nil || p[0] != value[n-1] {
						t.Fatalf("ReadAt(last byte of %q) = %v, %v", name, p, err)
					}
					rd.Close()
				}
			}
		})
	}
}

// resolveExpired: an expired ref is absent to Open, at its expiry instant
// and renewed by nothing.
func resolveExpired(t *testing.T, h Harness) {
	b := setup(t, h)
	value := testValue("resolve expired", 10)
	key := mustPut(t, b.store, value)
	set := mustSet(t, b.refs, "exp/a", key, ref.SetOptions{TTL: time.Minute})
	b.clock.Set(set.Expiry)
	for _, ttl := range []time.Duration{0, time.Hour} {
		_, rd, err := b.refs.Open(t.Context(), "exp/a", ttl)
		wantErr(t, err, steaderr.ErrNotFound, fmt.Sprint("Open of an expired ref, ttl ", ttl))
		if rd != nil {
			t.Fatal("Open of an expired ref returned a reader")
		}
	}
	_, _, err := b.refs.Open(t.Context(), "exp/never-set", 0)
	wantErr(t, err, steaderr.ErrNotFound, "Open of an absent ref")
	_, err = b.refs.Get(t.Context(), "exp/a")
	wantErr(t, err, steaderr.ErrNotFound, "Get of the expired ref after Open")
}

// resolveWeakGone: a weak ref whose key a sweep, or a Delete, removed is
// absent to Open, as to Get.
func resolveWeakGone(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	swept, deleted := testValue("resolve weak swept", 10), testValue("resolve weak deleted", 10)
	ks, kd := mustPut(t, b.store, swept), mustPut(t, b.store, deleted)
	mustSet(t, b.refs, "weak/swept", ks, ref.SetOptions{Weak: true})
	mustSet(t, b.refs, "weak/deleted", kd, ref.SetOptions{Weak: true})
	mustOpen(t, b.refs, "weak/swept", 0, ks, swept)
	b.expirePins()
	if err := b.store.Delete(ctx, kd); err != nil {
		t.Fatalf("Delete of a key only a weak ref names: %v", err)
	}
	_, _, err := b.refs.Open(ctx, "weak/deleted", 0)
	wantErr(t, err, steaderr.ErrNotFound, "Open of a weak ref whose key was deleted")
	b.sweep(t)
	b.clock.Advance(testGrace)
	b.sweep(t)
	if has, err := b.store.Has(ctx, ks); err != nil || has {
		t.Fatalf("the swept key is stored: %v, %v", has, err)
	}
	_, _, err = b.refs.Open(ctx, "weak/swept", time.Hour)
	wantErr(t, err, steaderr.ErrNotFound, "Open of a weak ref whose key was swept")
}

// resolveLazy: Open with a TTL renews like GetTouch: only a ref with less
// than half of it left, keeping its version; without a TTL, or for a ref
// without expiry, it renews nothing.
func resolveLazy(t *testing.T, h Harness) {
	b := setup(t, h)
	value := testValue("resolve lazy", 10)
	key := mustPut(t, b.store, value)
	set := mustSet(t, b.refs, "lazy/a", key, ref.SetOptions{TTL: time.Hour})
	forever := mustSet(t, b.refs, "lazy/forever", key, ref.SetOptions{})
	b.clock.Advance(29 * time.Minute)
	if got := mustOpen(t, b.refs, "lazy/a", time.Hour, key, value); !got.Expiry.Equal(set.Expiry) || got.Version != set.Version {
		t.Fatalf("Open with more than half the TTL left = %+v, want it unchanged: %+v", got, set)
	}
	wantRef(t, b.refs, "lazy/a", set)
	b.clock.Advance(2 * time.Minute)
	if got := mustOpen(t, b.refs, "lazy/a", 0, key, value); !got.Expiry.Equal(set.Expiry) {
		t.Fatalf("Open without a TTL = %+v, want it unchanged: %+v", got, set)
	}
	renewed := set
	renewed.Expiry = b.clock.Now().Add(time.Hour)
	if got := mustOpen(t, b.refs, "lazy/a", time.Hour, key, value); !got.Expiry.Equal(renewed.Expiry) || got.Version != set.Version {
		t.Fatalf("Open with less than half the TTL left = %+v, want renewed to %v, same version", got, renewed.Expiry)
	}
	wantRef(t, b.refs, "lazy/a", renewed)
	if got := mustOpen(t, b.refs, "lazy/forever", time.Second, key, value); !got.Expiry.IsZero() || got.Version != forever.Version {
		t.Fatalf("Open of a ref without expiry = %+v, want it unchanged", got)
	}
	b.clock.Set(renewed.Expiry)
	_, _, err := b.refs.Open(t.Context(), "lazy/a", time.Hour)
	wantErr(t, err, steaderr.ErrNotFound, "Open renewing an expired ref")
}

// resolveRacesSweep re-points a ref from key to key, each new key's pin
// lapsed and the old key arbitrated as soon as the ref has left it, while
// readers open the ref: every Open finds the ref (it is never absent) and
// reads the bytes of the key it names, never another's.
func resolveRacesSweep(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	g := b.eng.GC()
	lease := sweepLease(t, g)
	rounds := 40
	if testing.Short() {
		rounds = 15
	}
	prev := mustPut(t, b.store, testValue("resolve race 0", 10))
	mustSet(t, b.refs, "race/ref", prev, ref.SetOptions{})
	var stop atomic.Bool
	var opened atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				r, rd, err := b.refs.Open(ctx, "race/ref", 0)
				if err != nil {
					errs <- fmt.Errorf("Open of a live ref: %w", err)
					return
				}
				got, err := io.ReadAll(rd)
				rd.Close()
				if err != nil || blob.KeyOf(got) != r.Key {
					errs <- fmt.Errorf("Open = %+v reading %d bytes hashing to %s (%v)", r, len(got), blob.KeyOf(got), err)
					return
				}
				opened.Add(1)
			}
		})
	}
	for i := 1; i <= rounds && len(errs) == 0; i++ {
		// An Open finishes between rounds, so that opens overlap moves.
		for at := opened.Load(); opened.Load() == at && len(errs) == 0; {
			runtime.Gosched()
		}
		key := mustPut(t, b.store, testValue(fmt.Sprint("resolve race ", i), 10))
		mustSet(t, b.refs, "race/ref", key, ref.SetOptions{})
		b.expirePins()
		vs, err := g.Arbitrate(ctx, gc.ArbitrateParams{Keys: []blob.Key{prev}, Now: b.clock.Now(), Lease: lease})
		if err != nil || len(vs) != 1 || vs[0].Outcome != blob.Deleted {
			t.Fatalf("round %d: Arbitrate of the key the ref left = %+v, %v; want it deleted", i, vs, err)
		}
		prev = key
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if opened.Load() == 0 {
		t.Fatal("no Open finished")
	}
}

// resolveRefused: bad input, a cancelled context, a store reading no
// blobs and a closed engine are refused, nothing renewed.
func resolveRefused(t *testing.T, h Harness) {
	b := setup(t, h)
	ctx := t.Context()
	key := mustPut(t, b.store, testValue("resolve refused", 10))
	set := mustSet(t, b.refs, "refused/a", key, ref.SetOptions{TTL: time.Hour})
	b.clock.Advance(45 * time.Minute)
	for _, name := range []string{"", "a//b", "../x", "x/.", "nul\x00", "\xff", strings.Repeat("n", ref.MaxNameLen+1)} {
		_, _, err := b.refs.Open(ctx, name, 0)
		wantErr(t, err, steaderr.ErrInvalidName, fmt.Sprintf("Open(%.20q)", name))
	}
	_, _, err := b.refs.Open(ctx, "refused/a", -time.Second)
	wantErr(t, err, steaderr.ErrInvalidArgument, "Open with a negative TTL")
	_, _, err = b.refs.Open(ctx, "refused/a", time.Nanosecond)
	wantErr(t, err, steaderr.ErrInvalidArgument, "Open with a TTL under 1µs")
	_, _, err = b.refs.Open(cancelled(t), "refused/a", time.Hour)
	wantErr(t, err, context.Canceled, "Open with a cancelled context")
	_, _, err = ref.NewStore(b.eng.Refs(), ref.Options{Now: b.clock.Now}).Open(ctx, "refused/a", 0)
	wantErr(t, err, steaderr.ErrInvalidArgument, "Open on a ref store reading no blobs")
	wantRef(t, b.refs, "refused/a", set)
	b.eng.Close()
	_, _, err = b.refs.Open(ctx, "refused/a", time.Hour)
	wantErr(t, err, steaderr.ErrClosed, "Open after Close")
	if _, _, err := b.eng.Refs().Resolve(ctx, ref.ResolveParams{Name: "refused/a"}); !errors.Is(err, steaderr.ErrClosed) {
		t.Fatalf("Resolve after Close = %v, want ErrClosed", err)
	}
}
