package enginetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// The collector's batched and bounded steps: one arbitration decides a
// batch, staging walks the keys in ranges from a durable cursor, a take
// hands out the longest overdue first, and a failed batch goes back to the
// window.

// putValues puts n distinct values labelled label and returns their keys,
// sorted.
func putValues(t *testing.T, s *blob.Store, label string, n int) []blob.Key {
	t.Helper()
	keys := make([]blob.Key, n)
	for i := range keys {
		keys[i] = mustPut(t, s, testValue(fmt.Sprint(label, " ", i), 10+i))
	}
	return sortedKeys(keys)
}

func gcArbitrateBatch(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	g := b.eng.GC()
	r := newRefs(t, h, b.eng, "arbitrate batch")
	if err := b.col.RegisterSource(ctx, r.src); err != nil {
		t.Fatalf("RegisterSource: %v", err)
	}
	loose := putValues(t, b.store, "loose", 4)
	pinned := mustPut(t, b.store, testValue("batch pinned", 7))
	referenced := mustPut(t, b.store, testValue("batch referenced", 8))
	b.expirePins()
	guard, err := b.store.Pin(ctx, pinned)
	if err != nil {
		t.Fatalf("Pin: %v", err)
	}
	defer guard.Release(context.WithoutCancel(ctx))
	r.set(referenced, true)
	absent := absentKey("batch")
	keys := sortedKeys(append(slices.Clone(loose), pinned, referenced, absent))
	stage(t, g, b.clock.Now(), keys...)
	want := func(k blob.Key) blob.Outcome {
		switch {
		case k == absent:
			return blob.Absent
		case k == pinned || k == referenced:
			return blob.Protected
		}
		return blob.Deleted
	}
	lease, ok, err := g.AcquireSweep(ctx, "arbitrate batch")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep = %v, %v", ok, err)
	}
	defer lease.Release(context.WithoutCancel(ctx))
	for _, dry := range []bool{true, false} {
		vs, err := g.Arbitrate(ctx, gc.ArbitrateParams{Keys: keys, Now: b.clock.Now(), DryRun: dry, Lease: lease})
		if err != nil {
			t.Fatalf("Arbitrate(dry %v): %v", dry, err)
		}
		if len(vs) != len(keys) {
			t.Fatalf("Arbitrate(dry %v) = %d verdicts for %d keys", dry, len(vs), len(keys))
		}
		for i, v := range vs {
			if v.Key != keys[i] || v.Outcome != want(keys[i]) {
				t.Fatalf("verdict %d (dry %v) = %+v, want %s %v", i, dry, v, keys[i], want(keys[i]))
			}
			if v.Outcome == blob.Deleted {
				info, err := b.store.Stat(ctx, v.Key)
				if dry && (err != nil || info.Size != v.Size) {
					t.Fatalf("verdict %+v: Stat = %+v, %v; want the blob kept, with its size reported", v, info, err)
				}
				if !dry && !errors.Is(err, steaderr.ErrNotFound) {
					t.Fatalf("Stat of %s after its deletion = %+v, %v", v.Key, info, err)
				}
			}
		}
	}
	wantHas(t, b.store, pinned, true)
	wantHas(t, b.store, referenced, true)
	w := window(t, g)
	for _, k := range loose {
		if _, ok := w[k]; ok {
			t.Errorf("deleted %s kept its window row", k)
		}
	}
	if _, ok := w[pinned]; !ok {
		t.Errorf("the window row of protected %s went with the arbitration", pinned)
	}
	if err := g.Pins(ctx, gc.PinsParams{Now: b.clock.Now()}, func(p gc.PinInfo) bool {
		if slices.Contains(loose, p.Key) {
			t.Errorf("deleted %s kept its pin %+v", p.Key, p)
		}
		return true
	}); err != nil {
		t.Fatalf("Pins: %v", err)
	}
}

// spyDeletes counts the Delete calls that reach the engine and their keys.
type spyDeletes struct {
	blob.Backend
	calls []int
}

