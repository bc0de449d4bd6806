package enginetest

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// testRef covers refs: versions and their conditions, expiry, annotations,
// names, listing, and what a ref keeps.
func testRef(t *testing.T, h Harness) {
	runTests(t, h, []suiteTest{
		{"Versions", refVersions},
		{"Expiry", refExpiry},
		{"Created", refCreated},
		{"Annotation", refAnnotation},
		{"Names", refNames},
		{"List", refList},
		{"MissingBlob", refMissingBlob},
		{"Keeps", refKeeps},
		{"RacesArbitration", refRacesArbitration},
		{"Weak", refWeak},
		{"WeakGone", refWeakGone},
		{"WeakRacesArbitration", refWeakRacesArbitration},
		{"Metamorphic", refMetamorphic},
		{"Closed", refClosed},
	})
}

func mustSet(t *testing.T, s *ref.Store, name string, key blob.Key, opts ref.SetOptions) ref.Ref {
	t.Helper()
	r, err := s.Set(t.Context(), name, key, opts)
	if err != nil {
		t.Fatalf("Set(%q, %s, %+v): %v", name, key, opts, err)
	}
	if r.Name != name || r.Key != key || r.Version < 1 || r.Weak != opts.Weak {
		t.Fatalf("Set(%q, %s) = %+v", name, key, r)
	}
	return r
}

// wantRef checks that Get(name) answers want.
func wantRef(t *testing.T, s *ref.Store, name string, want ref.Ref) {
	t.Helper()
	got, err := s.Get(t.Context(), name)
	if err != nil {
		t.Fatalf("Get(%q): %v", name, err)
	}
	if got.Name != want.Name || got.Key != want.Key || got.Version != want.Version || got.Weak != want.Weak || !bytes.Equal(got.Annotation, want.Annotation) || !got.Expiry.Equal(want.Expiry) {
		t.Fatalf("Get(%q) = %+v, want %+v", name, got, want)
	}
}

func refVersions(t *testing.T, h Harness) {
	b := setup(t, h)
	ctx := t.Context()
	k1, k2 := mustPut(t, b.store, testValue("ref v1", 10)), mustPut(t, b.store, testValue("ref v2", 11))
	r1 := mustSet(t, b.refs, "tags/v", k1, ref.SetOptions{})
	wantRef(t, b.refs, "tags/v", r1)
	// Create-only fails on a live ref and changes nothing.
	_, err := b.refs.Set(ctx, "tags/v", k2, ref.SetOptions{IfAbsent: true})
	wantErr(t, err, steaderr.ErrConflict, "Set IfAbsent over a live ref")
	wantRef(t, b.refs, "tags/v", r1)
	// A swap needs the live version.
	_, err = b.refs.Set(ctx, "tags/v", k2, ref.SetOptions{IfVersion: r1.Version + 1000})
	wantErr(t, err, steaderr.ErrConflict, "Set with a stale version")
	wantRef(t, b.refs, "tags/v", r1)
	r2 := mustSet(t, b.refs, "tags/v", k2, ref.SetOptions{IfVersion: r1.Version})
	if r2.Version <= r1.Version {
		t.Fatalf("a swap's version %d is not after %d", r2.Version, r1.Version)
	}
	_, err = b.refs.Set(ctx, "tags/v", k1, ref.SetOptions{IfVersion: r1.Version})
	wantErr(t, err, steaderr.ErrConflict, "a second swap from the same version")
	r3 := mustSet(t, b.refs, "tags/v", k1, ref.SetOptions{}) // unconditional
	// A swap of an absent name fails; a create of it succeeds.
	_, err = b.refs.Set(ctx, "tags/none", k1, ref.SetOptions{IfVersion: r3.Version})
	wantErr(t, err, steaderr.ErrConflict, "a swap of an absent ref")
	if _, err := b.refs.Get(ctx, "tags/none"); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("a failed swap created the ref: %v", err)
	}
	// Delete: conditional, then not; a deleted name set again gets a
	// version never handed out before.
	wantErr(t, b.refs.Delete(ctx, "tags/v", r1.Version), steaderr.ErrConflict, "Delete with a stale version")
	wantRef(t, b.refs, "tags/v", r3)
	if err := b.refs.Delete(ctx, "tags/v", r3.Version); err != nil {
		t.Fatalf("Delete with the live version: %v", err)
	}
	_, err = b.refs.Get(ctx, "tags/v")
	wantErr(t, err, steaderr.ErrNotFound, "Get after Delete")
	wantErr(t, b.refs.Delete(ctx, "tags/v", 0), steaderr.ErrNotFound, "second Delete")
	r4 := mustSet(t, b.refs, "tags/v", k2, ref.SetOptions{IfAbsent: true})
	if r4.Version <= r3.Version {
		t.Fatalf("a ref set again after Delete got version %d, not after %d: a stale swap could match it", r4.Version, r3.Version)
	}
	if err := b.refs.Delete(ctx, "tags/v", 0); err != nil {
		t.Fatalf("unconditional Delete: %v", err)
	}
	// Bad options change nothing.
	for _, opts := range []ref.SetOptions{
		{IfAbsent: true, IfVersion: 1},
		{IfVersion: -1},
		{TTL: -time.Second},
		{TTL: time.Nanosecond},
	} {
		_, err := b.refs.Set(ctx, "tags/bad", k1, opts)
		wantErr(t, err, steaderr.ErrInvalidArgument, fmt.Sprintf("Set with %+v", opts))
	}
	wantErr(t, b.refs.Delete(ctx, "tags/bad", -1), steaderr.ErrInvalidArgument, "Delete with a negative version")
	if page, err := b.refs.List(ctx, "", "", 10); err != nil || len(page) != 0 {
		t.Fatalf("List after bad calls = %v, %v; want nothing", page, err)
	}
}

