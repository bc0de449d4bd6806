package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/steaderr"
)

// wantUnavailable fails t unless err wraps steaderr.ErrUnavailable and
// still carries a driver error (a server error or a network one).
func wantUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	switch {
	case !errors.Is(err, steaderr.ErrUnavailable):
		t.Fatalf("%s = %v, want ErrUnavailable", what, err)
	case !errors.As(err, &pgErr) && !errors.As(err, &netErr) && !errors.As(err, &connectErr) && err.Error() == steaderr.ErrUnavailable.Error():
		t.Fatalf("%s = %v: the driver's error is not in the chain", what, err)
	}
}

// A server nobody listens for refuses the connection: Open says so with
// ErrUnavailable.
func TestUnavailableConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg, err := postgres.ParseURL("postgres://postgres@" + addr + "/postgres?connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	_, err = postgres.Open(t.Context(), cfg)
	wantUnavailable(t, "Open on a closed port", err)
	var netErr net.Error
	if !errors.As(err, &netErr) {
		t.Errorf("Open on a closed port = %v: no net.Error in the chain", err)
	}
}

// A wrong password or database is the caller's mistake, not
// unavailability, though it too fails the connect.
func TestConnectRefusedByServerIsNotUnavailable(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cfg, err := postgres.ParseURL(db.StoreURL())
	if err != nil {
		t.Fatal(err)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.Database = "no_such_database_" + db.Schema
	pool, err := pgxpool.NewWithConfig(t.Context(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	_, err = postgres.Open(t.Context(), postgres.Config{Pool: pool, Schema: db.Schema})
	if err == nil || errors.Is(err, steaderr.ErrUnavailable) {
		t.Fatalf("Open on a missing database = %v, want an error that is not ErrUnavailable", err)
	}
}

// A terminated backend (57P01) is unavailability; the pool recovers with
// a fresh session.
func TestUnavailableTerminatedBackend(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	app := "term_" + db.Schema
	cfg, err := postgres.ParseURL(db.StoreURL() + "&application_name=" + app)
	if err != nil {
		t.Fatal(err)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 1
	// No ping before reuse: the next statement meets the dead session.
	pcfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e, err := postgres.Open(ctx, postgres.Config{Pool: pool, Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	key := blob.KeyOf([]byte("x"))
	if _, err := e.Blobs().Put(ctx, blob.PutParams{Key: key, Value: []byte("x"), Owner: "test", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	var killed int
	// The second argument waits for the backend to be gone.
	if err := db.Admin.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminated %d backends: %v", killed, err)
	}
	_, err = e.Blobs().Get(ctx, key)
	wantUnavailable(t, "Get on a terminated backend", err)
	if _, err := e.Blobs().Get(ctx, key); err != nil {
		t.Fatalf("Get after the pool replaced the session: %v", err)
	}
}

// A statement on a connection pgx closed after its backend was terminated
// fails with "conn closed" and no server error: unavailability too, so
// that a caller retries rather than reporting an internal error.
func TestUnavailableConnClosed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	app := "closed_" + db.Schema
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.WithoutCancel(ctx)) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var killed int
	if err := db.Admin.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminated %d backends: %v", killed, err)
	}
	_, err = tx.Exec(ctx, "SELECT 1")
	wantUnavailable(t, "a statement on the terminated backend", postgres.InterpretError(err))
	_, err = tx.Exec(ctx, "SELECT 1")
	if !errors.Is(err, pgconn.ErrConnClosed) {
		t.Fatalf("second statement = %v, want pgx's conn closed", err)
	}
	if err := postgres.InterpretError(err); !errors.Is(err, steaderr.ErrUnavailable) {
		t.Fatalf("interpreted %q = %v, want ErrUnavailable", "conn closed", err)
	}
}

// With the server down every operation fails with ErrUnavailable, fast
// and never hanging; once it is up again the same engine works without
// reopening.
func TestUnavailableStoppedServer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := pgtest.NewCluster(t)
	e, cfg := openCluster(t, c)
	value := []byte("kept")
	key := blob.KeyOf(value)
	if _, err := e.Blobs().Put(ctx, blob.PutParams{Key: key, Value: value, Owner: "test", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	c.Stop(t)

	opCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	other := []byte("refused")
	ops := []struct {
		name string
		op   func() error
	}{
		{"Get", func() error { _, err := e.Blobs().Get(opCtx, key); return err }},
		{"Stat", func() error { _, err := e.Blobs().Stat(opCtx, key); return err }},
		{"Put", func() error {
			_, err := e.Blobs().Put(opCtx, blob.PutParams{Key: blob.KeyOf(other), Value: other, Owner: "test", TTL: time.Minute})
			return err
		}},
		{"List", func() error { return e.Blobs().List(opCtx, blob.Key{}, 100, func(blob.Info) bool { return true }) }},
		{"Acquire", func() error {
			_, err := e.Locks().Acquire(opCtx, lock.AcquireParams{Name: "l", Owner: "o", TTL: time.Second})
			return err
		}},
		{"SchemaVersion", func() error { _, _, err := e.SchemaVersion(opCtx); return err }},
	}
	for _, o := range ops {
		wantUnavailable(t, o.name+" with the server stopped", o.op())
	}
	_, err := postgres.Open(opCtx, cfg)
	wantUnavailable(t, "Open with the server stopped", err)

	c.Start(t)
	testkit.Until(t, "Get to work again", func() bool {
		got, err := e.Blobs().Get(ctx, key)
		return err == nil && string(got.Value) == string(value)
	})
	for _, o := range ops {
		if err := o.op(); err != nil {
			t.Errorf("%s after restart: %v", o.name, err)
		}
	}
}

// Backends killed while the body of an All loop runs: the walk goes on
// over fresh sessions or stops with ErrUnavailable, and a walk resumed
// after the last key yielded sees every blob exactly once.
func TestAllSurvivesKilledBackends(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	app := "walk_" + db.Schema
	e := open(t, db, "&pool_max_conns=2&application_name="+app)
	s := blob.NewStore(e.Blobs(), blob.Options{PageSize: 3})
	const n = 12
	want := map[blob.Key]bool{}
	for i := range n {
		key, err := s.Put(ctx, strings.NewReader(fmt.Sprint("walk ", i)))
		if err != nil {
			t.Fatal(err)
		}
		want[key] = true
	}
	seen := map[blob.Key]bool{}
	after := blob.Key{}
	for walks := 0; len(seen) < n; walks++ {
		if walks > 2*n {
			t.Fatalf("after %d walks saw %d of %d blobs", walks, len(seen), n)
		}
		for info, err := range s.All(ctx, after) {
			if err != nil {
				wantUnavailable(t, "All after its backends were killed", err)
				break
			}
			if seen[info.Key] || !want[info.Key] {
				t.Fatalf("All yielded %s again, or a key never stored", info.Key)
			}
			seen[info.Key], after = true, info.Key
			// Kill every session of the pool while the body runs.
			if _, err := db.Admin.Exec(ctx, "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE application_name = $1", app); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A Hold whose renewal meets a stopped server loses the lock at once; its
// Release fails while the server is down and may be retried, reporting the
// loss, once it is back.
func TestHoldWithServerStopped(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := pgtest.NewCluster(t)
	e, _ := openCluster(t, c)
	locks := lock.NewStore(e.Locks(), lock.Options{})
	h, err := locks.Hold(ctx, "held", "me", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Stop(t)
	select {
	case <-h.Lost():
	case <-time.After(time.Minute):
		t.Fatal("Lost did not close with the server stopped")
	}
	if err := h.Err(); !errors.Is(err, steaderr.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", err)
	}
	wantUnavailable(t, "Release with the server stopped", h.Release(ctx))
	c.Start(t)
	testkit.Until(t, "Release to reach the restarted server", func() bool {
		err := h.Release(ctx)
		return errors.Is(err, steaderr.ErrLost) && !errors.Is(err, steaderr.ErrUnavailable)
	})
}

// PgBouncer restarting under a running engine: calls fail with
// ErrUnavailable while it is down, and the engine recovers, without
// reopening, once it is back.
func TestPgBouncerRestart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	bouncer := pgtest.NewPgBouncer(t)
	db := bouncer.Via(t, pgtest.New(t))
	e := open(t, db, "&pgbouncer=true&connect_timeout=5")
	value := []byte("through the pooler")
	key := blob.KeyOf(value)
	if _, err := e.Blobs().Put(ctx, blob.PutParams{Key: key, Value: value, Owner: "test", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	bouncer.Stop(t)
	_, err := e.Blobs().Get(ctx, key)
	wantUnavailable(t, "Get with PgBouncer stopped", err)
	_, err = e.Locks().Acquire(ctx, lock.AcquireParams{Name: "l", Owner: "o", TTL: time.Second})
	wantUnavailable(t, "Acquire with PgBouncer stopped", err)
	bouncer.Start(t)
	testkit.Until(t, "Get to work through the restarted PgBouncer", func() bool {
		got, err := e.Blobs().Get(ctx, key)
		return err == nil && string(got.Value) == string(value)
	})
}

// A server that accepts the connection and never answers is unavailable
// once connect_timeout passes — though pgx reports that as a deadline.
func TestUnavailableConnectTimeout(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, silent, until the test ends
		}
	}()
	cfg, err := postgres.ParseURL("postgres://postgres@" + ln.Addr().String() + "/postgres?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = postgres.Open(t.Context(), cfg)
	wantUnavailable(t, "Open on a silent server", err)
}

// openCluster returns a migrated engine on c, and its configuration.
func openCluster(t *testing.T, c *pgtest.Cluster) (*postgres.Engine, postgres.Config) {
	t.Helper()
	cfg, err := postgres.ParseURL(c.URL + "&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	return openConfig(t, cfg), cfg
}
