package enginetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

// recordSaveStress has many goroutines, through two stores, create and
// update an overlapping set of records, each save from the version it
// last read, so that engines batching saves (group commit) get batches
// holding a record more than once and stale versions beside fresh ones.
// It checks the outcome against the compare-and-swap model: per record,
// exactly one create succeeds, every successful update moved the version
// it read up by one (no two from the same version), and the stored
// record is the last successful save's.
func recordSaveStress(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	stores := []*record.Store{b.store, record.NewStore(b.recs, record.Options{Now: b.clock.Now})}
	const (
		workers = 16
		rounds  = 40
		ids     = 6
	)
	type success struct {
		from    int64 // the version saved from (0: created)
		payload string
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
				saved, err := store.Save(ctx, rec)
				switch {
				case errors.Is(err, steaderr.ErrConflict):
					continue
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
		got := b.load(t, id)
		if got.Version != last+1 || string(got.Payload) != byFrom[last].payload {
			t.Fatalf("%s: stored version %d, payload %q; want %d, %q (the last successful save)", id, got.Version, got.Payload, last+1, byFrom[last].payload)
		}
	}
}