func refExpiry(t *testing.T, h Harness) {
	b := setup(t, h)
	ctx := t.Context()
	key := mustPut(t, b.store, testValue("ref expiry", 10))
	t0 := b.clock.Now()
	r := mustSet(t, b.refs, "cache/a", key, ref.SetOptions{TTL: time.Minute})
	if !r.Expiry.Equal(t0.Add(time.Minute)) {
		t.Fatalf("expiry %v, want now + 1m = %v", r.Expiry, t0.Add(time.Minute))
	}
	forever := mustSet(t, b.refs, "cache/forever", key, ref.SetOptions{})
	b.clock.Advance(time.Minute - time.Microsecond)
	wantRef(t, b.refs, "cache/a", r)
	// GetTouch leaves a ref with more than half its TTL left alone, and
	// renews one with less.
	if got, err := b.refs.GetTouch(ctx, "cache/a", time.Hour); err != nil || !got.Expiry.Equal(b.clock.Now().Add(time.Hour)) || got.Version != r.Version {
		t.Fatalf("GetTouch with less than half the TTL left = %+v, %v; want renewed to now + 1h, same version", got, err)
	}
	renewed := b.clock.Now().Add(time.Hour)
	b.clock.Advance(time.Minute)
	if got, err := b.refs.GetTouch(ctx, "cache/a", time.Hour); err != nil || !got.Expiry.Equal(renewed) {
		t.Fatalf("GetTouch with more than half the TTL left = %+v, %v; want untouched, expiring %v", got, err, renewed)
	}
	// Touch keeps the version; a ref without expiry keeps none.
	if got, err := b.refs.Touch(ctx, "cache/forever", time.Second); err != nil || !got.Expiry.IsZero() || got.Version != forever.Version {
		t.Fatalf("Touch of a ref without expiry = %+v, %v; want it unchanged", got, err)
	}
	if _, err := b.refs.Touch(ctx, "cache/a", 0); !errors.Is(err, steaderr.ErrInvalidArgument) {
		t.Fatalf("Touch with no TTL = %v, want ErrInvalidArgument", err)
	}
	// Expired at its expiry instant: absent to every call, never renewed.
	b.clock.Set(renewed)
	_, err := b.refs.Get(ctx, "cache/a")
	wantErr(t, err, steaderr.ErrNotFound, "Get at the expiry instant")
	_, err = b.refs.Touch(ctx, "cache/a", time.Hour)
	wantErr(t, err, steaderr.ErrNotFound, "Touch of an expired ref")
	wantErr(t, b.refs.Delete(ctx, "cache/a", 0), steaderr.ErrNotFound, "Delete of an expired ref")
	if page, err := b.refs.List(ctx, "cache/", "", 10); err != nil || len(page) != 1 || page[0].Name != "cache/forever" {
		t.Fatalf("List with an expired ref = %+v, %v; want only the one without expiry", page, err)
	}
	// An expired name is free to create, and to swap no more.
	_, err = b.refs.Set(ctx, "cache/a", key, ref.SetOptions{IfVersion: r.Version})
	wantErr(t, err, steaderr.ErrConflict, "a swap of an expired ref")
	again := mustSet(t, b.refs, "cache/a", key, ref.SetOptions{IfAbsent: true})
	if again.Version <= r.Version || !again.Expiry.IsZero() {
		t.Fatalf("a ref created over an expired one = %+v", again)
	}
}

