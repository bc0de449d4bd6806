package faultengine_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/enginetest/faultengine"
	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/engine/sqlite"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// engines are the engines every fault test runs on, each fresh and
// migrated, closed when t ends.
var engines = []struct {
	name string
	open func(t *testing.T) engine.Engine
}{
	{"memory", func(t *testing.T) engine.Engine { return memory.New() }},
	{"sqlite", func(t *testing.T) engine.Engine {
		e, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "s.db")})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}},
	{"postgres", func(t *testing.T) engine.Engine {
		cfg, err := postgres.ParseURL(pgtest.New(t).StoreURL())
		if err != nil {
			t.Fatal(err)
		}
		e, err := postgres.Open(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}},
}

// eachEngine runs test on every engine, wrapped in a fault engine driven
// by a fresh Switch.
func eachEngine(t *testing.T, test func(t *testing.T, e *faultengine.Engine, faults *faultengine.Switch)) {
	for _, en := range engines {
		t.Run(en.name, func(t *testing.T) {
			t.Parallel()
			inner := en.open(t)
			t.Cleanup(func() { inner.Close() })
			if err := inner.Migrate(t.Context()); err != nil {
				t.Fatal(err)
			}
			faults := &faultengine.Switch{}
			test(t, faultengine.New(inner, faults), faults)
		})
	}
}

// A renewal that fails while Hold keeps a lock closes Lost at once, and
// Release reports the loss; a Release that fails may be retried.
func TestHoldRenewalFails(t *testing.T) {
	t.Parallel()
	eachEngine(t, func(t *testing.T, e *faultengine.Engine, faults *faultengine.Switch) {
		locks := lock.NewStore(e.Locks(), lock.Options{})
		const ttl = 300 * time.Millisecond
		h, err := locks.Hold(t.Context(), "held", "me", ttl)
		if err != nil {
			t.Fatal(err)
		}
		faults.Fail(faultengine.LockRenew)
		select {
		case <-h.Lost():
		case <-time.After(time.Minute):
			t.Fatal("Lost did not close after renewals began to fail")
		}
		if err := h.Err(); !errors.Is(err, steaderr.ErrLost) || !errors.Is(err, faultengine.ErrInjected) {
			t.Fatalf("Err = %v, want ErrLost wrapping the renewal's error", err)
		}
		faults.FailNext(faultengine.LockRelease, 1)
		if err := h.Release(t.Context()); !errors.Is(err, steaderr.ErrUnavailable) {
			t.Fatalf("Release that could not reach the engine = %v, want ErrUnavailable", err)
		}
		if err := h.Release(t.Context()); !errors.Is(err, steaderr.ErrLost) || errors.Is(err, steaderr.ErrUnavailable) {
			t.Fatalf("Release retried = %v, want ErrLost, and not the unavailability of a release that did not run", err)
		}
		if n := faults.Calls(faultengine.LockRelease); n != 2 {
			t.Fatalf("Release reached the engine %d times, want 2", n)
		}
		// The lock was released by the retry: another owner may take it.
		faults.Heal(faultengine.LockRenew)
		if _, ok, err := locks.TryLock(t.Context(), "held", "other", ttl); !ok || err != nil {
			t.Fatalf("TryLock by another owner after the release = %v, %v", ok, err)
		}
	})
}

// A probe error ends WaitClaimable with that error, at once; healed, the
// wait works again.
func TestWaitClaimableProbeError(t *testing.T) {
	t.Parallel()
	eachEngine(t, func(t *testing.T, e *faultengine.Engine, faults *faultengine.Switch) {
		records := record.NewStore(e.Records(), record.Options{})
		if err := records.RegisterGroup(t.Context(), "g"); err != nil {
			t.Fatal(err)
		}
		faults.FailNext(faultengine.RecordProbe, 1)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		err := records.WaitClaimable(ctx, "g")
		if !errors.Is(err, faultengine.ErrInjected) || !errors.Is(err, steaderr.ErrUnavailable) {
			t.Fatalf("WaitClaimable with a failing probe = %v, want the probe's error", err)
		}
		if _, err := records.Save(t.Context(), record.Record{ID: "r", Group: "g", Status: record.Active}); err != nil {
			t.Fatal(err)
		}
		if err := records.WaitClaimable(ctx, "g"); err != nil {
			t.Fatalf("WaitClaimable with a claimable record, healed: %v", err)
		}
		if n := faults.Calls(faultengine.RecordProbe); n != 2 {
			t.Fatalf("Probe called %d times, want 2", n)
		}
	})
}

