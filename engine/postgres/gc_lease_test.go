package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/lock"
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
	col1 := gc.New(e1.GC(), gc.Options{Grace: time.Microsecond, Batch: 5, Holder: "one", AllUnreferenced: true})
	col2 := gc.New(e2.GC(), gc.Options{Grace: time.Microsecond, Batch: 5, Holder: "two", AllUnreferenced: true})
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
	col := gc.New(e.GC(), gc.Options{Grace: time.Microsecond, Batch: 5, Holder: "inst", AllUnreferenced: true})
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

// TestSweepLeaseIdleSession: a sweeper that stops sending statements while
// it holds the lease (a stopped process) loses it once its session idles
// past idle_session_timeout: another sweeper takes the lease, and the
// stopped one's next arbitration fails with ErrLost.
func TestSweepLeaseIdleSession(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e1, e2 := open(t, db, ""), open(t, db, "")
	postgres.SetSweepIdle(e1, 200*time.Millisecond)
	ctx := context.Background()
	lease, ok, err := e1.GC().AcquireSweep(ctx, "stopped")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep = %v, %v", ok, err)
	}
	postgres.StopLeaseKeepAlive(lease) // as if its process were stopped
	testkit.Until(t, "the idle lease session to end, freeing the lease", func() bool {
		l, ok, err := e2.GC().AcquireSweep(ctx, "next")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			t.Cleanup(func() { l.Release(ctx) })
		}
		return ok
	})
	_, err = e1.GC().Arbitrate(ctx, gc.ArbitrateParams{Keys: []blob.Key{blob.KeyOf([]byte("x"))}, Lease: lease})
	if !errors.Is(err, steaderr.ErrLost) {
		t.Fatalf("the stopped sweeper's arbitration = %v, want ErrLost", err)
	}
	if err := lease.Renew(ctx); !errors.Is(err, steaderr.ErrLost) {
		t.Fatalf("its Renew = %v, want ErrLost", err)
	}
	// The engine takes the lease again once it is free.
	if err := lease.Release(ctx); err == nil {
		t.Error("releasing the lost lease reported success")
	}
}

// hookedEngine opens an engine on a caller's pool whose BeforeConnect
// supplies the database (as a credential-injecting hook would) and whose
// AfterConnect sets application_name to stead-hooked.
func hookedEngine(t *testing.T, db *pgtest.DB) *postgres.Engine {
	t.Helper()
	ctx := context.Background()
	pcfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	database := pcfg.ConnConfig.Database
	pcfg.ConnConfig.Database = "no_such_database_without_the_hook"
	pcfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.Database = database
		return nil
	}
	pcfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET application_name = 'stead-hooked'")
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return openConfig(t, postgres.Config{Pool: pool, Schema: db.Schema})
}

// applicationName returns the application_name of backend pid.
func applicationName(t *testing.T, db *pgtest.DB, pid int32) string {
	t.Helper()
	var app string
	if err := db.Admin.QueryRow(t.Context(), "SELECT application_name FROM pg_stat_activity WHERE pid = $1", pid).Scan(&app); err != nil {
		t.Fatal(err)
	}
	return app
}

// The sweep lease's own connection is opened as the caller's pool opens
// its connections: with its BeforeConnect and AfterConnect hooks.
func TestSweepLeaseUsesPoolHooks(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	e := hookedEngine(t, db)
	lease, ok, err := e.GC().AcquireSweep(ctx, "hooked")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep through a pool with hooks = %v, %v", ok, err)
	}
	defer lease.Release(ctx)
	if app := applicationName(t, db, int32(leaseBackend(t, db, e))); app != "stead-hooked" {
		t.Errorf("the lease's session has application_name %q: AfterConnect did not run on it", app)
	}
	col := gc.New(e.GC(), gc.Options{AllUnreferenced: true})
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := col.Sweep(ctx, gc.SweepOptions{}); err != nil {
		t.Fatalf("Sweep through a pool with hooks: %v", err)
	}
}

// So is the listener's connection, which wakes lock and record waiters.
func TestListenerUsesPoolHooks(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e := hookedEngine(t, db)
	holder := mustTryLock(t, lock.NewStore(e.Locks(), lock.Options{}), "hooked", "a")
	done := waiter(t, e, "hooked", "b")
	if app := applicationName(t, db, listenerPID(t, db, e, 0)); app != "stead-hooked" {
		t.Errorf("the listener's session has application_name %q: AfterConnect did not run on it", app)
	}
	mustRelease(t, holder)
	mustRelease(t, mustGet(t, done))
}

// Another caller's AcquireSweep, finding the lease held, never costs the
// holder its lease, whatever becomes of that caller's context.
func TestSweepLeaseBusyCheckKeepsHolder(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e := open(t, db, "")
	ctx := context.Background()
	a, ok, err := e.GC().AcquireSweep(ctx, "A")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep = %v, %v", ok, err)
	}
	defer a.Release(ctx)
	for i := range 200 {
		bctx, cancel := context.WithTimeout(ctx, time.Duration(50+i*10)*time.Microsecond)
		_, ok, err := e.GC().AcquireSweep(bctx, "B")
		cancel()
		if ok {
			t.Fatalf("attempt %d: B got the lease A holds", i)
		}
		if rerr := a.Renew(ctx); rerr != nil {
			t.Fatalf("attempt %d: B's AcquireSweep (err %v), its context ending, cost A its lease: %v", i, err, rerr)
		}
	}
}

