package enginetest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/steaderr"
)

// testGC covers garbage collection: the window, pins, arbitration with
// pins and liveness sources, the sweep lease and whole sweeps, through
// the gc.Backend and blob.Backend seams and the portable stores.
func testGC(t *testing.T, h Harness) {
	runTests(t, h, []suiteTest{
		{"StageIdempotent", gcStageIdempotent},
		{"StageReleasedLease", gcStageReleasedLease},
		{"Take", gcTake},
		{"TakeConcurrent", gcTakeConcurrent},
		{"Times", gcTimes},
		{"PinRenew", gcPinRenew},
		{"PinAbsent", gcPinAbsent},
		{"HotKeySkip", gcHotKeySkip},
		{"SharedRow", gcSharedRow},
		{"Guard", gcGuard},
		{"PutFailure", gcPutFailure},
		{"Sweep", gcSweep},
		{"Sources", gcSources},
		{"Lease", gcLease},
		{"Explain", gcExplain},
		{"Closed", gcClosed},
		{"Stored", gcStored},
		{"ArbitrateBatch", gcArbitrateBatch},
		{"DeleteMany", gcDeleteMany},
		{"StageRange", gcStageRange},
		{"SweepResumes", gcSweepResumes},
		{"TakeOverdueFirst", gcTakeOverdueFirst},
		{"FailedBatchRestaged", gcFailedBatchRestaged},
		{"NoLiveness", gcNoLiveness},
		{"OnceDeclared", gcOnceDeclared},
		{"LeaseRenew", gcLeaseRenew},
		{"Edges", gcEdges},
		{"EdgesRefused", gcEdgesRefused},
		{"EdgesRace", gcEdgesRace},
		{"EdgesSharedRace", gcEdgesSharedRace},
		{"EdgesFixedRace", gcEdgesFixedRace},
	})
}

// gcBundle is a bundle with a collector on the bundle's clock.
type gcBundle struct {
	*bundle
	gce engine.Engine
	col *gc.Collector
}

// testGrace is shorter than the pin TTL: a guard taken on the test clock
// outlives a grace period or two.
const testGrace = 20 * time.Second

func setupGC(t *testing.T, h Harness) *gcBundle {
	t.Helper()
	b := setup(t, h)
	if b.eng.GC() == nil {
		t.Skip("the engine's data is collected elsewhere (Engine.GC is nil)")
	}
	// The bundle's collector sweeps a store that declares no liveness too:
	// the refusal to is tested on its own (NoLiveness).
	return &gcBundle{bundle: b, gce: b.eng, col: gc.New(b.eng.GC(), gc.Options{Grace: testGrace, Batch: 7, Holder: "enginetest", Now: b.clock.Now, AllUnreferenced: true})}
}

func (b *gcBundle) sweep(t *testing.T) gc.Report {
	t.Helper()
	rep, err := b.col.Sweep(t.Context(), gc.SweepOptions{})
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if rep.Aborted != "" {
		t.Fatalf("Sweep aborted: %s", rep.Aborted)
	}
	return rep
}

func window(t *testing.T, g gc.Backend) map[blob.Key]time.Time {
	t.Helper()
	out := map[blob.Key]time.Time{}
	if err := g.Window(t.Context(), func(c gc.Candidate) bool { out[c.Key] = c.VisibleAfter; return true }); err != nil {
		t.Fatalf("Window: %v", err)
	}
	return out
}

// sweepLease takes g's sweep lease for the mechanics a test drives itself,
// released when the test ends: an engine may refuse them without it.
func sweepLease(t *testing.T, g gc.Backend) gc.Lease {
	t.Helper()
	lease, ok, err := g.AcquireSweep(t.Context(), "enginetest mechanics")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep = %v, %v", ok, err)
	}
	t.Cleanup(func() { _ = lease.Release(context.Background()) })
	return lease
}

// stage stages keys at the seam, visible after at, under a sweep lease of
// its own, released before it returns.
func stage(t *testing.T, g gc.Backend, at time.Time, keys ...blob.Key) {
	t.Helper()
	lease, ok, err := g.AcquireSweep(t.Context(), "enginetest stage")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep = %v, %v", ok, err)
	}
	defer lease.Release(context.WithoutCancel(t.Context()))
	if err := g.Stage(t.Context(), gc.StageParams{Keys: keys, VisibleAfter: at, Lease: lease}); err != nil {
		t.Fatalf("Stage(%v): %v", at, err)
	}
}