// refCreated checks that Set reports whether it created the name: a set
// of an absent or expired name creates it, one over a live ref replaces
// it, whatever the condition.
func refCreated(t *testing.T, h Harness) {
	b := setup(t, h)
	ctx := t.Context()
	key := mustPut(t, b.store, testValue("ref created", 10))
	set := func(name string, opts ref.SetOptions, want bool) ref.Ref {
		t.Helper()
		r := mustSet(t, b.refs, name, key, opts)
		if r.Created != want {
			t.Fatalf("Set(%q, %+v).Created = %v, want %v", name, opts, r.Created, want)
		}
		return r
	}
	r := set("c/a", ref.SetOptions{}, true)
	r = set("c/a", ref.SetOptions{}, false)
	set("c/a", ref.SetOptions{IfVersion: r.Version}, false)
	set("c/b", ref.SetOptions{IfAbsent: true}, true)
	set("c/e", ref.SetOptions{TTL: time.Second}, true)
	b.clock.Advance(time.Second)
	set("c/e", ref.SetOptions{}, true)
	if err := b.refs.Delete(ctx, "c/b", 0); err != nil {
		t.Fatal(err)
	}
	set("c/b", ref.SetOptions{Weak: true}, true)
	set("c/b", ref.SetOptions{}, false)
	// Only Set reports a creation.
	if got, err := b.refs.Get(ctx, "c/b"); err != nil || got.Created {
		t.Fatalf("Get = %+v, %v; want Created false", got, err)
	}
}

func refAnnotation(t *testing.T, h Harness) {
	b := setup(t, h)
	ctx := t.Context()
	key := mustPut(t, b.store, testValue("ref annotation", 10))
	full := testValue("annotation", ref.MaxAnnotation)
	for _, a := range [][]byte{nil, {0}, []byte("application/vnd.oci.image.manifest.v1+json"), full} {
		in := bytes.Clone(a)
		r := mustSet(t, b.refs, "ann", key, ref.SetOptions{Annotation: in})
		if len(in) > 0 {
			in[0] ^= 0xff // the store kept its own copy
		}
		if !bytes.Equal(r.Annotation, a) {
			t.Fatalf("Set answered annotation %d bytes, want %d", len(r.Annotation), len(a))
		}
		got, err := b.refs.Get(ctx, "ann")
		if err != nil || !bytes.Equal(got.Annotation, a) {
			t.Fatalf("Get annotation = %d bytes, %v; want %d", len(got.Annotation), err, len(a))
		}
		if len(got.Annotation) > 0 {
			got.Annotation[0] ^= 0xff // a copy: the stored one stays
			wantRef(t, b.refs, "ann", r)
		}
	}
	before, _ := b.refs.Get(ctx, "ann")
	_, err := b.refs.Set(ctx, "ann", key, ref.SetOptions{Annotation: append(full, 0)})
	wantErr(t, err, steaderr.ErrInvalidArgument, "Set with an annotation over the limit")
	wantRef(t, b.refs, "ann", before)
}

