package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/steaderr"
)

// longTTL is a lease no test waits out: a waiter that gets the lock did
// not get it by expiry.
const longTTL = time.Hour

func lockStore(e *postgres.Engine) *lock.Store { return lock.NewStore(e.Locks(), lock.Options{}) }

// refusals wraps a lock.Backend, counting refused attempts of waiters.
type refusals struct {
	lock.Backend
	n atomic.Int64
}

func (r *refusals) Acquire(ctx context.Context, p lock.AcquireParams) (lock.AcquireResult, error) {
	res, err := r.Backend.Acquire(ctx, p)
	if err == nil && !res.Granted && p.Wait {
		r.n.Add(1)
	}
	return res, err
}

func mustTryLock(t *testing.T, s *lock.Store, name, owner string) *lock.Lock {
	t.Helper()
	lk, ok, err := s.TryLock(t.Context(), name, owner, longTTL)
	if err != nil || !ok {
		t.Fatalf("TryLock(%q, %q) = %v, %v", name, owner, ok, err)
	}
	return lk
}

func mustRelease(t *testing.T, lk *lock.Lock) {
	t.Helper()
	if ok, err := lk.Release(t.Context()); !ok || err != nil {
		t.Fatalf("Release of %q by %q = %v, %v", lk.Name(), lk.Owner(), ok, err)
	}
}

// listenerPID waits until e's listener is listening and returns its
// backend's pid; not the pid except.
func listenerPID(t *testing.T, db *pgtest.DB, e *postgres.Engine, except int32) int32 {
	t.Helper()
	listen := postgres.ListenQuery(e)
	var pid int32
	testkit.Until(t, "a backend running "+listen, func() bool {
		err := db.Admin.QueryRow(t.Context(),
			"SELECT pid FROM pg_stat_activity WHERE query = $1 AND state = 'idle' AND pid <> $2", listen, except).Scan(&pid)
		return err == nil
	})
	return pid
}

// waiter starts Lock(name, owner), with a deadline far below the holder's
// lease, and returns once it was refused as a waiter, the listener live:
// it is subscribed to releases and only a wake-up can make it try again
// before the lease ends.
func waiter(t *testing.T, e *postgres.Engine, name, owner string) <-chan *lock.Lock {
	t.Helper()
	spy := &refusals{Backend: e.Locks()}
	ctx, cancel := context.WithTimeout(t.Context(), testkit.Timeout)
	done := make(chan *lock.Lock, 1)
	go func() {
		defer cancel()
		lk, err := lock.NewStore(spy, lock.Options{}).Lock(ctx, name, owner, longTTL)
		if err != nil {
			t.Errorf("Lock(%q, %q): %v", name, owner, err)
		}
		done <- lk
	}()
	testkit.Until(t, fmt.Sprintf("Lock(%q, %q) to be refused", name, owner), func() bool { return spy.n.Load() > 0 })
	return done
}

func mustGet(t *testing.T, done <-chan *lock.Lock) *lock.Lock {
	t.Helper()
	lk := <-done
	if lk == nil {
		t.FailNow()
	}
	return lk
}

// contended returns an engine where alice holds "job" and bob waits for
// it, and the listener's backend pid.
func contended(t *testing.T) (db *pgtest.DB, e *postgres.Engine, alice *lock.Lock, bob <-chan *lock.Lock, pid int32) {
	t.Helper()
	db = pgtest.New(t)
	e = open(t, db, "")
	alice = mustTryLock(t, lockStore(e), "job", "alice")
	bob = waiter(t, e, "job", "bob")
	return db, e, alice, bob, listenerPID(t, db, e, 0)
}

func TestLockReleaseWakesWaiter(t *testing.T) {
	t.Parallel()
	// Once the listener listens, the notification, not its start, wakes bob.
	_, _, alice, bob, _ := contended(t)
	mustRelease(t, alice)
	mustGet(t, bob)
}

