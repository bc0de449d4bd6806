// Package enginetest is the conformance suite every stead engine must pass.
//
// An engine's test calls Run with a Harness that makes engines:
//
//	func TestConformance(t *testing.T) {
//		enginetest.Run(t, enginetest.Harness{
//			New: func(t *testing.T) engine.Engine { ... },
//		})
//	}
//
// The suite drives each engine through the portable layers (blob.Store,
// lock.Store) and,
// where a rule belongs to the engine, through the engine seam directly. It
// never names an engine: a capability the engine lacks is a nil Harness
// field, and the tests for it are skipped. Its metamorphic test replays a
// seeded random operation sequence against the engine and the in-memory
// reference engine and compares every result; set -enginetest.seed to
// replay a failure.
package enginetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/ref"
)

// Harness makes engines for the suite. Optional parts are nil when the
// engine lacks them; the suite then skips those tests (it never names an
// engine).
type Harness struct {
	// Areas, when set, names the parts of the suite to run (Blob, GC,
	// Lock, …; see areas): for a variant of an engine that changes only
	// some of its mechanics. Empty: all of them.
	Areas []string
	// New returns a fresh, migrated, empty engine, closed in t.Cleanup
	// (Close is idempotent, tests may close it early). Required.
	New func(t *testing.T) engine.Engine
	// Virgin returns an engine on a database that was never migrated,
	// closed in t.Cleanup. nil: the engine has no schema.
	Virgin func(t *testing.T) engine.Engine
	// Namespace returns a fresh, migrated, empty engine in the named
	// namespace (PostgreSQL: the schema), closed in t.Cleanup, or an error
	// wrapping steaderr.ErrInvalidName if the name is refused. Engines
	// returned for different names within one test must share one database,
	// so that the suite's isolation check means something; the suite opens
	// each name at most once per test. nil: the engine has no namespaces.
	Namespace func(t *testing.T, name string) (engine.Engine, error)
	// RefTable creates, in eng's database, a table the suite owns named
	// table with a text column named column (the suite passes hostile
	// names), and returns the gc.Source naming it and set, which adds
	// (true) or removes (false) a reference to key. nil: the engine takes
	// Go-function liveness sources, which the suite uses instead.
	RefTable func(t *testing.T, eng engine.Engine, table, column string) (src gc.Source, set func(key blob.Key, referenced bool))
	// CancelMayCommit says a call whose context ends in flight may still
	// have taken effect, as over a network (the remote engine); the suite
	// then cancels no write in flight. Local engines leave it false: a
	// cancelled write changed nothing.
	CancelMayCommit bool
	// NoFuncSources, when set, says why the engine cannot take Go-function
	// liveness sources though it has no RefTable (the remote engine over a
	// server without PostgreSQL: a function cannot cross HTTP). The tests
	// that need a liveness source are then skipped with that reason.
	NoFuncSources string
	// Faulty returns a fresh, migrated, empty engine over an engine whose
	// calls fail when fail says so, closed in t.Cleanup: before each call
	// of an operation op (named as engine/enginetest/faultengine names them, e.g.
	// "blob.Stat"), a non-nil fail(op) is returned in place of the call.
	// For an engine over another (the remote engine), the inner one is
	// failed: the suite then checks that every error comes back as it
	// was. nil: the fault tests are skipped.
	Faulty func(t *testing.T, fail func(op string) error) engine.Engine
	// OneConn returns a fresh, migrated, empty engine as New does but
	// whose connection pool holds one connection, closed in t.Cleanup: the
	// upload tests then check that no call holds a connection while it
	// waits on its caller (an append streaming its source) or on another
	// call. nil: the engine has no pool, and those tests are skipped.
	OneConn func(t *testing.T) engine.Engine
	// ChunkSize is the chunk size of the chunked runs (BlobChunked,
	// GCChunked); 0 means a tiny one. An engine that pays a round trip per
	// chunk (the remote one) sets it larger to keep the suite short; every
	// value over a few bytes is chunked either way.
	ChunkSize int

	// chunked makes setup's stores use tinyInline and a tiny (or
	// ChunkSize) chunk, so that every value over a few bytes takes the
	// chunked path.
	chunked bool
}

// The limits of the chunked run of the blob tests: tiny, so that every test
// value is chunked, and the chunk size no power of two.
const (
	tinyInline = 16
	tinyChunk  = 4000
)

// Run runs the whole suite against h. Subtests call t.Parallel() where
// safe; every test gets engines of its own.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("enginetest: Harness.New is nil")
	}
	run := areas
	if len(h.Areas) > 0 {
		run = nil
		for _, a := range areas {
			if slices.Contains(h.Areas, a.name) {
				run = append(run, a)
			}
		}
		if len(run) != len(h.Areas) {
			t.Fatalf("enginetest: Harness.Areas %q names an area the suite does not have", h.Areas)
		}
	}
	runTests(t, h, run)
}