func refNames(t *testing.T, h Harness) {
	b := setup(t, h)
	ctx := t.Context()
	key := mustPut(t, b.store, testValue("ref names", 10))
	good := []string{
		"v", `'; DROP TABLE refs; --`, `quo"te/ba\ck`, "ünïcödé/✓/🦀", "a/b/c/d/e", "%2F/%00", "...", ".x",
		strings.Repeat("n", ref.MaxNameLen), "x/" + strings.Repeat("é", (ref.MaxNameLen-2)/2),
	}
	for _, name := range good {
		r := mustSet(t, b.refs, name, key, ref.SetOptions{})
		wantRef(t, b.refs, name, r)
	}
	for _, name := range []string{"", strings.Repeat("n", ref.MaxNameLen+1), "bad\xffutf8", "tab\tname", "nul\x00", "/lead", "trail/", "a//b", "a/./b", "a/../b", "..", "\u0085next-line"} {
		_, err := b.refs.Set(ctx, name, key, ref.SetOptions{})
		wantErr(t, err, steaderr.ErrInvalidName, fmt.Sprintf("Set(%q)", name))
		_, err = b.refs.Get(ctx, name)
		wantErr(t, err, steaderr.ErrInvalidName, fmt.Sprintf("Get(%q)", name))
		wantErr(t, b.refs.Delete(ctx, name, 0), steaderr.ErrInvalidName, fmt.Sprintf("Delete(%q)", name))
	}
	_, err := b.refs.Set(ctx, "zero", blob.Key{}, ref.SetOptions{})
	wantErr(t, err, steaderr.ErrInvalidKey, "Set to the zero key")
	var names []string
	for r, err := range b.refs.All(ctx, "") {
		if err != nil {
			t.Fatalf("All: %v", err)
		}
		names = append(names, r.Name)
	}
	want := slices.Sorted(slices.Values(good))
	if !slices.Equal(names, want) {
		t.Fatalf("All = %q, want exactly the good names in byte order %q", names, want)
	}
}

func refList(t *testing.T, h Harness) {
	b := setup(t, h)
	ctx := t.Context()
	key := mustPut(t, b.store, testValue("ref list", 10))
	names := []string{"a", "a/b", "a/c", "a0", "ab", "b/x", "é/1", "é/2", "ê", "\U0010FFFF/z"}
	for _, n := range names {
		mustSet(t, b.refs, n, key, ref.SetOptions{})
	}
	list := func(prefix, after string, limit int) []string {
		t.Helper()
		page, err := b.refs.List(ctx, prefix, after, limit)
		if err != nil {
			t.Fatalf("List(%q, %q, %d): %v", prefix, after, limit, err)
		}
		var out []string
		for _, r := range page {
			out = append(out, r.Name)
		}
		return out
	}
	for _, tc := range []struct {
		prefix, after string
		limit         int
		want          []string
	}{
		{"", "", 100, names},
		{"", "", math.MaxInt, names},
		{"a", "", 100, []string{"a", "a/b", "a/c", "a0", "ab"}},
		{"a/", "", 100, []string{"a/b", "a/c"}},
		{"a", "a/b", 2, []string{"a/c", "a0"}},
		{"é/", "", 100, []string{"é/1", "é/2"}},
		{"\U0010FFFF", "", 100, []string{"\U0010FFFF/z"}},
		{"", "b/x", 3, []string{"é/1", "é/2", "ê"}},
		{"zz", "", 100, nil},
	} {
		if got := list(tc.prefix, tc.after, tc.limit); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q, %q, %d) = %q, want %q", tc.prefix, tc.after, tc.limit, got, tc.want)
		}
	}
	_, err := b.refs.List(ctx, "", "", 0)
	wantErr(t, err, steaderr.ErrInvalidArgument, "List with limit 0")
	_, err = b.refs.List(ctx, "bad\xff", "", 1)
	wantErr(t, err, steaderr.ErrInvalidName, "List with a bad prefix")
	var all []string
	for r, err := range b.refs.All(ctx, "a") {
		if err != nil {
			t.Fatalf("All: %v", err)
		}
		all = append(all, r.Name)
	}
	if want := []string{"a", "a/b", "a/c", "a0", "ab"}; !slices.Equal(all, want) {
		t.Fatalf("All(a) = %q, want %q", all, want)
	}
}