func take(t *testing.T, g gc.Backend, lease gc.Lease, now time.Time) []blob.Key {
	t.Helper()
	keys, err := g.Take(t.Context(), gc.TakeParams{Now: now, Limit: 1000, Lease: lease})
	if err != nil {
		t.Fatalf("Take(%v): %v", now, err)
	}
	return keys
}

// gcStageReleasedLease: Stage under a sweep lease released is refused
// with ErrLost and stages nothing, as StageRange is: the window is the
// sweeper's.
func gcStageReleasedLease(t *testing.T, h Harness) {
	b := setupGC(t, h)
	key := mustPut(t, b.store, testValue("stage released", 10))
	g := b.eng.GC()
	lease, ok, err := g.AcquireSweep(t.Context(), "enginetest released")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep = %v, %v", ok, err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	err = g.Stage(t.Context(), gc.StageParams{Keys: []blob.Key{key}, Lease: lease})
	wantErr(t, err, steaderr.ErrLost, "Stage under a released lease")
	x, err := g.Explain(t.Context(), gc.ExplainParams{Key: key, Now: b.clock.Now()})
	if err != nil || x.Staged {
		t.Fatalf("after a refused Stage, Explain = %+v, %v; want not staged", x, err)
	}
}

func gcStageIdempotent(t *testing.T, h Harness) {
	b := setupGC(t, h)
	g := b.eng.GC()
	key := mustPut(t, b.store, testValue("stage", 5))
	d1 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 2 {
		stage(t, g, d1, key)
	}
	if w := window(t, g); len(w) != 1 || !w[key].Equal(d1) {
		t.Fatalf("window after staging twice = %v, want %s at %v", w, key, d1)
	}
	d2 := d1.Add(time.Hour)
	stage(t, g, d2, key)
	if w := window(t, g); len(w) != 1 || !w[key].Equal(d2) {
		t.Fatalf("window after a new deadline = %v, want %s at %v", w, key, d2)
	}
	// The window holds stored blobs only: a key not stored is skipped.
	absent := absentKey("stage")
	stage(t, g, d1, sortedKeys([]blob.Key{key, absent})...)
	if w := window(t, g); len(w) != 1 || !w[key].Equal(d1) {
		t.Fatalf("window after staging a key not stored = %v, want %s alone at %v", w, key, d1)
	}
}

func gcTake(t *testing.T, h Harness) {
	b := setupGC(t, h)
	g := b.eng.GC()
	lease := sweepLease(t, g)
	t0 := time.Date(2030, 5, 6, 7, 8, 9, 123000, time.UTC)
	if keys := take(t, g, lease, t0.Add(100*365*24*time.Hour)); len(keys) != 0 {
		t.Fatalf("Take on a fresh store = %v, want none", keys)
	}
	keys := putValues(t, b.store, "take", 4)
	deadlines := []time.Time{t0.Add(-time.Second), t0, t0.Add(time.Microsecond), t0.Add(time.Hour)}
	for i, k := range keys {
		if err := g.Stage(t.Context(), gc.StageParams{Keys: []blob.Key{k}, VisibleAfter: deadlines[i], Lease: lease}); err != nil {
			t.Fatalf("Stage: %v", err)
		}
	}
	// visible_after <= now: the one at exactly t0 is overdue, the one a
	// microsecond later is not.
	if got := take(t, g, lease, t0); !slices.Equal(got, keys[:2]) {
		t.Fatalf("Take(t0) = %v, want %v", got, keys[:2])
	}
	if got := take(t, g, lease, t0); len(got) != 0 {
		t.Fatalf("second Take(t0) = %v, want none: a candidate is handed out once", got)
	}
	dry, err := g.Take(t.Context(), gc.TakeParams{Now: t0.Add(time.Hour), Limit: 10, DryRun: true, Lease: lease})
	if err != nil || !slices.Equal(dry, keys[2:]) {
		t.Fatalf("dry Take = %v, %v; want %v", dry, err, keys[2:])
	}
	if got := take(t, g, lease, t0.Add(time.Hour)); !slices.Equal(got, keys[2:]) {
		t.Fatalf("Take(t0+1h) = %v, want %v (a dry take removes nothing)", got, keys[2:])
	}
	if w := window(t, g); len(w) != 0 {
		t.Fatalf("window after taking everything = %v", w)
	}
}