// Random faults replay: the same seed fails the same calls.
func TestRandomIsDeterministic(t *testing.T) {
	t.Parallel()
	draw := func(seed uint64) []bool {
		r := faultengine.NewRandom(seed, 0.5, faultengine.BlobPut)
		var got []bool
		for range 64 {
			got = append(got, r.Inject(faultengine.BlobPut) != nil)
			if r.Inject(faultengine.BlobGet) != nil {
				t.Fatal("Random failed an operation it was not given")
			}
		}
		return got
	}
	a, b, c := draw(7), draw(7), draw(8)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 7 drew differently at call %d", i)
		}
	}
	same := true
	for i := range a {
		same = same && a[i] == c[i]
	}
	if same {
		t.Fatal("seeds 7 and 8 drew the same 64 faults")
	}
}

// A SaveAll whose batch fails gives every record the error and stores
// none of them; healed, the same batch saves.
func TestSaveAllFails(t *testing.T) {
	t.Parallel()
	eachEngine(t, func(t *testing.T, e *faultengine.Engine, faults *faultengine.Switch) {
		records := record.NewStore(e.Records(), record.Options{})
		if err := records.RegisterGroup(t.Context(), "g"); err != nil {
			t.Fatal(err)
		}
		batch := []record.Record{
			{ID: "a", Group: "g", Status: record.Active},
			{ID: "b", Group: "g", Status: record.Active},
		}
		faults.FailNext(faultengine.RecordSaveAll, 1)
		for i, res := range records.SaveAll(t.Context(), batch) {
			if !errors.Is(res.Err, faultengine.ErrInjected) {
				t.Fatalf("record %d of a failed batch: %v, want the batch's error", i, res.Err)
			}
		}
		for _, rec := range batch {
			if _, err := records.Load(t.Context(), rec.ID); !errors.Is(err, steaderr.ErrNotFound) {
				t.Fatalf("Load %s after a failed batch = %v, want ErrNotFound", rec.ID, err)
			}
		}
		for i, res := range records.SaveAll(t.Context(), batch) {
			if res.Err != nil {
				t.Fatalf("record %d of the batch, healed: %v", i, res.Err)
			}
		}
	})
}

// FailNextAfter fails a call that took effect: the upload's chunk is
// committed, the caller told otherwise, once; Heal ends it.
func TestFailNextAfter(t *testing.T) {
	t.Parallel()
	eachEngine(t, func(t *testing.T, e *faultengine.Engine, faults *faultengine.Switch) {
		ctx := t.Context()
		blobs := e.Blobs()
		set, err := blobs.BeginUpload(ctx, blob.BeginUploadParams{State: []byte("0"), Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		faults.FailNextAfter(faultengine.BlobWriteChunk, 1)
		err = blobs.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Data: []byte("abc"), State: []byte("3"), Lease: time.Minute})
		if !errors.Is(err, faultengine.ErrInjected) || !errors.Is(err, steaderr.ErrUnavailable) {
			t.Fatalf("WriteChunk failed after the call = %v, want an injected ErrUnavailable", err)
		}
		st, err := blobs.UploadStatus(ctx, set)
		if err != nil || st.Size != 3 || string(st.State) != "3" {
			t.Fatalf("UploadStatus after a write failed after its commit = %+v, %v; want the chunk committed", st, err)
		}
		if err := blobs.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: 3, Data: []byte("d"), State: []byte("4"), Lease: time.Minute}); err != nil {
			t.Fatalf("the next WriteChunk: %v, want the fault spent", err)
		}
		faults.FailNextAfter(faultengine.BlobWriteChunk, 5)
		faults.Heal(faultengine.BlobWriteChunk)
		if err := blobs.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: 4, Data: []byte("e"), State: []byte("5"), Lease: time.Minute}); err != nil {
			t.Fatalf("WriteChunk after Heal: %v", err)
		}
		// A call that fails on its own is not failed again after it.
		faults.FailNextAfter(faultengine.BlobWriteChunk, 1)
		if err := blobs.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: 0, Data: []byte("x"), State: []byte("x"), Lease: time.Minute}); !errors.Is(err, steaderr.ErrConflict) || errors.Is(err, faultengine.ErrInjected) {
			t.Fatalf("WriteChunk at a wrong offset = %v, want the engine's ErrConflict", err)
		}
		if err := blobs.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: 5, Data: []byte("f"), State: []byte("6"), Lease: time.Minute}); !errors.Is(err, faultengine.ErrInjected) {
			t.Fatalf("WriteChunk with the fault still armed = %v, want it injected", err)
		}
	})
}