func refMissingBlob(t *testing.T, h Harness) {
	b := setup(t, h)
	ctx := t.Context()
	_, err := b.refs.Set(ctx, "dangling", absentKey("ref"), ref.SetOptions{})
	wantErr(t, err, steaderr.ErrNotFound, "Set to a blob not stored")
	_, err = b.refs.Get(ctx, "dangling")
	wantErr(t, err, steaderr.ErrNotFound, "Get of a ref whose Set failed")
	// A weak ref is refused the same: it never names a blob already gone.
	_, err = b.refs.Set(ctx, "dangling", absentKey("ref"), ref.SetOptions{Weak: true})
	wantErr(t, err, steaderr.ErrNotFound, "weak Set to a blob not stored")
	_, err = b.refs.Get(ctx, "dangling")
	wantErr(t, err, steaderr.ErrNotFound, "Get of a weak ref whose Set failed")
}

func refKeeps(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	col := gc.New(b.eng.GC(), gc.Options{Grace: testGrace, Now: b.clock.Now}) // refuses a store with nothing declared
	named := mustPut(t, b.store, testValue("kept by a ref", 10))
	cached := mustPut(t, b.store, testValue("kept by an expiring ref", 11))
	loose := mustPut(t, b.store, testValue("kept by nothing", 12))
	if _, err := col.Sweep(ctx, gc.SweepOptions{}); !errors.Is(err, steaderr.ErrProtected) {
		t.Fatalf("a sweep before any ref = %v, want refused: nothing declares liveness", err)
	}
	mustSet(t, b.refs, "tags/kept", named, ref.SetOptions{})
	mustSet(t, b.refs, "cache/entry", cached, ref.SetOptions{TTL: 4 * blob.DefaultPinTTL})
	b.expirePins()
	sweep := func() gc.Report {
		t.Helper()
		rep, err := col.Sweep(ctx, gc.SweepOptions{})
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		return rep
	}
	if rep := sweep(); rep.Staged != 1 {
		t.Fatalf("sweep = %+v, want only the loose blob staged", rep)
	}
	if x, err := col.Explain(ctx, named); err != nil || len(x.Refs) != 1 || x.Refs[0].Name != "tags/kept" || !strings.Contains(x.Verdict(), `ref "tags/kept"`) {
		t.Fatalf("Explain of a ref's key = %+v (%s), %v; want the ref named", x, x.Verdict(), err)
	}
	b.clock.Advance(testGrace)
	if rep := sweep(); rep.Deleted != 1 {
		t.Fatalf("sweep = %+v, want the loose blob deleted", rep)
	}
	wantHas(t, b.store, loose, false)
	wantErr(t, b.store.Delete(ctx, named), steaderr.ErrProtected, "Delete of a key a ref names")
	// The expiring ref lapses: it is reaped, and its key goes.
	b.clock.Advance(4 * blob.DefaultPinTTL)
	if rep := sweep(); rep.ReapedRefs != 1 || rep.Staged != 1 {
		t.Fatalf("sweep after the ref expired = %+v, want it reaped and its key staged", rep)
	}
	b.clock.Advance(testGrace)
	if rep := sweep(); rep.Deleted != 1 {
		t.Fatalf("sweep a grace later = %+v, want the expired ref's key deleted", rep)
	}
	wantHas(t, b.store, cached, false)
	wantHas(t, b.store, named, true)
	// Deleting the last ref lets its key go (to a sweep told that nothing
	// declared is left).
	if err := b.refs.Delete(ctx, "tags/kept", 0); err != nil {
		t.Fatalf("Delete ref: %v", err)
	}
	b.clock.Advance(testGrace)
	if rep := b.sweep(t); rep.Staged != 1 {
		t.Fatalf("sweep after the ref was deleted = %+v, want its key staged", rep)
	}
	b.clock.Advance(testGrace)
	if rep := b.sweep(t); rep.Deleted != 1 {
		t.Fatalf("sweep a grace later = %+v, want its key deleted", rep)
	}
	wantNothingStored(t, b.store)
}

