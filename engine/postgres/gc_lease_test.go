package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/pgtest"
	"github.com/steadkit/stead/steaderr"
)

// A sweep whose lease session is terminated mid-sweep deletes nothing more
// and fails with ErrLost, so a second sweeper, free to take the lease at
// once, never deletes alongside it.
func TestSweepStopsWhenLeaseSessionDies(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e1, e2 := open(t, db, ""), open(t, db, "")
	ctx := context.Background()
	s := blob.NewStore(e1.Blobs(), blob.Options{PinTTL: time.Millisecond})
	for i := range 60 {
		if _, err := s.Put(ctx, bytesReader(i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond) // the puts' pins expire
	col1 := gc.New(e1.GC(), gc.Options{Grace: time.Microsecond, Batch: 5, Holder: "one"})
	col2 := gc.New(e2.GC(), gc.Options{Grace: time.Microsecond, Batch: 5, Holder: "two"})
	if _, err := col1.Sweep(ctx, gc.SweepOptions{}); err != nil { // stages
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // past the grace
	var atKill int64 = -1
	rep, err := col1.Sweep(ctx, gc.SweepOptions{Progress: func(r gc.Report) {
		if atKill >= 0 || r.Deleted < 5 {
			return
		}
		atKill = r.Deleted
		pid := leaseBackend(t, db, e1)
		if pid == 0 {
			t.Fatal("no backend holds the sweep lease mid-sweep")
		}
		if _, err := db.Admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		waitNoLeaseBackend(t, db, e1)
	}})
	if atKill < 0 {
		t.Fatalf("the sweep never deleted 5 blobs: %+v, %v", rep, err)
	}
	if rep.Deleted != atKill {
		t.Errorf("sweep deleted %d blobs after its lease session was terminated", rep.Deleted-atKill)
	}
	if !errors.Is(err, steaderr.ErrLost) {
		t.Errorf("sweep after its lease session died = %v, want ErrLost", err)
	}
	// The lease is free: another sweeper finishes the work.
	deleted := rep.Deleted
	for range 2 {
		rep2, err := col2.Sweep(ctx, gc.SweepOptions{})
		if err != nil || rep2.Aborted != "" {
			t.Fatalf("second sweeper after the first lost its lease = %+v, %v; want it to run", rep2, err)
		}
		deleted += rep2.Deleted
		time.Sleep(2 * time.Millisecond)
	}
	if deleted != 60 {
		t.Errorf("the sweeps deleted %d blobs in all, want 60", deleted)
	}
}

// waitNoLeaseBackend waits until no backend holds e's sweep lease.
func waitNoLeaseBackend(t *testing.T, db *pgtest.DB, e *postgres.Engine) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); leaseBackend(t, db, e) != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the terminated lease backend still holds the lease")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Behind PgBouncer the lease row names one sweep, not one process: a second
// sweep of the same Collector is SweeperBusy, the first's Release leaves
// nobody else's row, and a sweep whose row was taken deletes nothing more.
func TestSweepLeaseRowIsPerSweep(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e := open(t, db, "&pgbouncer=true")
	ctx := context.Background()
	l1, ok, err := e.GC().AcquireSweep(ctx, "inst")
	if err != nil || !ok {
		t.Fatalf("first AcquireSweep = %v, %v", ok, err)
	}
	if _, ok, err := e.GC().AcquireSweep(ctx, "inst"); err != nil || ok {
		t.Fatalf("second AcquireSweep by the same holder = %v, %v; want refused", ok, err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}

	s := blob.NewStore(e.Blobs(), blob.Options{PinTTL: time.Millisecond})
	for i := range 20 {
		if _, err := s.Put(ctx, bytesReader(i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	col := gc.New(e.GC(), gc.Options{Grace: time.Microsecond, Batch: 5, Holder: "inst"})
	if _, err := col.Sweep(ctx, gc.SweepOptions{}); err != nil { // stages
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	var inner gc.Report
	var innerErr error
	atSteal := int64(-1)
	rep, err := col.Sweep(ctx, gc.SweepOptions{Progress: func(r gc.Report) {
		if r.Deleted < 5 || atSteal >= 0 {
			return
		}
		atSteal = r.Deleted
		inner, innerErr = col.Sweep(ctx, gc.SweepOptions{})
		// Another sweeper takes the row (as if it had lapsed).
		if _, err := db.Admin.Exec(ctx, "UPDATE "+pgxIdent(db.Schema)+".gc_lease SET holder = 'thief'"); err != nil {
			t.Fatal(err)
		}
	}})
	if innerErr != nil || inner.Aborted != gc.SweeperBusy {
		t.Errorf("concurrent second sweep of one Collector = %+v, %v; want SweeperBusy", inner, innerErr)
	}
	if atSteal < 0 {
		t.Fatalf("the sweep never deleted 5 blobs: %+v, %v", rep, err)
	}
	if rep.Deleted != atSteal || !errors.Is(err, steaderr.ErrLost) {
		t.Errorf("sweep whose lease row was taken: deleted %d more, err %v; want none, ErrLost", rep.Deleted-atSteal, err)
	}
	var holder string
	if err := db.Admin.QueryRow(ctx, "SELECT holder FROM "+pgxIdent(db.Schema)+".gc_lease").Scan(&holder); err != nil || holder != "thief" {
		t.Errorf("lease row after the robbed sweep's release = %q, %v; want the thief's row kept", holder, err)
	}
}

func pgxIdent(s string) string { return pgx.Identifier{s}.Sanitize() }