// TestLockListenerReconnects kills the listener's backend and releases the
// lock before the listener is back: the waiter still wakes, and once the
// listener is back releases wake waiters again.
func TestLockListenerReconnects(t *testing.T) {
	t.Parallel()
	db, e, alice, bob, pid := contended(t)
	if _, err := db.Admin.Exec(t.Context(), "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	mustRelease(t, alice)
	lk := mustGet(t, bob)
	listenerPID(t, db, e, pid)
	carol := waiter(t, e, "job", "carol")
	mustRelease(t, lk)
	mustGet(t, carol)
}

// TestLockSurvivesSessionLoss: unlike a session advisory lock, a lease is a
// row: killing every session of the holder's pool keeps it held, and the
// holder renews it once the pool has reconnected.
func TestLockSurvivesSessionLoss(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const app = "stead_lock_session_loss"
	e := open(t, db, "&application_name="+app)
	s := lockStore(open(t, db, ""))
	alice := mustTryLock(t, lockStore(e), "job", "alice")
	if _, err := db.Admin.Exec(t.Context(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.TryLock(t.Context(), "job", "bob", longTTL); ok || err != nil {
		t.Fatalf("TryLock after the holder's sessions died = %v, %v; want still held", ok, err)
	}
	testkit.Until(t, "Renew to work again", func() bool {
		ok, err := alice.Renew(t.Context(), longTTL)
		if err == nil && !ok {
			t.Fatal("Renew after the sessions died = false")
		}
		return err == nil
	})
}

func TestLockPgBouncerPolls(t *testing.T) {
	t.Parallel()
	e := open(t, pgtest.New(t), "&pgbouncer=true")
	ch, live, stop, err := e.Locks().WatchReleases(t.Context(), "job")
	defer stop()
	if ch != nil || live || err != nil {
		t.Fatalf("WatchReleases in PgBouncer mode = %v, %v, %v; want a nil channel, not live: no LISTEN", ch, live, err)
	}
}

// TestLockPgBouncerListenURL: with a direct listen URL, PgBouncer mode has
// a listener, and a release wakes the waiter (which the helper only lets
// through once it waits on a live watch).
func TestLockPgBouncerListenURL(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e := open(t, db, "&pgbouncer=true&listen_url="+url.QueryEscape(db.URL))
	alice := mustTryLock(t, lockStore(e), "job", "alice")
	bob := waiter(t, e, "job", "bob")
	mustRelease(t, alice)
	mustGet(t, bob)

	cfg, err := postgres.ParseURL(db.StoreURL() + "&listen_url=" + url.QueryEscape(db.URL))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Open(t.Context(), cfg); !errors.Is(err, steaderr.ErrInvalidArgument) {
		t.Fatalf("Open with a listen URL but not in PgBouncer mode = %v, want ErrInvalidArgument", err)
	}
}

// TestLockReleaseNotifies listens on the engine's channel itself: only a
// release that frees a lock someone waits for is announced, with the
// lock's name; others stay silent, sparing their commits NOTIFY's
// server-wide serialization.
func TestLockReleaseNotifies(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e := open(t, db, "")
	conn, err := pgx.Connect(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	if _, err := conn.Exec(t.Context(), "LISTEN "+pgx.Identifier{postgres.LockChannel(e)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	s := lockStore(e)
	a, b := mustTryLock(t, s, "a", "alice"), mustTryLock(t, s, "b", "alice")
	if _, ok, err := s.TryLock(t.Context(), "b", "carol", longTTL); ok || err != nil {
		t.Fatalf("TryLock of a held lock = %v, %v", ok, err) // refused, but not waiting
	}
	mustRelease(t, b)
	bob := waiter(t, e, "a", "bob")
	if ok, err := e.Locks().Release(t.Context(), lock.ReleaseParams{Name: "a", Owner: "bob", Token: a.Token()}); ok || err != nil {
		t.Fatalf("Release of another owner's grant = %v, %v", ok, err)
	}
	mustRelease(t, a)
	mustGet(t, bob)
	ctx, cancel := context.WithTimeout(t.Context(), testkit.Timeout)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	if err != nil || n.Payload != "a" {
		t.Fatalf("first notification = %+v, %v; want the release of a, which bob waited for", n, err)
	}
}

// TestLockListReadsItsRange shows with EXPLAIN ANALYZE that listing the
// held locks under a prefix reads the primary key over the prefix's range
// only, however many names, free or held, lie outside it.
func TestLockListReadsItsRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	e := open(t, db, "")
	schema := pgx.Identifier{db.Schema}.Sanitize()
	for _, fill := range []string{
		`SELECT 'a/' || i, NULL, 1, NULL FROM generate_series(1, 10000) i`,
		`SELECT 'z/' || i, 'o', 1, now() + interval '1 hour' FROM generate_series(1, 10000) i`,
		`SELECT 'm/held-' || i, 'o', 1, now() + interval '1 hour' FROM generate_series(1, 5) i`,
		`SELECT 'm/free-' || i, NULL, 1, NULL FROM generate_series(1, 10) i`,
	} {
		if _, err := db.Admin.Exec(ctx, "INSERT INTO "+schema+".locks (name, owner, token, expiry) "+fill); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Admin.Exec(ctx, "ANALYZE "+schema+".locks"); err != nil {
		t.Fatal(err)
	}
	got, err := lockStore(e).ListHeld(ctx, "m/", "", 100)
	if err != nil || len(got) != 5 {
		t.Fatalf("ListHeld(m/) = %d grants, %v; want 5", len(got), err)
	}
	query, args := positional(t, postgres.LockListSQL(e), pgx.StrictNamedArgs{
		"prefix": "'m/'", "prefix_end": "'m0'", "after": "''", "now": "NULL", "lim": "100",
	})
	conn, err := db.Admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	defer conn.Exec(context.WithoutCancel(ctx), "RESET plan_cache_mode")
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		var out []map[string]any
		_, err := conn.Exec(ctx, "PREPARE explained AS "+query)
		if err == nil {
			err = conn.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE explained ("+args+")").Scan(&out)
		}
		conn.Exec(ctx, "DEALLOCATE explained")
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		read := 0
		walkPlan(out[0]["Plan"].(map[string]any), func(node map[string]any) {
			if node["Relation Name"] != "locks" {
				return
			}
			if node["Node Type"] == "Seq Scan" {
				t.Fatalf("%s: the listing scans locks sequentially:\n%v", mode, out)
			}
			rows, _ := node["Actual Rows"].(float64)
			removed, _ := node["Rows Removed by Filter"].(float64)
			read += int(rows + removed)
		})
		t.Logf("%s read %d rows of locks", mode, read)
		if read > 15 {
			t.Fatalf("%s read %d rows of locks, want at most the 15 under m/:\n%v", mode, read, out)
		}
	}
}