func gcTakeConcurrent(t *testing.T, h Harness) {
	b := setupGC(t, h)
	g := b.eng.GC()
	lease := sweepLease(t, g)
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 120
	if err := g.Stage(t.Context(), gc.StageParams{Keys: putValues(t, b.store, "concurrent take", n), VisibleAfter: at, Lease: lease}); err != nil {
		t.Fatalf("Stage: %v", err)
	}
	var mu sync.Mutex
	seen := map[blob.Key]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				keys, err := g.Take(t.Context(), gc.TakeParams{Now: at, Limit: 7, Lease: lease})
				if err != nil {
					t.Errorf("Take: %v", err)
					return
				}
				if len(keys) == 0 {
					return
				}
				mu.Lock()
				for _, k := range keys {
					seen[k]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("concurrent takes returned %d distinct keys, want %d", len(seen), n)
	}
	for k, c := range seen {
		if c != 1 {
			t.Fatalf("%s taken %d times", k, c)
		}
	}
}

func gcTimes(t *testing.T, h Harness) {
	b := setupGC(t, h)
	g := b.eng.GC()
	lease := sweepLease(t, g)
	old := time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	far := time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	kOld, kFar := mustPut(t, b.store, testValue("pre-epoch", 9)), mustPut(t, b.store, testValue("far future", 10))
	for k, d := range map[blob.Key]time.Time{kOld: old, kFar: far} {
		if err := g.Stage(t.Context(), gc.StageParams{Keys: []blob.Key{k}, VisibleAfter: d, Lease: lease}); err != nil {
			t.Fatalf("Stage(%v): %v", d, err)
		}
	}
	if w := window(t, g); !w[kOld].Equal(old) || !w[kFar].Equal(far) {
		t.Fatalf("window = %v, want %v and %v", w, old, far)
	}
	if got := take(t, g, lease, old); !slices.Equal(got, []blob.Key{kOld}) {
		t.Fatalf("Take(1900) = %v, want the pre-epoch key", got)
	}
	if got := take(t, g, lease, far); !slices.Equal(got, []blob.Key{kFar}) {
		t.Fatalf("Take(9999) = %v, want the far-future key", got)
	}
	// Pins at both ends of time.
	value := testValue("times", 10)
	key := blob.KeyOf(value)
	for _, now := range []time.Time{old, far.Add(-time.Hour)} {
		if _, err := b.blobs.Put(t.Context(), blob.PutParams{Key: key, Value: value, Owner: "o", TTL: time.Minute, Now: now}); err != nil {
			t.Fatalf("Put at %v: %v", now, err)
		}
		ok, err := b.blobs.RenewPin(t.Context(), blob.PinParams{Key: key, Owner: "o", TTL: time.Minute, Now: now.Add(30 * time.Second)})
		if err != nil || !ok {
			t.Fatalf("RenewPin at %v = %v, %v; want true", now, ok, err)
		}
	}
}