// refRacesArbitration sets a ref to a key while an arbitration of that
// key runs: either the Set wins (the blob stays) or the arbitration wins
// (the Set fails with ErrNotFound); never both succeed.
func refRacesArbitration(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	g := b.eng.GC()
	lease := sweepLease(t, g)
	rounds := 30
	if testing.Short() {
		rounds = 10
	}
	for i := range rounds {
		key := mustPut(t, b.store, testValue(fmt.Sprint("ref race ", i), 10))
		b.expirePins()
		var wg sync.WaitGroup
		var setErr, arbErr error
		var vs []blob.Verdict
		name := fmt.Sprint("race/", i)
		wg.Go(func() { _, setErr = b.refs.Set(ctx, name, key, ref.SetOptions{}) })
		wg.Go(func() {
			vs, arbErr = g.Arbitrate(ctx, gc.ArbitrateParams{Keys: []blob.Key{key}, Now: b.clock.Now(), Lease: lease})
		})
		wg.Wait()
		if arbErr != nil {
			t.Fatalf("Arbitrate: %v", arbErr)
		}
		has, err := b.store.Has(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case setErr == nil && !has:
			t.Fatalf("round %d: the ref was set and its blob deleted (%+v)", i, vs)
		case setErr != nil && !errors.Is(setErr, steaderr.ErrNotFound):
			t.Fatalf("round %d: Set: %v", i, setErr)
		case setErr != nil && has:
			t.Fatalf("round %d: Set failed (%v) though the blob stayed (%+v)", i, setErr, vs)
		}
	}
}

func refClosed(t *testing.T, h Harness) {
	b := setup(t, h)
	key := mustPut(t, b.store, testValue("ref closed", 10))
	mustSet(t, b.refs, "closed", key, ref.SetOptions{})
	b.eng.Close()
	ctx := t.Context()
	_, err := b.refs.Set(ctx, "closed", key, ref.SetOptions{})
	wantErr(t, err, steaderr.ErrClosed, "Set after Close")
	_, err = b.refs.Get(ctx, "closed")
	wantErr(t, err, steaderr.ErrClosed, "Get after Close")
	_, err = b.refs.Touch(ctx, "closed", time.Second)
	wantErr(t, err, steaderr.ErrClosed, "Touch after Close")
	wantErr(t, b.refs.Delete(ctx, "closed", 0), steaderr.ErrClosed, "Delete after Close")
	_, err = b.refs.List(ctx, "", "", 1)
	wantErr(t, err, steaderr.ErrClosed, "List after Close")
}

