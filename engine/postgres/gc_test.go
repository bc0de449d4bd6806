package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/enginetest"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/steaderr"
)

// leaseBackend returns the pid of the backend holding e's sweep lease, or 0.
func leaseBackend(t *testing.T, db *pgtest.DB, e *postgres.Engine) int {
	t.Helper()
	return advisoryBackend(t, db, postgres.SweepLockKey(e))
}

// advisoryBackend returns the pid of the backend holding the session
// advisory lock key, or 0.
func advisoryBackend(t *testing.T, db *pgtest.DB, key int64) int {
	t.Helper()
	var pid int
	err := db.Admin.QueryRow(context.Background(), `SELECT coalesce(max(pid), 0) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND classid::bigint = ($1::bigint >> 32) & 4294967295 AND objid::bigint = $1::bigint & 4294967295`, key).Scan(&pid)
	if err != nil {
		t.Fatalf("finding the lock's backend: %v", err)
	}
	return pid
}

// TestSweepLeaseSession: the lease is a session lock on a connection of its
// own; killing that backend frees it, and Release unlocks on that same
// connection (the pool's sessions never hold it).
func TestSweepLeaseSession(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e1, e2 := open(t, db, ""), open(t, db, "")
	ctx := context.Background()
	lease, ok, err := e1.GC().AcquireSweep(ctx, "one")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep = %v, %v", ok, err)
	}
	pid := leaseBackend(t, db, e1)
	if pid == 0 {
		t.Fatal("no backend holds the lease")
	}
	var poolPids []int
	rows, _ := e1.Pool().Query(ctx, "SELECT pg_backend_pid()")
	for rows.Next() {
		var p int
		rows.Scan(&p)
		poolPids = append(poolPids, p)
	}
	for _, p := range poolPids {
		if p == pid {
			t.Fatal("the lease is held by a pooled connection")
		}
	}
	if _, ok, _ := e2.GC().AcquireSweep(ctx, "two"); ok {
		t.Fatal("a second engine took a held lease")
	}
	if _, err := db.Admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatalf("pg_terminate_backend: %v", err)
	}
	var lease2 gc.Lease
	testkit.Until(t, "the lease to be free after its backend died", func() bool {
		var err error
		lease2, ok, err = e2.GC().AcquireSweep(ctx, "two")
		if err != nil {
			t.Fatalf("AcquireSweep: %v", err)
		}
		return ok
	})
	if err := lease.Release(ctx); err == nil {
		t.Error("releasing a lease whose session died reported success")
	}
	if leaseBackend(t, db, e1) == 0 {
		t.Fatal("releasing the dead lease released the live one")
	}
	if err := lease2.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if pid := leaseBackend(t, db, e1); pid != 0 {
		t.Fatalf("backend %d still holds the lease after Release", pid)
	}
}