func gcPinRenew(t *testing.T, h Harness) {
	b := setupGC(t, h)
	value := testValue("renew", 10)
	key := blob.KeyOf(value)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := b.blobs.Put(t.Context(), blob.PutParams{Key: key, Value: value, Owner: "a", TTL: time.Minute, Now: t0}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	renew := func(owner string, now time.Time) bool {
		t.Helper()
		ok, err := b.blobs.RenewPin(t.Context(), blob.PinParams{Key: key, Owner: owner, TTL: time.Minute, Now: now})
		if err != nil {
			t.Fatalf("RenewPin(%s, %v): %v", owner, now, err)
		}
		return ok
	}
	if !renew("a", t0.Add(59*time.Second)) {
		t.Fatal("renewing a live pin failed")
	}
	wantPin := func(owner string, expiry time.Time) {
		t.Helper()
		x, err := b.eng.GC().Explain(t.Context(), gc.ExplainParams{Key: key, Now: t0})
		if err != nil {
			t.Fatalf("Explain: %v", err)
		}
		for _, p := range x.Pins {
			if p.Owner == owner {
				if !p.Expiry.Equal(expiry) {
					t.Fatalf("pin %s expires %v, want %v", owner, p.Expiry, expiry)
				}
				return
			}
		}
		t.Fatalf("no pin of %s in %v", owner, x.Pins)
	}
	wantPin("a", t0.Add(119*time.Second))
	// An expired pin (expiry <= now) is never resurrected, nor an absent one.
	if renew("a", t0.Add(119*time.Second)) {
		t.Fatal("renewing a pin at its expiry instant succeeded")
	}
	wantPin("a", t0.Add(119*time.Second))
	if renew("nobody", t0) {
		t.Fatal("renewing an absent pin succeeded")
	}
	// A renewal never shortens: a shorter TTL keeps the later expiry.
	if err := b.blobs.Pin(t.Context(), blob.PinParams{Key: key, Owner: "a", TTL: time.Hour, Now: t0}); err != nil {
		t.Fatalf("Pin: %v", err)
	}
	if !renew("a", t0.Add(time.Second)) {
		t.Fatal("renewing a re-pinned key failed")
	}
	wantPin("a", t0.Add(time.Hour))
	// Unpin removes it; Delete then goes through.
	if err := b.blobs.Unpin(t.Context(), blob.UnpinParams{Key: key, Owner: "a"}); err != nil {
		t.Fatalf("Unpin: %v", err)
	}
	if err := engineDelete(t.Context(), b.blobs, key, t0); err != nil {
		t.Fatalf("Delete after Unpin: %v", err)
	}
}

func gcPinAbsent(t *testing.T, h Harness) {
	b := setupGC(t, h)
	key := absentKey("pin absent")
	err := b.blobs.Pin(t.Context(), blob.PinParams{Key: key, Owner: "a", TTL: time.Minute})
	wantErr(t, err, steaderr.ErrNotFound, "engine Pin of an absent blob")
	_, err = b.store.Pin(t.Context(), key)
	wantErr(t, err, steaderr.ErrNotFound, "Pin of an absent blob")
	var pins int
	if err := b.eng.GC().Pins(t.Context(), gc.PinsParams{Now: b.clock.Now()}, func(gc.PinInfo) bool { pins++; return true }); err != nil || pins != 0 {
		t.Fatalf("Pins = %d, %v; want none after pinning an absent blob", pins, err)
	}
}

// countingBlobs counts the puts that reach the engine.
type countingBlobs struct {
	blob.Backend
	puts atomic.Int64
}

func (c *countingBlobs) Put(ctx context.Context, p blob.PutParams) (bool, error) {
	c.puts.Add(1)
	return c.Backend.Put(ctx, p)
}

func gcHotKeySkip(t *testing.T, h Harness) {
	b := setupGC(t, h)
	spy := &countingBlobs{Backend: b.blobs}
	s := blob.NewStore(spy, blob.Options{Now: b.clock.Now, PinTTL: time.Minute})
	value := testValue("hot", 10)
	for range 5 {
		mustPut(t, s, value)
	}
	if n := spy.puts.Load(); n != 1 {
		t.Fatalf("5 puts within half the pin TTL reached the engine %d times, want 1", n)
	}
	b.clock.Advance(31 * time.Second) // less than half the TTL left
	mustPut(t, s, value)
	if n := spy.puts.Load(); n != 2 {
		t.Fatalf("a put with less than half the TTL left reached the engine %d times in all, want 2", n)
	}
	// The skip answers for a closed engine too.
	b.eng.Close()
	_, err := s.Put(t.Context(), bytes.NewReader(value))
	wantErr(t, err, steaderr.ErrClosed, "hot Put after Close")
}

func gcSharedRow(t *testing.T, h Harness) {
	b := setupGC(t, h)
	value := testValue("shared", 10)
	key := mustPut(t, b.store, value)
	guard, err := b.store.Pin(t.Context(), key)
	if err != nil {
		t.Fatalf("Pin: %v", err)
	}
	if err := guard.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// The put's pin still protects the key: the row stays.
	wantErr(t, b.store.Delete(t.Context(), key), steaderr.ErrProtected, "Delete after releasing a guard while the put's pin lasts")

	// Two guards share the row: releasing one keeps the other's protection.
	b.expirePins()
	g1, err := b.store.Pin(t.Context(), key)
	if err != nil {
		t.Fatalf("Pin 1: %v", err)
	}
	g2, err := b.store.Pin(t.Context(), key)
	if err != nil {
		t.Fatalf("Pin 2: %v", err)
	}
	if err := g1.Release(t.Context()); err != nil {
		t.Fatalf("Release 1: %v", err)
	}
	wantErr(t, b.store.Delete(t.Context(), key), steaderr.ErrProtected, "Delete while a second guard holds the key")
	if err := g2.Release(t.Context()); err != nil {
		t.Fatalf("Release 2: %v", err)
	}
	if err := b.store.Delete(t.Context(), key); err != nil {
		t.Fatalf("Delete after both guards are released: %v", err)
	}
	wantErr(t, g2.Release(t.Context()), steaderr.ErrInvalidArgument, "second Release")
}

// gcGuard checks that a Pin guard renews its pin and that one whose pin
// is removed under it is lost. The store's pins are on the bundle's clock:
// the guard renews every TTL/3 in real time, but its deadlines are the
// clock's, which moves only when the test moves it. The guard's own
// deadline is real time, so the TTL is long enough for a renewal to
// finish on a loaded machine: one that does not is lost, correctly.
func gcGuard(t *testing.T, h Harness) {
	const ttl = 1500 * time.Millisecond
	b := setupGC(t, h)
	s := blob.NewStore(b.blobs, blob.Options{PinTTL: ttl, Now: b.clock.Now})
	key := mustPut(t, s, testValue("guard", 10))
	guard, err := s.Pin(t.Context(), key)
	if err != nil {
		t.Fatalf("Pin: %v", err)
	}
	pins := func() []gc.PinInfo {
		t.Helper()
		x, err := b.eng.GC().Explain(t.Context(), gc.ExplainParams{Key: key, Now: b.clock.Now()})
		if err != nil {
			t.Fatalf("Explain: %v", err)
		}
		return x.Pins
	}
	// Two TTLs pass, a third at a time: the guard renews each time.
	for range 6 {
		b.clock.Advance(ttl / 3)
		want := b.clock.Now().Add(ttl)
		testkit.Until(t, "the guard to renew its pin", func() bool {
			select {
			case <-guard.Lost():
				t.Fatalf("the guard was lost: %v", guard.Release(t.Context()))
			default:
			}
			p := pins()
			return len(p) == 1 && p[0].Expiry.Equal(want)
		})
	}
	select {
	case <-guard.Lost():
		t.Fatal("a renewing guard was lost")
	default:
	}
	err = engineDelete(t.Context(), b.blobs, key, b.clock.Now())
	wantErr(t, err, steaderr.ErrProtected, "Delete while a guard renews")
	if err := guard.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// A guard whose pin is removed under it is lost, and says so.
	g2, err := s.Pin(t.Context(), key)
	if err != nil {
		t.Fatalf("Pin: %v", err)
	}
	p := pins()
	if len(p) != 1 {
		t.Fatalf("Explain pins = %+v; want one pin", p)
	}
	if err := b.blobs.Unpin(t.Context(), blob.UnpinParams{Key: key, Owner: p[0].Owner}); err != nil {
		t.Fatalf("Unpin: %v", err)
	}
	select {
	case <-g2.Lost():
	case <-time.After(testkit.Timeout):
		t.Fatal("a guard whose pin was removed was not lost")
	}
	wantErr(t, g2.Release(t.Context()), steaderr.ErrLost, "Release of a lost guard")
}

func gcPutFailure(t *testing.T, h Harness) {
	b := setupGC(t, h)
	value := testValue("put failure", 10)
	key := blob.KeyOf(value)
	// An empty owner fails the pin inside the put, after the blob row.
	_, err := b.blobs.Put(t.Context(), blob.PutParams{Key: key, Value: value, Owner: "", TTL: time.Minute})
	if err == nil {
		t.Fatal("Put with an empty pin owner succeeded")
	}
	wantHas(t, b.store, key, false)
	var pins int
	if err := b.eng.GC().Pins(t.Context(), gc.PinsParams{Now: b.clock.Now()}, func(gc.PinInfo) bool { pins++; return true }); err != nil || pins != 0 {
		t.Fatalf("Pins = %d, %v; want none after a failed put", pins, err)
	}
}

// refs is a liveness source the test owns: a SQL table with hostile names
// where the harness makes one, else a Go function over a set.
type refs struct {
	src gc.Source
	set func(key blob.Key, referenced bool)
}

func newRefs(t *testing.T, h Harness, eng engine.Engine, label string) refs {
	t.Helper()
	if h.RefTable != nil {
		src, set := h.RefTable(t, eng, `ref "`+label+`"; DROP TABLE x; --`, `key") OR true --`)
		return refs{src, set}
	}
	if h.NoFuncSources != "" {
		t.Skipf("no liveness source to test with: %s", h.NoFuncSources)
	}
	var mu sync.Mutex
	set := map[blob.Key]bool{}
	return refs{
		src: gc.Source{Name: "enginetest " + label, Referenced: func(_ context.Context, key blob.Key) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return set[key], nil
		}},
		set: func(key blob.Key, referenced bool) {
			mu.Lock()
			defer mu.Unlock()
			set[key] = referenced
		},
	}
}