// refWeak: a weak ref names its key without keeping it. Alone it lets a
// sweep take the key, and goes with it; beside a strong ref, or set strong
// again, the key stays. It is listed, read and explained as weak.
func refWeak(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	// A store whose only refs are weak has declared its liveness in refs.
	col := gc.New(b.eng.GC(), gc.Options{Grace: testGrace, Now: b.clock.Now})
	alone := mustPut(t, b.store, testValue("weak alone", 10))
	shared := mustPut(t, b.store, testValue("weak beside a strong ref", 11))
	upgraded := mustPut(t, b.store, testValue("weak, then strong", 12))
	weakAlone := mustSet(t, b.refs, "links/alone", alone, ref.SetOptions{Weak: true, Annotation: []byte("a")})
	wantRef(t, b.refs, "links/alone", weakAlone)
	weakShared := mustSet(t, b.refs, "links/shared", shared, ref.SetOptions{Weak: true})
	mustSet(t, b.refs, "tags/shared", shared, ref.SetOptions{})
	up := mustSet(t, b.refs, "links/upgraded", upgraded, ref.SetOptions{Weak: true})
	strong := mustSet(t, b.refs, "links/upgraded", upgraded, ref.SetOptions{IfVersion: up.Version})
	wantRef(t, b.refs, "links/upgraded", strong)
	// A Touch keeps a ref weak.
	expiring := mustSet(t, b.refs, "links/expiring", alone, ref.SetOptions{Weak: true, TTL: 8 * blob.DefaultPinTTL})
	if r, err := b.refs.Touch(ctx, "links/expiring", 8*blob.DefaultPinTTL); err != nil || !r.Weak || r.Version != expiring.Version {
		t.Fatalf("Touch of a weak ref = %+v, %v; want it weak, version %d", r, err, expiring.Version)
	}
	page, err := b.refs.List(ctx, "links/", "", 10)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var listed []string
	for _, r := range page {
		listed = append(listed, fmt.Sprintf("%s weak=%v", r.Name, r.Weak))
	}
	if want := []string{"links/alone weak=true", "links/expiring weak=true", "links/shared weak=true", "links/upgraded weak=false"}; !slices.Equal(listed, want) {
		t.Fatalf("List = %q, want %q", listed, want)
	}
	b.expirePins()
	x, err := col.Explain(ctx, alone)
	if err != nil || len(x.Refs) != 2 || !x.Refs[0].Weak || x.Refs[0].Name != "links/alone" || !strings.HasPrefix(x.Verdict(), "unprotected") || !strings.Contains(x.Verdict(), `weak ref "links/alone"`) {
		t.Fatalf("Explain of a key only weak refs name = %+v (%s), %v; want unprotected, the weak refs named", x, x.Verdict(), err)
	}
	if x, err := col.Explain(ctx, shared); err != nil || !strings.HasPrefix(x.Verdict(), `kept: named by ref "tags/shared"`) || !strings.Contains(x.Verdict(), `weak ref "links/shared"`) {
		t.Fatalf("Explain of a key a strong and a weak ref name = %+v (%s), %v; want kept by the strong one", x, x.Verdict(), err)
	}
	rep, err := col.Sweep(ctx, gc.SweepOptions{})
	if err != nil || rep.Staged != 1 {
		t.Fatalf("sweep = %+v, %v; want only the key weak refs alone name staged", rep, err)
	}
	b.clock.Advance(testGrace)
	if rep, err := col.Sweep(ctx, gc.SweepOptions{}); err != nil || rep.Deleted != 1 {
		t.Fatalf("sweep a grace later = %+v, %v; want it deleted", rep, err)
	}
	wantHas(t, b.store, alone, false)
	wantHas(t, b.store, shared, true)
	wantHas(t, b.store, upgraded, true)
	// The weak refs went with their key: absent, as a deleted ref.
	for _, name := range []string{"links/alone", "links/expiring"} {
		_, err = b.refs.Get(ctx, name)
		wantErr(t, err, steaderr.ErrNotFound, "Get of a weak ref whose key was swept")
	}
	if page, err := b.refs.List(ctx, "links/a", "", 10); err != nil || len(page) != 0 {
		t.Fatalf("List after the sweep = %+v, %v; want no weak ref of the swept key", page, err)
	}
	wantRef(t, b.refs, "links/shared", weakShared)
	// Nor does a weak ref keep its key from a Delete.
	if err := b.refs.Delete(ctx, "tags/shared", 0); err != nil {
		t.Fatalf("Delete ref: %v", err)
	}
	if err := b.store.Delete(ctx, shared); err != nil {
		t.Fatalf("Delete of a key only a weak ref names: %v", err)
	}
	_, err = b.refs.Get(ctx, "links/shared")
	wantErr(t, err, steaderr.ErrNotFound, "Get of a weak ref whose key was deleted")
}

