package enginetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

// recordSaveStress runs RecordSaveStress through two stores over one
// engine.
func recordSaveStress(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	saveStress(t, g, !h.CancelMayCommit, b.store, record.NewStore(b.recs, record.Options{Now: b.clock.Now}))
}

// RecordSaveStress has many goroutines, through stores (over one engine or
// several sharing a database, group registered), create and update an
// overlapping set of records, each save from the version it last read, so
// that engines batching saves (group commit) get batches holding a record
// more than once and stale versions beside fresh ones; one save in five
// has a deadline of up to 2ms, so some are cancelled while their batch
// runs, and one in three goes through SaveAll. A cancelled save must have
// changed nothing. It checks the outcome
// against the compare-and-swap model: per record, exactly one
// create succeeds, every successful update moved the version it read up by
// one (no two from the same version), and the stored record is the last
// successful save's.
func RecordSaveStress(t *testing.T, g string, stores ...*record.Store) {
	t.Helper()
	saveStress(t, g, true, stores...)
}

// saveStress is RecordSaveStress, cancelling saves in flight only if
// cancel.
func saveStress(t *testing.T, g string, cancel bool, stores ...*record.Store) {
	t.Helper()
	const (
		workers = 16
		rounds  = 40
		ids     = 6
	)
	type success struct {
		from    int64 // the version saved from (0: created)
		payload string
	}
	// Every tenant is saved into once first, so that the saves below find
	// its id cached and a cancelled one is known to have changed nothing.
	for i, store := range stores {
		for _, tenant := range []string{"", "t1", "t2"} {
			rec := newRecord(fmt.Sprintf("warm-%d-%s", i, tenant), g)
			rec.Tenant = tenant
			if _, err := store.Save(t.Context(), rec); err != nil {
				t.Fatalf("Save(%s): %v", rec.ID, err)
			}
		}
	}
	var mu sync.Mutex
	wins := map[string][]success{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			ctx := t.Context()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			store := stores[w%len(stores)]
			for i := range rounds {
				id := fmt.Sprint("r", rng.IntN(ids))
				rec, err := store.Load(ctx, id)
				switch {
				case errors.Is(err, steaderr.ErrNotFound):
					rec = newRecord(id, g)
				case err != nil:
					t.Errorf("Load(%s): %v", id, err)
					return
				}
				if rng.IntN(4) == 0 && rec.Version > 0 {
					rec.Version-- // stale on purpose
				}
				rec.Payload = fmt.Appendf(nil, "w%d-%d", w, i)
				rec.Tenant = []string{"", "t1", "t2"}[rng.IntN(3)]
				saveCtx, stop := ctx, context.CancelFunc(func() {})
				if cancel && rng.IntN(5) == 0 { // cancelled before, while or after its batch runs
					saveCtx, stop = context.WithTimeout(ctx, time.Duration(rng.IntN(2000))*time.Microsecond)
				}
				var saved record.Record
				if rng.IntN(3) == 0 {
					res := store.SaveAll(saveCtx, []record.Record{rec})
					saved, err = res[0].Record, res[0].Err
				} else {
					saved, err = store.Save(saveCtx, rec)
				}
				stop()
				switch {
				case errors.Is(err, steaderr.ErrConflict), errors.Is(err, context.DeadlineExceeded):
					continue // changed nothing
				case err != nil:
					t.Errorf("Save(%s from version %d): %v", id, rec.Version, err)
					return
				case saved.Version != rec.Version+1 || string(saved.Payload) != string(rec.Payload):
					t.Errorf("Save(%s from version %d) returned version %d, payload %q", id, rec.Version, saved.Version, saved.Payload)
				}
				mu.Lock()
				wins[id] = append(wins[id], success{from: rec.Version, payload: string(rec.Payload)})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for id, ws := range wins {
		byFrom := map[int64]success{}
		var last int64 = -1
		for _, s := range ws {
			if prev, ok := byFrom[s.from]; ok {
				t.Fatalf("%s: two saves from version %d succeeded (%q and %q): a lost update", id, s.from, prev.payload, s.payload)
			}
			byFrom[s.from] = s
			last = max(last, s.from)
		}
		for v := range last + 1 {
			if _, ok := byFrom[v]; !ok {
				t.Fatalf("%s: no successful save from version %d, yet one from %d", id, v, last)
			}
		}
		got, err := stores[0].Load(t.Context(), id)
		if err != nil {
			t.Fatalf("Load(%s): %v", id, err)
		}
		if got.Version != last+1 || string(got.Payload) != byFrom[last].payload {
			t.Fatalf("%s: stored version %d, payload %q; want %d, %q (the last successful save)", id, got.Version, got.Payload, last+1, byFrom[last].payload)
		}
	}
}

// recordSaveAll completes a claimed batch in one call, beside records
// that must fail alone: a stale version, a bad name, an unknown group, a
// record given twice (the second from the first's new version).
func recordSaveAll(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	ctx := t.Context()
	for _, id := range []string{"a", "b", "c", "d"} {
		b.save(t, newRecord(id, g))
	}
	held := b.claimNext(t, g, "w", time.Minute, 4) // a b c d, version 2
	done := func(rec record.Record, payload string) record.Record {
		rec.Status, rec.Payload, rec.Lease.Owner = record.Completed, []byte(payload), ""
		return rec
	}
	stale := done(held[2], "stale")
	stale.Version--
	again := done(held[3], "d again")
	again.Version++
	orphan := newRecord("orphan", "no such group")
	newTenant := done(held[1], "b in a new tenant")
	newTenant.Tenant, newTenant.Version = "fresh", 1 // stale: held at version 2
	recs := []record.Record{
		done(held[0], "a done"),
		stale,
		{ID: "", Group: g, Status: record.Active},
		done(held[3], "d done"),
		orphan,
		again,
		newTenant,
		done(held[1], "b done"),
	}
	want := []error{nil, steaderr.ErrConflict, steaderr.ErrInvalidName, nil, steaderr.ErrUnknownGroup, nil, steaderr.ErrConflict, nil}
	res := b.store.SaveAll(ctx, recs)
	if len(res) != len(recs) {
		t.Fatalf("SaveAll returned %d results for %d records", len(res), len(recs))
	}
	for i, r := range res {
		if want[i] == nil {
			if r.Err != nil {
				t.Fatalf("SaveAll record %d (%q): %v", i, recs[i].ID, r.Err)
			}
			w := withSaved(recs[i], recs[i].Version+1, b.now())
			w.Lease.Incarnation = recs[i].Lease.Incarnation
			wantRecord(t, fmt.Sprintf("SaveAll record %d", i), r.Record, w)
			continue
		}
		wantErr(t, r.Err, want[i], fmt.Sprintf("SaveAll record %d (%q)", i, recs[i].ID))
	}
	for _, id := range []string{"a", "b", "d"} {
		if got := b.load(t, id); got.Status != record.Completed || got.Tenant != "" {
			t.Fatalf("Load(%q) after SaveAll: status %q, tenant %q", id, got.Status, got.Tenant)
		}
	}
	if got := b.load(t, "d"); string(got.Payload) != "d again" || got.Version != 4 {
		t.Fatalf("Load(d): payload %q, version %d; want the second save's, version 4", got.Payload, got.Version)
	}
	wantRecord(t, "Load(c), saved stale", b.load(t, "c"), held[2])
	b.wantAbsent(t, "orphan")
	if len(b.store.SaveAll(ctx, nil)) != 0 {
		t.Fatal("SaveAll of nothing returned results")
	}

	// A cancelled call saves nothing and says so for every record.
	before := b.load(t, "c")
	res = b.store.SaveAll(cancelled(t), []record.Record{done(before, "x"), newRecord("e", g)})
	for i, r := range res {
		wantErr(t, r.Err, context.Canceled, fmt.Sprintf("cancelled SaveAll record %d", i))
	}
	wantRecord(t, "Load(c) after a cancelled SaveAll", b.load(t, "c"), before)
	b.wantAbsent(t, "e")
}