func gcSweep(t *testing.T, h Harness) {
	b := setupGC(t, h)
	r := newRefs(t, h, b.eng, "sweep")
	if err := b.col.RegisterSource(t.Context(), r.src); err != nil {
		t.Fatalf("RegisterSource: %v", err)
	}
	pinned := mustPut(t, b.store, testValue("pinned", 10))
	referenced := mustPut(t, b.store, testValue("referenced", 20))
	loose := mustPut(t, b.store, testValue("loose", 30))
	// Every put's pin protects: nothing is staged.
	if rep := b.sweep(t); rep.Staged != 0 || rep.Taken != 0 {
		t.Fatalf("sweep right after puts = %+v, want nothing staged or taken", rep)
	}
	b.expirePins()
	guard, err := b.store.Pin(t.Context(), pinned)
	if err != nil {
		t.Fatalf("Pin: %v", err)
	}
	r.set(referenced, true)
	rep := b.sweep(t)
	if rep.Staged != 1 || rep.Taken != 0 {
		t.Fatalf("sweep = %+v, want 1 staged (the loose blob)", rep)
	}
	// The expired pins are gone (reaped, or never listed once expired).
	if err := b.eng.GC().Pins(t.Context(), gc.PinsParams{Now: b.clock.Now()}, func(p gc.PinInfo) bool {
		if !p.Expiry.After(b.clock.Now()) {
			t.Errorf("expired pin %+v listed after a sweep", p)
		}
		return true
	}); err != nil {
		t.Fatalf("Pins: %v", err)
	}
	if w := window(t, b.eng.GC()); len(w) != 1 || !w[loose].Equal(b.clock.Now().Add(testGrace)) {
		t.Fatalf("window = %v, want %s at now + grace", w, loose)
	}
	// Not overdue yet.
	if rep := b.sweep(t); rep.Taken != 0 || rep.Deleted != 0 {
		t.Fatalf("sweep before the grace ends = %+v, want nothing taken", rep)
	}
	dry, err := b.col.Sweep(t.Context(), gc.SweepOptions{DryRun: true})
	if err != nil || dry.Deleted != 0 {
		t.Fatalf("dry sweep before the grace ends = %+v, %v", dry, err)
	}
	b.clock.Advance(testGrace)
	dry, err = b.col.Sweep(t.Context(), gc.SweepOptions{DryRun: true})
	if err != nil || dry.Deleted != 1 || !dry.DryRun {
		t.Fatalf("dry sweep = %+v, %v; want 1 deletion reported", dry, err)
	}
	wantHas(t, b.store, loose, true)
	rep = b.sweep(t)
	if rep.Taken != 1 || rep.Deleted != 1 || rep.BytesFreed != 30 {
		t.Fatalf("sweep after the grace = %+v, want the loose blob (30 bytes) deleted", rep)
	}
	wantHas(t, b.store, loose, false)
	wantHas(t, b.store, pinned, true)
	wantHas(t, b.store, referenced, true)

	// A candidate that became protected after staging is rescued.
	stage(t, b.eng.GC(), b.clock.Now(), pinned)
	stage(t, b.eng.GC(), b.clock.Now(), referenced)
	rep = b.sweep(t)
	if rep.Taken != 2 || rep.Rescued != 2 || rep.Deleted != 0 {
		t.Fatalf("sweep of protected candidates = %+v, want 2 rescued", rep)
	}
	// Released and unreferenced, they go: staged, then deleted after grace.
	if err := guard.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	r.set(referenced, false)
	if rep := b.sweep(t); rep.Staged != 0 || rep.NextPass.IsZero() {
		t.Fatalf("sweep within a grace of the last pass's start = %+v, want staging paused", rep)
	}
	b.clock.Advance(testGrace)
	if rep := b.sweep(t); rep.Staged != 2 {
		t.Fatalf("sweep after release = %+v, want 2 staged", rep)
	}
	b.clock.Advance(testGrace)
	if rep := b.sweep(t); rep.Deleted != 2 {
		t.Fatalf("sweep = %+v, want 2 deleted", rep)
	}
	wantNothingStored(t, b.store)
}