// TierAreas are the areas a bytes tier changes, for an engine's run with
// one: those that store values over the inline limit (in the chunked
// runs, over a few bytes), so that they read, list, delete and collect
// objects, and Lifecycle, which migrates (the tier's marker) and closes
// (its bucket). The other areas' values are inline: GC's few bytes are
// collected as objects in GCChunked.
var TierAreas = []string{"Blob", "BlobChunked", "GCChunked", "Lifecycle", "RefResolve", "Upload"}

// areas are the suite's parts, one file each.
var areas = []suiteTest{
	{"Blob", testBlob},
	{"BlobChunked", func(t *testing.T, h Harness) { h.chunked = true; testBlob(t, h) }},
	{"GC", testGC},
	{"GCChunked", func(t *testing.T, h Harness) { h.chunked = true; testGC(t, h) }},
	{"Faults", testFaults},
	{"Lifecycle", testLifecycle},
	{"Lock", testLock},
	{"Metamorphic", testMetamorphic},
	{"Overlap", testOverlap},
	{"PutSet", testPutSet},
	{"Record", testRecord},
	{"Ref", testRef},
	{"RefResolve", testRefResolve},
	{"Upload", testUpload},
}

// suiteTest is one named test of the suite.
type suiteTest struct {
	name string
	run  func(t *testing.T, h Harness)
}

// runTests runs each test as a parallel subtest of t.
func runTests(t *testing.T, h Harness, tests []suiteTest) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, h)
		})
	}
}

// bundle is what most tests start from: a fresh engine, its blob seam and
// portable stores over it (locks on the engine's clock).
type bundle struct {
	eng   engine.Engine
	blobs blob.Backend
	store *blob.Store
	locks *lock.Store
	// refs is the ref store, on the blob store's clock.
	refs *ref.Store
	// clock is the store's pin clock: expirePins moves it past every pin
	// the store took.
	clock *clock.Fake
}

// expirePins moves the store's clock past the expiry of every pin it took.
func (b *bundle) expirePins() { b.clock.Advance(2 * blob.DefaultPinTTL) }

// setup returns a bundle over a fresh engine from h.New with default store
// options.
func setup(t *testing.T, h Harness) *bundle {
	t.Helper()
	return setupWith(t, h, blob.Options{})
}

// setupWith returns a bundle over a fresh engine from h.New with opts.
func setupWith(t *testing.T, h Harness, opts blob.Options) *bundle {
	t.Helper()
	if h.chunked {
		opts.InlineLimit, opts.ChunkSize = tinyInline, tinyChunk
		if h.ChunkSize > 0 {
			opts.ChunkSize = h.ChunkSize
		}
	}
	return bundleOf(t, newEngine(t, h), opts)
}

// newEngine returns a fresh engine from h.New, closed when t ends.
func newEngine(t *testing.T, h Harness) engine.Engine {
	t.Helper()
	eng := h.New(t)
	if eng == nil {
		t.Fatal("enginetest: Harness.New returned nil")
	}
	t.Cleanup(func() { _ = eng.Close() })
	return eng
}

// bundleOf wraps eng, closing it when t ends.
func bundleOf(t *testing.T, eng engine.Engine, opts blob.Options) *bundle {
	t.Helper()
	t.Cleanup(func() { _ = eng.Close() })
	fake := clock.NewFake(wholeMicroStart)
	if opts.Now == nil {
		opts.Now = fake.Now
	}
	store := blob.NewStore(eng.Blobs(), opts)
	return &bundle{eng: eng, blobs: eng.Blobs(), store: store, locks: lock.NewStore(eng.Locks(), lock.Options{}),
		refs: ref.NewStore(eng.Refs(), ref.Options{Now: opts.Now, Blobs: store}), clock: fake}
}

// testValue returns n pseudo-random bytes determined by label.
func testValue(label string, n int) []byte {
	v := make([]byte, n)
	_, _ = rand.NewChaCha8(sha256.Sum256([]byte("enginetest value: " + label))).Read(v)
	return v
}

// absentKey returns a valid key no test ever stores.
func absentKey(label string) blob.Key {
	return blob.KeyOf([]byte("enginetest: never stored: " + label))
}

// keyOfDigest returns the key with digest d.
func keyOfDigest(t testing.TB, d [sha256.Size]byte) blob.Key {
	t.Helper()
	key, err := blob.ParseKey("sha256:" + hex.EncodeToString(d[:]))
	if err != nil {
		t.Fatalf("ParseKey of a well-formed digest: %v", err)
	}
	return key
}

// cancelled returns a context that is already cancelled.
func cancelled(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}

func mustPut(t *testing.T, s *blob.Store, value []byte) blob.Key {
	t.Helper()
	key, err := s.Put(t.Context(), bytes.NewReader(value))
	if err != nil {
		t.Fatalf("Put(%d bytes): %v", len(value), err)
	}
	if want := blob.KeyOf(value); key != want {
		t.Fatalf("Put(%d bytes) = %s, want blob.KeyOf(value) = %s", len(value), key, want)
	}
	return key
}