func (s *spyDeletes) Delete(ctx context.Context, p blob.DeleteParams) ([]blob.Verdict, error) {
	s.calls = append(s.calls, len(p.Keys))
	return s.Backend.Delete(ctx, p)
}

func gcDeleteMany(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	keys := putValues(t, b.store, "delete many", 3)
	keep := mustPut(t, b.store, testValue("delete many keep", 30))
	b.expirePins()
	guard, err := b.store.Pin(ctx, keep)
	if err != nil {
		t.Fatalf("Pin: %v", err)
	}
	defer guard.Release(context.WithoutCancel(ctx))
	absent := absentKey("delete many")

	_, err = b.store.DeleteMany(ctx, []blob.Key{keys[0], {}})
	wantErr(t, err, steaderr.ErrInvalidKey, "DeleteMany with a zero key")
	wantHas(t, b.store, keys[0], true)

	// Any order, a repeat, an absent key and a protected one: a verdict each, in order.
	in := []blob.Key{keys[2], absent, keys[0], keep, keys[2], keys[1]}
	vs, err := b.store.DeleteMany(ctx, in)
	if err != nil {
		t.Fatalf("DeleteMany: %v", err)
	}
	want := []blob.Outcome{blob.Deleted, blob.Absent, blob.Deleted, blob.Protected, blob.Deleted, blob.Deleted}
	if len(vs) != len(in) {
		t.Fatalf("DeleteMany = %d verdicts for %d keys", len(vs), len(in))
	}
	for i, v := range vs {
		if v.Key != in[i] || v.Outcome != want[i] {
			t.Errorf("verdict %d = %+v, want %s %v", i, v, in[i], want[i])
		}
	}
	wantHas(t, b.store, keep, true)
	for _, k := range keys {
		wantHas(t, b.store, k, false)
	}

	// More keys than a batch: one engine call, one transaction, per batch.
	spy := &spyDeletes{Backend: b.blobs}
	s := blob.NewStore(spy, blob.Options{Now: b.clock.Now})
	many := make([]blob.Key, 1001)
	for i := range many {
		many[i] = absentKey(fmt.Sprint("delete many ", i))
	}
	vs, err = s.DeleteMany(ctx, many)
	if err != nil {
		t.Fatalf("DeleteMany of %d keys: %v", len(many), err)
	}
	if !slices.Equal(spy.calls, []int{1000, 1}) {
		t.Fatalf("DeleteMany of %d keys called the engine with %v keys, want [1000 1]", len(many), spy.calls)
	}
	for i, v := range vs {
		if v.Key != many[i] || v.Outcome != blob.Absent {
			t.Fatalf("verdict %d = %+v, want %s absent", i, v, many[i])
		}
	}
}