func gcSources(t *testing.T, h Harness) {
	b := setupGC(t, h)
	r := newRefs(t, h, b.eng, "sources")
	ctx := t.Context()
	if err := b.col.RegisterSource(ctx, r.src); err != nil {
		t.Fatalf("RegisterSource: %v", err)
	}
	if err := b.col.RegisterSource(ctx, r.src); err != nil {
		t.Fatalf("RegisterSource again: %v", err)
	}
	if srcs, err := b.col.Sources(ctx); err != nil || len(srcs) != 1 || srcs[0].String() != r.src.String() {
		t.Fatalf("Sources = %v, %v; want [%s]", srcs, err, r.src)
	}
	key := mustPut(t, b.store, testValue("source", 10))
	b.expirePins()
	r.set(key, true)
	wantErr(t, b.store.Delete(ctx, key), steaderr.ErrProtected, "Delete of a referenced key")
	if x, err := b.col.Explain(ctx, key); err != nil || len(x.Sources) != 1 {
		t.Fatalf("Explain = %+v, %v; want one source", x, err)
	}
	if err := b.col.UnregisterSource(ctx, r.src); err != nil {
		t.Fatalf("UnregisterSource: %v", err)
	}
	if srcs, err := b.col.Sources(ctx); err != nil || len(srcs) != 0 {
		t.Fatalf("Sources after Unregister = %v, %v", srcs, err)
	}
	if err := b.store.Delete(ctx, key); err != nil {
		t.Fatalf("Delete once the source is unregistered: %v", err)
	}
	// Bad sources change nothing.
	for _, bad := range []gc.Source{
		{},
		{Schema: "s", Table: "t"},
		{Schema: "s", Table: string(make([]byte, 64)), Column: "c"},
		{Schema: "s\x00", Table: "t", Column: "c"},
		{Name: "f"},
		{Name: "f", Referenced: func(context.Context, blob.Key) (bool, error) { return false, nil }, Table: "t"},
	} {
		err := b.col.RegisterSource(ctx, bad)
		if !errors.Is(err, steaderr.ErrInvalidArgument) && !errors.Is(err, steaderr.ErrInvalidName) {
			t.Errorf("RegisterSource(%+v) = %v, want ErrInvalidArgument or ErrInvalidName", bad, err)
		}
	}
	if h.RefTable != nil {
		err := b.col.RegisterSource(ctx, gc.Source{Schema: "public", Table: "no such table; --", Column: "k"})
		wantErr(t, err, steaderr.ErrInvalidArgument, "RegisterSource of a missing table")
	}
	if srcs, err := b.col.Sources(ctx); err != nil || len(srcs) != 0 {
		t.Fatalf("Sources after bad registrations = %v, %v", srcs, err)
	}
}