// TestSweepPoolOfOne: the lease's connection is not taken from the pool,
// so a sweep on a pool of one connection runs to its end.
func TestSweepPoolOfOne(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e := open(t, db, "&pool_max_conns=1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := blob.NewStore(e.Blobs(), blob.Options{PinTTL: time.Millisecond})
	for i := range 20 {
		if _, err := s.Put(ctx, bytesReader(i)); err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	col := gc.New(e.GC(), gc.Options{Grace: time.Microsecond, Batch: 3, AllUnreferenced: true})
	for range 2 {
		rep, err := col.Sweep(ctx, gc.SweepOptions{})
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		t.Log(rep)
		time.Sleep(time.Millisecond)
	}
	var n int
	if err := e.Blobs().List(ctx, blob.Key{}, 1000, func(blob.Info) bool { n++; return true }); err != nil || n != 0 {
		t.Fatalf("%d blobs left, %v; want every unpinned blob deleted", n, err)
	}
}

// TestGoSourceRefused: a sweep in another process could not consult a Go
// function, so PostgreSQL refuses it, pointing to SQL sources and pins.
func TestGoSourceRefused(t *testing.T) {
	t.Parallel()
	e := open(t, pgtest.New(t), "")
	col := gc.New(e.GC(), gc.Options{})
	err := col.RegisterSource(context.Background(), gc.Source{Name: "refs", Referenced: func(context.Context, blob.Key) (bool, error) { return true, nil }})
	if !errors.Is(err, steaderr.ErrInvalidArgument) {
		t.Fatalf("RegisterSource(Go function) = %v, want ErrInvalidArgument", err)
	}
	for _, want := range []string{"SQL source", "pin"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestSweepCancelled: a sweep whose context ends mid-way stops with the
// context's error, deletes nothing protected, and frees the lease for the
// next sweep, which finishes the work.
func TestSweepCancelled(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e := open(t, db, "")
	ctx := context.Background()
	s := blob.NewStore(e.Blobs(), blob.Options{PinTTL: time.Millisecond})
	const n = 60
	for i := range n {
		if _, err := s.Put(ctx, bytesReader(i)); err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	keep, err := blob.NewStore(e.Blobs(), blob.Options{}).Put(ctx, bytesReader(n)) // pinned for a minute
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	time.Sleep(5 * time.Millisecond)
	col := gc.New(e.GC(), gc.Options{Grace: time.Microsecond, Batch: 5, AllUnreferenced: true})
	if _, err := col.Sweep(ctx, gc.SweepOptions{}); err != nil { // stages
		t.Fatalf("Sweep: %v", err)
	}
	time.Sleep(time.Millisecond)
	cctx, cancel := context.WithCancel(ctx)
	_, err = col.Sweep(cctx, gc.SweepOptions{Progress: func(r gc.Report) {
		if r.Deleted > 0 {
			cancel()
		}
	}})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Sweep = %v, want context.Canceled", err)
	}
	for range 3 {
		rep, err := col.Sweep(ctx, gc.SweepOptions{})
		if err != nil || rep.Aborted != "" {
			t.Fatalf("Sweep after a cancelled one = %+v, %v", rep, err)
		}
		time.Sleep(time.Millisecond)
	}
	var left []blob.Key
	if err := e.Blobs().List(ctx, blob.Key{}, 1000, func(info blob.Info) bool { left = append(left, info.Key); return true }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0] != keep {
		t.Fatalf("left %v, want only the pinned %s", left, keep)
	}
}

// TestRenewRacingArbitration: a renewal that judged its pin live before
// the pin expired, but commits after an arbitration judged it expired,
// must not leave a live pin on a deleted blob. Here the renewal is held
// back by a row lock; the arbitration must wait for it and keep the blob.
// Both homes of a pin are raced: a row of pins (a guard's), and the
// blob's own row (the first put's pin), which a waiting Delete meets.
func TestRenewRacingArbitration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, table string
		arbitrate   func(e *postgres.Engine, key blob.Key, now time.Time) (blob.Verdict, error)
	}{
		{"pins row, sweep", "pins", func(e *postgres.Engine, key blob.Key, now time.Time) (blob.Verdict, error) {
			vs, err := e.GC().Arbitrate(context.Background(), gc.ArbitrateParams{Keys: []blob.Key{key}, Now: now})
			if err != nil {
				return blob.Verdict{}, err
			}
			return vs[0], nil
		}},
		{"blob row, delete", "blobs", func(e *postgres.Engine, key blob.Key, now time.Time) (blob.Verdict, error) {
			vs, err := e.Blobs().Delete(context.Background(), blob.DeleteParams{Keys: []blob.Key{key}, Now: now})
			if err != nil {
				return blob.Verdict{}, err
			}
			return vs[0], nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			e := open(t, db, "")
			ctx := context.Background()
			value := []byte("renewed late")
			key := blob.KeyOf(value)
			t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			owner := "o"
			if tc.table == "pins" {
				owner = "first" // the put's pin is in the blob's row; o's is a row of pins
			}
			if _, err := e.Blobs().Put(ctx, blob.PutParams{Key: key, Value: value, Owner: owner, TTL: time.Minute, Now: t0}); err != nil {
				t.Fatalf("Put: %v", err)
			}
			if tc.table == "pins" {
				if err := e.Blobs().Pin(ctx, blob.PinParams{Key: key, Owner: "o", TTL: time.Minute, Now: t0}); err != nil {
					t.Fatalf("Pin: %v", err)
				}
			}
			tx, err := db.Admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, "SELECT 1 FROM "+pgx.Identifier{db.Schema, tc.table}.Sanitize()+" WHERE key = $1 FOR UPDATE", key.String()); err != nil {
				t.Fatal(err)
			}
			renewed := make(chan error, 1)
			go func() {
				ok, err := e.Blobs().RenewPin(ctx, blob.PinParams{Key: key, Owner: "o", TTL: time.Minute, Now: t0.Add(50 * time.Second)})
				if err == nil && !ok {
					err = errors.New("not renewed")
				}
				renewed <- err
			}()
			waitLockWaiters(t, db, 1, "the renewal to wait on the held row")
			judged := make(chan blob.Verdict, 1)
			go func() {
				v, err := tc.arbitrate(e, key, t0.Add(70*time.Second))
				if err != nil {
					t.Errorf("arbitration: %v", err)
				}
				judged <- v
			}()
			waitLockWaiters(t, db, 2, "the arbitration to wait behind the renewal")
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-renewed; err != nil {
				t.Fatalf("RenewPin: %v", err)
			}
			if v := <-judged; v.Outcome != blob.Protected {
				t.Fatalf("arbitration = %+v, want Protected by the renewal it waited for", v)
			}
			if _, err := e.Blobs().Stat(ctx, key); err != nil {
				t.Fatalf("Stat after the race: %v", err)
			}
		})
	}
}

// TestSharedChildrenPoolOfOne races parents sharing children against
// arbitrations on a pool of one connection: the shared child locks
// (FOR KEY SHARE) and the arbitration's FOR UPDATE then take turns on the
// one connection, and the suite's guarantee still holds.
func TestSharedChildrenPoolOfOne(t *testing.T) {
	t.Parallel()
	enginetest.SharedChildrenRace(t, enginetest.Harness{
		New: func(t *testing.T) engine.Engine { return open(t, pgtest.Stead(t, false), "&pool_max_conns=1") },
	}, 6)
}