func gcStageRange(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	g := b.eng.GC()
	if pass, err := g.StagePass(ctx); err != nil || pass != (gc.Pass{}) {
		t.Fatalf("StagePass on a fresh store = %+v, %v; want the zero Pass", pass, err)
	}
	keys := putValues(t, b.store, "stage range", 5)
	b.expirePins()
	guard, err := b.store.Pin(ctx, keys[1])
	if err != nil {
		t.Fatalf("Pin: %v", err)
	}
	defer guard.Release(context.WithoutCancel(ctx))
	early := b.clock.Now().Add(-time.Hour)
	stage(t, g, early, keys[2:3]...)
	now := b.clock.Now()
	lease := sweepLease(t, g)
	rng := func(after blob.Key, limit int, dry bool) gc.StagedRange {
		t.Helper()
		r, err := g.StageRange(ctx, gc.StageRangeParams{After: after, Limit: limit, Now: now, Grace: testGrace, DryRun: dry, Lease: lease})
		if err != nil {
			t.Fatalf("StageRange(after %s, %d, dry %v): %v", after, limit, dry, err)
		}
		return r
	}
	wantPass := func(what string, after blob.Key, started time.Time) {
		t.Helper()
		pass, err := g.StagePass(ctx)
		if err != nil || pass.After != after || !pass.Started.Equal(started) {
			t.Fatalf("StagePass %s = %+v, %v; want after %s, started %v", what, pass, err, after, started)
		}
	}
	// A dry run reports and records nothing.
	if r := rng(blob.Key{}, 2, true); r.Covered != 2 || r.Staged != 1 || r.Last != keys[1] {
		t.Fatalf("dry StageRange = %+v, want 2 covered, 1 staged (keys[1] is pinned), last %s", r, keys[1])
	}
	wantPass("after a dry run", blob.Key{}, time.Time{})
	if w := window(t, g); len(w) != 1 {
		t.Fatalf("window after a dry run = %v, want only the key staged by hand", w)
	}
	if r := rng(blob.Key{}, 2, false); r.Covered != 2 || r.Staged != 1 || r.Last != keys[1] {
		t.Fatalf("StageRange from the start = %+v, want 2 covered, 1 staged, last %s", r, keys[1])
	}
	wantPass("after the first range", keys[1], now)
	// keys[2] is staged already: it keeps its deadline.
	if r := rng(keys[1], 2, false); r.Covered != 2 || r.Staged != 1 || r.Last != keys[3] {
		t.Fatalf("second StageRange = %+v, want 2 covered, 1 staged, last %s", r, keys[3])
	}
	if r := rng(keys[3], 2, false); r.Covered != 1 || r.Staged != 1 || !r.Last.IsZero() {
		t.Fatalf("last StageRange = %+v, want 1 covered, 1 staged, and the pass complete", r)
	}
	wantPass("after the pass completed", blob.Key{}, now)
	w := window(t, g)
	for i, k := range keys {
		deadline, staged := w[k]
		switch {
		case i == 1 && staged:
			t.Errorf("pinned %s staged", k)
		case i == 2 && !deadline.Equal(early):
			t.Errorf("%s staged again: deadline %v, want %v", k, deadline, early)
		case i != 1 && i != 2 && !deadline.Equal(now.Add(testGrace)):
			t.Errorf("%s: deadline %v (staged %v), want now + grace", k, deadline, staged)
		}
	}
	// A range that ends exactly on the last key does not know the pass is
	// complete; the next one, covering nothing, says so.
	if r := rng(keys[2], 2, true); r.Covered != 2 || r.Last != keys[4] {
		t.Fatalf("StageRange ending on the last key = %+v, want 2 covered, last %s", r, keys[4])
	}
	if r := rng(keys[4], 2, true); r.Covered != 0 || r.Staged != 0 || !r.Last.IsZero() {
		t.Fatalf("StageRange after the last key = %+v, want nothing and the pass complete", r)
	}
}

func gcSweepResumes(t *testing.T, h Harness) {
	b := setupGC(t, h)
	col := gc.New(b.eng.GC(), gc.Options{Grace: testGrace, StageRange: 2, StagePerSweep: 3, Now: b.clock.Now, AllUnreferenced: true})
	keys := putValues(t, b.store, "resume", 7)
	b.expirePins()
	sweep := func() gc.Report {
		t.Helper()
		rep, err := col.Sweep(t.Context(), gc.SweepOptions{})
		if err != nil || rep.Aborted != "" {
			t.Fatalf("Sweep = %+v, %v", rep, err)
		}
		return rep
	}
	for i, want := range []int64{3, 3, 1} {
		rep := sweep()
		if rep.Covered != want || rep.Staged != want || rep.Wrapped != (i == 2) {
			t.Fatalf("sweep %d = %+v, want %d covered and staged, pass complete %v", i+1, rep, want, i == 2)
		}
	}
	if rep := sweep(); rep.Covered != 0 || rep.NextPass.IsZero() || !rep.NextPass.Equal(b.clock.Now().Add(testGrace)) {
		t.Fatalf("sweep right after a complete pass = %+v, want staging paused until a grace after the pass began", rep)
	}
	dry, err := col.Sweep(t.Context(), gc.SweepOptions{DryRun: true})
	if err != nil || dry.Covered != 7 || dry.Staged != 0 || !dry.Wrapped {
		t.Fatalf("dry sweep = %+v, %v; want a whole pass counted (all staged already)", dry, err)
	}
	b.clock.Advance(testGrace)
	if rep := sweep(); rep.Deleted != 7 || !rep.Wrapped || rep.Covered != 0 {
		t.Fatalf("sweep a grace later = %+v, want all 7 deleted and a new (empty) pass", rep)
	}
	for _, k := range keys {
		wantHas(t, b.store, k, false)
	}
}