func gcLease(t *testing.T, h Harness) {
	b := setupGC(t, h)
	g := b.eng.GC()
	lease, ok, err := g.AcquireSweep(t.Context(), "one")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep = %v, %v; want the lease", ok, err)
	}
	if _, ok, err := g.AcquireSweep(t.Context(), "two"); err != nil || ok {
		t.Fatalf("second AcquireSweep = %v, %v; want contention", ok, err)
	}
	rep, err := b.col.Sweep(t.Context(), gc.SweepOptions{})
	if err != nil || rep.Aborted != gc.SweeperBusy {
		t.Fatalf("Sweep while the lease is held = %+v, %v; want Aborted: SweeperBusy", rep, err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	lease, ok, err = g.AcquireSweep(t.Context(), "two")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep after release = %v, %v", ok, err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func gcExplain(t *testing.T, h Harness) {
	b := setupGC(t, h)
	value := testValue("explain", 12)
	key := mustPut(t, b.store, value)
	x, err := b.col.Explain(t.Context(), key)
	if err != nil {
		t.Fatalf("Explain: %v", err)
	}
	if !x.Stored || x.Size != 12 || len(x.Pins) != 1 || !x.Pins[0].Expiry.Equal(b.clock.Now().Add(blob.DefaultPinTTL)) || x.Staged {
		t.Fatalf("Explain = %+v, want stored, 12 bytes, one pin until now + TTL, not staged", x)
	}
	b.expirePins()
	b.sweep(t)
	x, err = b.col.Explain(t.Context(), key)
	if err != nil || !x.Staged || !x.VisibleAfter.Equal(b.clock.Now().Add(testGrace)) || len(x.Pins) != 0 {
		t.Fatalf("Explain after a sweep = %+v, %v; want staged at now + grace, no pins", x, err)
	}
	x, err = b.col.Explain(t.Context(), absentKey("explain"))
	if err != nil || x.Stored {
		t.Fatalf("Explain(absent) = %+v, %v", x, err)
	}
	_, err = b.col.Explain(t.Context(), blob.Key{})
	wantErr(t, err, steaderr.ErrInvalidKey, "Explain(zero key)")
}

func gcClosed(t *testing.T, h Harness) {
	b := setupGC(t, h)
	key := mustPut(t, b.store, testValue("closed", 10))
	b.eng.Close()
	ctx := t.Context()
	g := b.eng.GC()
	_, err := b.col.Sweep(ctx, gc.SweepOptions{})
	wantErr(t, err, steaderr.ErrClosed, "Sweep after Close")
	_, err = b.store.Pin(ctx, key)
	wantErr(t, err, steaderr.ErrClosed, "Pin after Close")
	wantErr(t, g.Stage(ctx, gc.StageParams{Keys: []blob.Key{key}, VisibleAfter: time.Now()}), steaderr.ErrClosed, "Stage after Close")
	_, err = g.Take(ctx, gc.TakeParams{Limit: 1})
	wantErr(t, err, steaderr.ErrClosed, "Take after Close")
	_, err = b.col.Explain(ctx, key)
	wantErr(t, err, steaderr.ErrClosed, "Explain after Close")
	_, err = g.Stored(ctx)
	wantErr(t, err, steaderr.ErrClosed, "Stored after Close")
	wantErr(t, b.store.Delete(ctx, key), steaderr.ErrClosed, "Delete after Close")
}

// gcStored: Stored counts each stored blob once by its size (chunked or
// in the bytes tier in the chunked runs: the sizes span several chunks),
// follows puts and deletes exactly, counts the window's blobs as pending,
// and a sweep reports what the store holds after it.
func gcStored(t *testing.T, h Harness) {
	b := setupGC(t, h)
	g := b.eng.GC()
	want := func(what string, got gc.Stored, w gc.Stored) {
		t.Helper()
		if got != w {
			t.Fatalf("%s: Stored = %+v, want %+v", what, got, w)
		}
	}
	stored := func() gc.Stored {
		t.Helper()
		st, err := g.Stored(t.Context())
		if err != nil {
			t.Fatalf("Stored: %v", err)
		}
		return st
	}
	want("empty store", stored(), gc.Stored{})
	small := mustPut(t, b.store, testValue("stored small", 10))
	mid := mustPut(t, b.store, testValue("stored mid", 2*tinyChunk+1))
	mustPut(t, b.store, testValue("stored large", 3*tinyChunk+7))
	mustPut(t, b.store, testValue("stored small", 10)) // the same content: stored once
	all := int64(10 + 2*tinyChunk + 1 + 3*tinyChunk + 7)
	want("after puts", stored(), gc.Stored{Blobs: 3, Bytes: all})
	b.expirePins()
	if err := b.store.Delete(t.Context(), mid); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	all -= 2*tinyChunk + 1
	want("after a delete", stored(), gc.Stored{Blobs: 2, Bytes: all})
	guard, err := b.store.Pin(t.Context(), small)
	if err != nil {
		t.Fatalf("Pin: %v", err)
	}
	rep := b.sweep(t)
	if rep.Staged != 1 || rep.Stored == nil {
		t.Fatalf("sweep = %+v, want the unpinned blob staged and what is stored reported", rep)
	}
	pending := gc.Stored{Blobs: 2, Bytes: all, PendingBlobs: 1, PendingBytes: all - 10}
	want("the sweep's report", *rep.Stored, pending)
	want("after staging", stored(), pending)
	if err := guard.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	b.clock.Advance(testGrace)
	// The sweep deletes the overdue candidate, then its new pass stages
	// the blob released.
	rep = b.sweep(t)
	if rep.Deleted != 1 || rep.Staged != 1 || rep.Stored == nil {
		t.Fatalf("sweep after the grace = %+v, want 1 deleted, 1 staged and what is stored reported", rep)
	}
	left := gc.Stored{Blobs: 1, Bytes: 10, PendingBlobs: 1, PendingBytes: 10}
	want("the report after a deletion", *rep.Stored, left)
	want("after the sweep", stored(), left)
}