// A sweeper stopped inside an arbitration (here a hook that blocks; a
// SIGSTOP or a frozen VM alike) holds its batch's rows only until its
// session idles past the lease's idle timeout: a put of a key of that
// batch completes while the sweeper is still stopped, and the sweeper,
// resumed, finds its lease lost.
func TestSweepStoppedInArbitration(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e1, e2 := open(t, db, ""), open(t, db, "")
	postgres.SetSweepIdle(e1, time.Second)
	ctx := context.Background()
	s1 := blob.NewStore(e1.Blobs(), blob.Options{PinTTL: time.Millisecond})
	for i := range 20 {
		if _, err := s1.Put(ctx, bytesReader(i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	col := gc.New(e1.GC(), gc.Options{Grace: time.Millisecond, AllUnreferenced: true})
	if _, err := col.Sweep(ctx, gc.SweepOptions{}); err != nil { // stages
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	entered, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	postgres.SetBeforeDelete(e1, func([]blob.Key) { once.Do(func() { close(entered); <-resume }) })
	swept := make(chan error, 1)
	go func() { _, err := col.Sweep(ctx, gc.SweepOptions{}); swept <- err }()
	<-entered
	// A put of a key of the stopped batch waits for the batch's rows.
	if _, err := blob.NewStore(e2.Blobs(), blob.Options{Owner: "other"}).Put(ctx, bytesReader(7)); err != nil {
		t.Fatalf("a put of a key of the stopped batch: %v", err)
	}
	close(resume)
	if err := <-swept; !errors.Is(err, steaderr.ErrLost) {
		t.Fatalf("the resumed sweep = %v, want ErrLost", err)
	}
}

// A sweep whose reap outlasts the lease's idle timeout keeps its lease:
// the session is kept alive while the sweep works elsewhere.
func TestSweepLongReapKeepsLease(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e := open(t, db, "")
	postgres.SetSweepIdle(e, 300*time.Millisecond)
	ctx := context.Background()
	s := blob.NewStore(e.Blobs(), blob.Options{PinTTL: time.Millisecond})
	for i := range 3 {
		if _, err := s.Put(ctx, bytesReader(i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	// The report's Progress runs after the reap: blocking it stands in
	// for a long reap, with the lease's session idle meanwhile.
	col := gc.New(e.GC(), gc.Options{Grace: time.Millisecond, AllUnreferenced: true})
	if _, err := col.Sweep(ctx, gc.SweepOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	first := true
	rep, err := col.Sweep(ctx, gc.SweepOptions{Progress: func(gc.Report) {
		if first {
			first = false
			time.Sleep(1500 * time.Millisecond) // five idle timeouts
		}
	}})
	if err != nil || rep.Deleted != 3 {
		t.Fatalf("a sweep that idled past the lease's timeout = %+v, %v; want its 3 blobs deleted", rep, err)
	}
}

// TestStageRefusedAfterRelease: Stage under a sweep lease no longer held
// (a session lease or a row lease, released) is refused with ErrLost, as
// StageRange is: the window is the sweeper's.
func TestStageRefusedAfterRelease(t *testing.T) {
	t.Parallel()
	for _, params := range []string{"", "&pgbouncer=true"} {
		e := open(t, pgtest.New(t), params)
		ctx := context.Background()
		s := blob.NewStore(e.Blobs(), blob.Options{})
		key, err := s.Put(ctx, bytesReader(1))
		if err != nil {
			t.Fatal(err)
		}
		lease, ok, err := e.GC().AcquireSweep(ctx, "inst")
		if err != nil || !ok {
			t.Fatalf("AcquireSweep = %v, %v", ok, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		err = e.GC().Stage(ctx, gc.StageParams{Keys: []blob.Key{key}, Lease: lease})
		if !errors.Is(err, steaderr.ErrLost) {
			t.Errorf("%q: Stage under a released lease = %v, want ErrLost", params, err)
		}
	}
}

// TestSweepLeaseSessionSettings: while the lease is held its session ends
// once idle for the lease's idle time; the release puts both timeouts back
// to the session's defaults, those of the engine's pooled sessions.
func TestSweepLeaseSessionSettings(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e := open(t, db, "")
	postgres.SetSweepIdle(e, 7*time.Second)
	ctx := context.Background()
	names := []string{"idle_session_timeout", "idle_in_transaction_session_timeout"}
	defaults := map[string]string{}
	for _, n := range names {
		var v string
		if err := e.Pool().QueryRow(ctx, "SELECT current_setting($1)", n).Scan(&v); err != nil {
			t.Fatal(err)
		}
		defaults[n] = v
	}
	lease, ok, err := e.GC().AcquireSweep(ctx, "settings")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep = %v, %v", ok, err)
	}
	for _, n := range names {
		if v, err := postgres.SweepSessionSetting(ctx, e, n); err != nil || v != "7s" {
			t.Errorf("held lease: %s = %q, %v; want 7s", n, v, err)
		}
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if v, err := postgres.SweepSessionSetting(ctx, e, n); err != nil || v != defaults[n] {
			t.Errorf("released lease: %s = %q, %v; want the default %q", n, v, err, defaults[n])
		}
	}
}