func gcTakeOverdueFirst(t *testing.T, h Harness) {
	b := setupGC(t, h)
	g := b.eng.GC()
	t0 := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	keys := make([]blob.Key, 6)
	for i := range keys {
		keys[i] = mustPut(t, b.store, testValue(fmt.Sprint("take order ", i), 10+i))
		// Deadlines in an order of their own, not the keys'.
		stage(t, g, t0.Add(time.Duration((i*7)%6)*time.Second), keys[i])
	}
	byDeadline := slices.Clone(keys)
	slices.SortFunc(byDeadline, func(x, y blob.Key) int {
		return (slices.Index(keys, x)*7)%6 - (slices.Index(keys, y)*7)%6
	})
	lease := sweepLease(t, g)
	got, err := g.Take(t.Context(), gc.TakeParams{Now: t0.Add(time.Hour), Limit: 2, Lease: lease})
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	if want := sortedKeys(byDeadline[:2]); !slices.Equal(got, want) {
		t.Fatalf("Take(limit 2) = %v, want the two longest overdue in key order %v", got, want)
	}
	got, err = g.Take(t.Context(), gc.TakeParams{Now: t0.Add(time.Hour), Limit: 10, Lease: lease})
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	if want := sortedKeys(byDeadline[2:]); !slices.Equal(got, want) {
		t.Fatalf("Take(limit 10) = %v, want the rest in key order %v", got, want)
	}
}

// failArbitrate is a gc.Backend whose arbitrations fail.
type failArbitrate struct{ gc.Backend }

var errArbitrate = errors.New("enginetest: arbitration failed on purpose")

func (failArbitrate) Arbitrate(context.Context, gc.ArbitrateParams) ([]blob.Verdict, error) {
	return nil, errArbitrate
}

func gcFailedBatchRestaged(t *testing.T, h Harness) {
	b := setupGC(t, h)
	keys := putValues(t, b.store, "restaged", 3)
	b.expirePins()
	b.sweep(t) // stages them
	b.clock.Advance(testGrace)
	failing := gc.New(failArbitrate{b.eng.GC()}, gc.Options{Grace: testGrace, Now: b.clock.Now, AllUnreferenced: true})
	if _, err := failing.Sweep(t.Context(), gc.SweepOptions{}); !errors.Is(err, errArbitrate) {
		t.Fatalf("Sweep with failing arbitrations = %v, want the arbitration's error", err)
	}
	w := window(t, b.eng.GC())
	for _, k := range keys {
		if deadline, ok := w[k]; !ok || deadline.After(b.clock.Now()) {
			t.Fatalf("window after the failed batch = %v: want %s back, overdue", w, k)
		}
	}
	if rep := b.sweep(t); rep.Deleted != 3 {
		t.Fatalf("sweep after the failed one = %+v, want the 3 restaged keys deleted at once", rep)
	}

	// On the engine's own clock too (no clock injected): the batch goes
	// back overdue by the system clock.
	more := putValues(t, b.store, "restaged on the engine's clock", 2)
	b.expirePins()
	b.clock.Advance(testGrace)
	b.sweep(t) // stages them
	stage(t, b.eng.GC(), time.Now().Add(-time.Second), more...)
	real := gc.New(failArbitrate{b.eng.GC()}, gc.Options{AllUnreferenced: true})
	if _, err := real.Sweep(t.Context(), gc.SweepOptions{}); !errors.Is(err, errArbitrate) || strings.Contains(err.Error(), "returning the batch") {
		t.Fatalf("Sweep with failing arbitrations on the engine's clock = %v, want only the arbitration's error", err)
	}
	w = window(t, b.eng.GC())
	for _, k := range more {
		if deadline, ok := w[k]; !ok || deadline.After(time.Now()) {
			t.Fatalf("window after the failed batch = %v: want %s back, overdue", w, k)
		}
	}
}

