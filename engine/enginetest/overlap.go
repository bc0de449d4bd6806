package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

// testOverlap covers concurrent callers whose key sets overlap (neither
// identical nor disjoint), and calls whose context ends while their
// statement runs.
func testOverlap(t *testing.T, h Harness) {
	runTests(t, h, []suiteTest{
		{"BlobWriters", overlapBlobWriters},
		{"RecordCreators", overlapRecordCreators},
		{"CancelMidCall", overlapCancelMidCall},
	})
}

// overlapWindows returns, for each of n workers, the indexes of its keys:
// a window of width w starting w/2 after its neighbour's, so that each key
// is shared by two workers and each worker shares keys with two others.
func overlapWindows(n, w int) [][]int {
	out := make([][]int, n)
	for i := range out {
		for j := range w {
			out[i] = append(out[i], i*w/2+j)
		}
	}
	return out
}

// Writers put overlapping key sets at once: every put succeeds and every
// value reads back whole; then, their pins expired, they delete
// overlapping sets at once: each key is deleted exactly once, the other
// attempt finding it gone.
func overlapBlobWriters(t *testing.T, h Harness) {
	const workers, width = 6, 8
	b := setup(t, h)
	windows := overlapWindows(workers, width)
	value := func(i int) []byte { return testValue(fmt.Sprint("overlap", i), 100+i) }
	var wg sync.WaitGroup
	for _, win := range windows {
		wg.Go(func() {
			for _, i := range win {
				if _, err := b.store.Put(t.Context(), bytes.NewReader(value(i))); err != nil {
					t.Errorf("Put %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	total := (workers-1)*width/2 + width
	for i := range total {
		wantValue(t, b.store, blob.KeyOf(value(i)), value(i))
	}
	wantAscending(t, "List after overlapping puts", mustList(t, b.store, blob.Key{}, 1000))
	if n := len(mustList(t, b.store, blob.Key{}, 1000)); n != total {
		t.Fatalf("%d blobs after overlapping puts, want %d", n, total)
	}

	b.expirePins()
	deleted := make([]int, total)
	var mu sync.Mutex
	for _, win := range windows {
		wg.Go(func() {
			for _, i := range win {
				err := b.store.Delete(t.Context(), blob.KeyOf(value(i)))
				switch {
				case err == nil:
					mu.Lock()
					deleted[i]++
					mu.Unlock()
				case !errors.Is(err, steaderr.ErrNotFound):
					t.Errorf("Delete %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	for i, n := range deleted {
		if n != 1 {
			t.Errorf("blob %d deleted %d times, want exactly once", i, n)
		}
	}
	wantNothingStored(t, b.store)
}

// Creators race to create overlapping sets of records: each id is created
// by exactly one of them; the others get ErrConflict.
func overlapRecordCreators(t *testing.T, h Harness) {
	const workers, width = 6, 8
	eng := newEngine(t, h)
	store := record.NewStore(eng.Records(), record.Options{})
	if err := store.RegisterGroup(t.Context(), "g"); err != nil {
		t.Fatal(err)
	}
	windows := overlapWindows(workers, width)
	total := (workers-1)*width/2 + width
	created := make([]string, total)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w, win := range windows {
		wg.Go(func() {
			for _, i := range win {
				_, err := store.Save(t.Context(), record.Record{ID: fmt.Sprint("r", i), Group: "g", Status: record.Active, Payload: []byte(fmt.Sprint(w))})
				switch {
				case err == nil:
					mu.Lock()
					if created[i] != "" {
						t.Errorf("record %d created twice, by %s and %d", i, created[i], w)
					}
					created[i] = fmt.Sprint(w)
					mu.Unlock()
				case !errors.Is(err, steaderr.ErrConflict):
					t.Errorf("Save r%d by %d: %v", i, w, err)
				}
			}
		})
	}
	wg.Wait()
	for i, by := range created {
		rec, err := store.Load(t.Context(), fmt.Sprint("r", i))
		if err != nil {
			t.Fatalf("Load r%d: %v", i, err)
		}
		if by == "" || string(rec.Payload) != by || rec.Version != 1 {
			t.Errorf("r%d: version %d, payload %q; created by %q", i, rec.Version, rec.Payload, by)
		}
	}
}

// Calls whose context ends at a random moment, often while the statement
// runs: each either takes effect whole or not at all. A cancelled call may
// still take effect after it returned (the server may commit a statement
// its client stopped waiting for), so each round writes a record and a blob
// of its own, and checks only that they are whole, never which way a
// cancelled call went.
func overlapCancelMidCall(t *testing.T, h Harness) {
	eng := newEngine(t, h)
	b := bundleOf(t, eng, blob.Options{})
	store := record.NewStore(eng.Records(), record.Options{})
	if err := store.RegisterGroup(t.Context(), "g"); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	cancelled := 0
	for i := range 60 {
		id := fmt.Sprint("r", i)
		rec, err := store.Save(t.Context(), record.Record{ID: id, Group: "g", Status: record.Active, Payload: []byte("before")})
		if err != nil {
			t.Fatal(err)
		}
		next := rec
		next.Payload = fmt.Appendf(nil, "after %d", i)
		value := testValue(fmt.Sprint("cancel", i), 1000+i)

		// Log-uniform from 1µs to 32ms: some calls end before they start,
		// some mid-statement, some not at all, on every engine.
		ctx, cancel := context.WithTimeout(t.Context(), time.Duration(math.Exp2(15*rng.Float64()))*time.Microsecond)
		_, putErr := b.store.Put(ctx, bytes.NewReader(value))
		_, saveErr := store.Save(ctx, next)
		cancel()
		for _, err := range []error{putErr, saveErr} {
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: %v, want success or the context's error", i, err)
			}
		}
		if putErr != nil || saveErr != nil {
			cancelled++
		}
		rd, err := b.store.Get(t.Context(), blob.KeyOf(value))
		switch {
		case err == nil:
			rd.Close()
			wantValue(t, b.store, blob.KeyOf(value), value)
		case putErr == nil || !errors.Is(err, steaderr.ErrNotFound):
			t.Fatalf("round %d: Get after Put (%v): %v", i, putErr, err)
		}
		got, err := store.Load(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		before := got.Version == rec.Version && bytes.Equal(got.Payload, rec.Payload)
		after := got.Version == rec.Version+1 && bytes.Equal(got.Payload, next.Payload)
		if !before && !after || saveErr == nil && !after {
			t.Fatalf("round %d: Save (%v) left version %d %q; want version %d %q, or %d %q if it may have failed",
				i, saveErr, got.Version, got.Payload, rec.Version+1, next.Payload, rec.Version, rec.Payload)
		}
	}
	t.Logf("%d of 60 rounds cancelled", cancelled)
	mustPut(t, b.store, []byte("after the cancellations"))
}