// mustPutN puts n distinct values, the i-th testValue(label+i, i) (so i
// bytes long, the first empty), and returns their keys in put order.
func mustPutN(t *testing.T, s *blob.Store, label string, n int) []blob.Key {
	t.Helper()
	keys := make([]blob.Key, n)
	for i := range keys {
		keys[i] = mustPut(t, s, testValue(fmt.Sprint(label, i), i))
	}
	return keys
}

func mustGet(t *testing.T, s *blob.Store, key blob.Key) []byte {
	t.Helper()
	rd, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	defer rd.Close()
	value, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("Get(%s): reading: %v", key, err)
	}
	if int64(len(value)) != rd.Size() {
		t.Fatalf("Get(%s): read %d bytes, Size() = %d", key, len(value), rd.Size())
	}
	return value
}

// wantValue checks that key reads back as want through the store.
func wantValue(t *testing.T, s *blob.Store, key blob.Key, want []byte) {
	t.Helper()
	if got := mustGet(t, s, key); !bytes.Equal(got, want) {
		t.Fatalf("Get(%s) = %d bytes %s, want %d bytes %s", key, len(got), blob.KeyOf(got), len(want), blob.KeyOf(want))
	}
}

// wantHas checks Has(key) == want.
func wantHas(t *testing.T, s *blob.Store, key blob.Key, want bool) {
	t.Helper()
	got, err := s.Has(t.Context(), key)
	if err != nil {
		t.Fatalf("Has(%s): %v", key, err)
	}
	if got != want {
		t.Fatalf("Has(%s) = %v, want %v", key, got, want)
	}
}

func mustList(t *testing.T, s *blob.Store, after blob.Key, limit int) []blob.Info {
	t.Helper()
	page, err := s.List(t.Context(), after, limit)
	if err != nil {
		t.Fatalf("List(after %q, limit %d): %v", after, limit, err)
	}
	return page
}

// mustAll collects All(after) to the end.
func mustAll(t *testing.T, s *blob.Store, after blob.Key) []blob.Info {
	t.Helper()
	var out []blob.Info
	for info, err := range s.All(t.Context(), after) {
		if err != nil {
			t.Fatalf("All(after %q): %v", after, err)
		}
		out = append(out, info)
	}
	return out
}

// wantNothingStored checks that the store holds no blob at all.
func wantNothingStored(t *testing.T, s *blob.Store) {
	t.Helper()
	if page := mustList(t, s, blob.Key{}, 10); len(page) != 0 {
		t.Fatalf("store holds %d blob(s), want none: %v", len(page), page)
	}
}

// wantErr checks that err wraps target; what names the call.
func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want one wrapping %v", what, err, target)
	}
}

// engineDelete deletes key through eng's Delete, as blob.Store.Delete
// does: nil once deleted, else the verdict's error or the call's.
func engineDelete(ctx context.Context, eng blob.Backend, key blob.Key, now time.Time) error {
	vs, err := eng.Delete(ctx, blob.DeleteParams{Keys: []blob.Key{key}, Now: now})
	if err != nil {
		return err
	}
	if len(vs) != 1 || vs[0].Key != key {
		return fmt.Errorf("Delete of %s answered %+v", key, vs)
	}
	return vs[0].Err()
}

// keysOf returns the keys of infos.
func keysOf(infos []blob.Info) []blob.Key {
	keys := make([]blob.Key, len(infos))
	for i, info := range infos {
		keys[i] = info.Key
	}
	return keys
}

// sortedKeys returns a sorted copy of keys.
func sortedKeys(keys []blob.Key) []blob.Key {
	out := append([]blob.Key(nil), keys...)
	slices.SortFunc(out, blob.Key.Compare)
	return out
}

// wantKeys checks that got lists exactly want, in want's order.
func wantKeys(t *testing.T, what string, got []blob.Info, want []blob.Key) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d blobs %v, want %d %v", what, len(got), keysOf(got), len(want), want)
	}
	for i := range want {
		if got[i].Key != want[i] {
			t.Fatalf("%s: blob %d is %s, want %s (got %v, want %v)", what, i, got[i].Key, want[i], keysOf(got), want)
		}
	}
}

// wantAscending checks that infos are in strictly ascending key order, by
// Key.Compare and by the keys' text forms.
func wantAscending(t *testing.T, what string, infos []blob.Info) {
	t.Helper()
	for i := 1; i < len(infos); i++ {
		prev, cur := infos[i-1].Key, infos[i].Key
		if prev.Compare(cur) >= 0 {
			t.Fatalf("%s: blob %d (%s) does not sort after blob %d (%s) by Key.Compare", what, i, cur, i-1, prev)
		}
		if prev.String() >= cur.String() {
			t.Fatalf("%s: blob %d (%s) does not sort after blob %d (%s) as text", what, i, cur, i-1, prev)
		}
	}
}