// refWeakGone: a weak ref whose key was collected reads as absent, and its
// name is free: a create-only Set takes it once the key is put again.
func refWeakGone(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	value := testValue("weak gone", 10)
	key := mustPut(t, b.store, value)
	mustSet(t, b.refs, "links/gone", key, ref.SetOptions{Weak: true})
	b.expirePins()
	b.sweep(t)
	b.clock.Advance(testGrace)
	if rep := b.sweep(t); rep.Deleted != 1 {
		t.Fatalf("sweep = %+v, want the key deleted", rep)
	}
	_, err := b.refs.Get(ctx, "links/gone")
	wantErr(t, err, steaderr.ErrNotFound, "Get of a weak ref whose key was swept")
	_, err = b.refs.Touch(ctx, "links/gone", time.Hour)
	wantErr(t, err, steaderr.ErrNotFound, "Touch of a weak ref whose key was swept")
	wantErr(t, b.refs.Delete(ctx, "links/gone", 0), steaderr.ErrNotFound, "Delete of a weak ref whose key was swept")
	_, err = b.refs.Set(ctx, "links/gone", key, ref.SetOptions{Weak: true})
	wantErr(t, err, steaderr.ErrNotFound, "weak Set to the swept key")
	mustPut(t, b.store, value)
	mustSet(t, b.refs, "links/gone", key, ref.SetOptions{Weak: true, IfAbsent: true})
}

// refWeakRacesArbitration sets a ref over a weak one (strong: the upgrade,
// or weak: a relink) while an arbitration of its key runs: either the Set
// commits first (a strong ref keeps the blob; a weak one goes with it) or
// the arbitration does (the Set fails with ErrNotFound, and the weak ref
// went with the blob); never a ref to a swept blob.
func refWeakRacesArbitration(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	g := b.eng.GC()
	lease := sweepLease(t, g)
	rounds := 30
	if testing.Short() {
		rounds = 10
	}
	for i := range rounds {
		key := mustPut(t, b.store, testValue(fmt.Sprint("weak race ", i), 10))
		name := fmt.Sprint("race/", i)
		mustSet(t, b.refs, name, key, ref.SetOptions{Weak: true})
		b.expirePins()
		weak := i%2 == 1
		var wg sync.WaitGroup
		var setErr, arbErr error
		var vs []blob.Verdict
		wg.Go(func() { _, setErr = b.refs.Set(ctx, name, key, ref.SetOptions{Weak: weak}) })
		wg.Go(func() {
			vs, arbErr = g.Arbitrate(ctx, gc.ArbitrateParams{Keys: []blob.Key{key}, Now: b.clock.Now(), Lease: lease})
		})
		wg.Wait()
		if arbErr != nil {
			t.Fatalf("Arbitrate: %v", arbErr)
		}
		has, err := b.store.Has(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got, getErr := b.refs.Get(ctx, name)
		switch {
		case setErr != nil && !errors.Is(setErr, steaderr.ErrNotFound):
			t.Fatalf("round %d: Set: %v", i, setErr)
		case !has && !errors.Is(getErr, steaderr.ErrNotFound):
			t.Fatalf("round %d: the blob was deleted (%+v) but its ref stayed: %+v, %v (Set: %v)", i, vs, got, getErr, setErr)
		case setErr == nil && !has && !weak:
			t.Fatalf("round %d: the ref was set strong and its blob deleted (%+v)", i, vs)
		case setErr != nil && has:
			t.Fatalf("round %d: Set failed (%v) though the blob stayed (%+v)", i, setErr, vs)
		case has && (getErr != nil || got.Weak != weak):
			t.Fatalf("round %d: Get after the Set won = %+v, %v; want weak %v", i, got, getErr, weak)
		}
	}
}