// gcOnceDeclared: a store that ever declared liveness stays one that
// does, durably, after its last ref is deleted, so a sweep of a store
// emptied of refs runs instead of refusing.
func gcOnceDeclared(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	col := gc.New(b.eng.GC(), gc.Options{Grace: testGrace, Now: b.clock.Now})
	kept := mustPut(t, b.store, testValue("once declared, kept", 11))
	mustPut(t, b.store, testValue("once declared, loose", 12))
	if _, err := b.refs.Set(ctx, "once/declared", kept, ref.SetOptions{}); err != nil {
		t.Fatalf("Set: %v", err)
	}
	if err := b.refs.Delete(ctx, "once/declared", 0); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	b.expirePins()
	if declared, err := b.eng.GC().Declared(ctx); err != nil || !declared {
		t.Fatalf("Declared after the last ref went = %v, %v; want true: the store declared liveness once", declared, err)
	}
	rep, err := col.Sweep(ctx, gc.SweepOptions{})
	if err != nil || rep.Staged != 2 {
		t.Fatalf("Sweep once the last ref went = %+v, %v; want both blobs staged, no refusal", rep, err)
	}
}

func gcNoLiveness(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	col := gc.New(b.eng.GC(), gc.Options{Grace: testGrace, Now: b.clock.Now})
	keys := putValues(t, b.store, "no liveness", 2)
	b.expirePins()
	_, err := col.Sweep(ctx, gc.SweepOptions{})
	wantErr(t, err, steaderr.ErrProtected, "Sweep of a store that never declared liveness")
	if !strings.Contains(err.Error(), "never declared liveness") || !strings.Contains(err.Error(), "--all-unreferenced") {
		t.Errorf("the refusal %q does not say why and what to do", err)
	}
	if w := window(t, b.eng.GC()); len(w) != 0 {
		t.Fatalf("a refused sweep staged %v", w)
	}
	dry, err := col.Sweep(ctx, gc.SweepOptions{DryRun: true})
	if err != nil || dry.Staged != 2 {
		t.Fatalf("dry sweep = %+v, %v; want the 2 unprotected blobs counted", dry, err)
	}
	if rep, err := col.Sweep(ctx, gc.SweepOptions{AllUnreferenced: true}); err != nil || rep.Staged != 2 {
		t.Fatalf("Sweep with AllUnreferenced = %+v, %v; want 2 staged", rep, err)
	}
	b.clock.Advance(testGrace)
	if h.RefTable == nil && h.NoFuncSources != "" {
		t.Skipf("no liveness source to register: %s", h.NoFuncSources)
	}
	r := newRefs(t, h, b.eng, "no liveness")
	if err := col.RegisterSource(ctx, r.src); err != nil {
		t.Fatalf("RegisterSource: %v", err)
	}
	r.set(keys[0], true)
	rep, err := col.Sweep(ctx, gc.SweepOptions{})
	if err != nil || rep.Deleted != 1 || rep.Rescued != 1 {
		t.Fatalf("Sweep once a source is registered = %+v, %v; want 1 deleted, the referenced one rescued", rep, err)
	}
}

func gcLeaseRenew(t *testing.T, h Harness) {
	b := setupGC(t, h)
	g := b.eng.GC()
	lease, ok, err := g.AcquireSweep(t.Context(), "renew")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep = %v, %v", ok, err)
	}
	if err := lease.Renew(t.Context()); err != nil {
		t.Fatalf("Renew of a held lease: %v", err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wantErr(t, lease.Renew(t.Context()), steaderr.ErrLost, "Renew after Release")
	// A second Release changes nothing, even once another sweep holds the lease.
	other, ok, err := g.AcquireSweep(t.Context(), "other")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep after Release = %v, %v", ok, err)
	}
	_ = lease.Release(t.Context())
	if err := other.Renew(t.Context()); err != nil {
		t.Fatalf("the new lease after the old one's second Release: %v", err)
	}
	if _, ok, _ := g.AcquireSweep(t.Context(), "third"); ok {
		t.Fatal("a second Release of an old lease freed the new one")
	}
	if err := other.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
