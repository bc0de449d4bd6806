package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

func TestMain(m *testing.M) {
	if os.Getenv(tortureChildEnv) != "" {
		os.Exit(tortureChild())
	}
	if url := os.Getenv(claimChildEnv); url != "" {
		os.Exit(claimChild(url))
	}
	pgtest.Main(m)
}

// open returns a migrated engine in db's schema, with extra URL parameters
// (each starting with "&") appended.
func open(t *testing.T, db *pgtest.DB, params string) *postgres.Engine {
	t.Helper()
	e := openVirgin(t, db, params)
	if err := e.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return e
}

// openVirgin returns an engine in db's schema without migrating it.
func openVirgin(t *testing.T, db *pgtest.DB, params string) *postgres.Engine {
	t.Helper()
	cfg, err := postgres.ParseURL(db.StoreURL() + params)
	if err != nil {
		t.Fatalf("ParseURL: %v", err)
	}
	return openConfigVirgin(t, cfg)
}

// openConfig returns a migrated engine opened with cfg, closed with the
// test.
func openConfig(t *testing.T, cfg postgres.Config) *postgres.Engine {
	t.Helper()
	e := openConfigVirgin(t, cfg)
	if err := e.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return e
}

// openConfigVirgin returns an engine opened with cfg, closed with the test,
// without migrating it.
func openConfigVirgin(t *testing.T, cfg postgres.Config) *postgres.Engine {
	t.Helper()
	e, err := postgres.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		url  string
		want postgres.Config // ConnString is checked for the stead parameters' absence
		err  error
	}{
		{"plain", "postgres://u@h/db", postgres.Config{}, nil},
		{"postgresql scheme", "postgresql://u@h/db", postgres.Config{}, nil},
		{"schema", "postgres://u@h/db?schema=jobs", postgres.Config{Schema: "jobs"}, nil},
		{"quoted schema", "postgres://u@h/db?schema=a%22b%20c", postgres.Config{Schema: `a"b c`}, nil},
		{"sync commit", "postgres://u@h/db?synchronous_commit=off", postgres.Config{SynchronousCommit: "off"}, nil},
		{"pgbouncer", "postgres://u@h/db?pgbouncer=true&sslmode=disable", postgres.Config{PgBouncer: true}, nil},
		{"listen url", "postgres://u@h:6432/db?pgbouncer=true&listen_url=postgres%3A%2F%2Fu%40h%3A5432%2Fdb", postgres.Config{PgBouncer: true, ListenConnString: "postgres://u@h:5432/db"}, nil},
		{"bad listen url", "postgres://u@h/db?pgbouncer=true&listen_url=postgres%3A%2F%2Fu%40h%3Anope%2Fdb", postgres.Config{}, steaderr.ErrInvalidArgument},
		{"pgx params pass", "postgres://u@h/db?pool_max_conns=3&application_name=x&connect_timeout=2", postgres.Config{}, nil},
		{"unknown param", "postgres://u@h/db?statement_timeout=5", postgres.Config{}, steaderr.ErrInvalidArgument},
		{"repeated param", "postgres://u@h/db?schema=a&schema=b", postgres.Config{}, steaderr.ErrInvalidArgument},
		{"bad sync commit", "postgres://u@h/db?synchronous_commit=maybe", postgres.Config{}, steaderr.ErrInvalidArgument},
		{"bad pgbouncer", "postgres://u@h/db?pgbouncer=sometimes", postgres.Config{}, steaderr.ErrInvalidArgument},
		{"empty schema", "postgres://u@h/db?schema=", postgres.Config{}, steaderr.ErrInvalidName},
		{"long schema", "postgres://u@h/db?schema=" + strings.Repeat("s", 64), postgres.Config{}, steaderr.ErrInvalidName},
		{"reserved schema", "postgres://u@h/db?schema=pg_catalog", postgres.Config{}, steaderr.ErrInvalidName},
		{"nul in schema", "postgres://u@h/db?schema=a%00b", postgres.Config{}, steaderr.ErrInvalidName},
		{"wrong scheme", "mysql://u@h/db", postgres.Config{}, steaderr.ErrInvalidArgument},
		{"bad pool size", "postgres://u@h/db?pool_max_conns=many", postgres.Config{}, steaderr.ErrInvalidArgument},
		{"unparsable", "postgres://u@h/db?%zz", postgres.Config{}, steaderr.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := postgres.ParseURL(tt.url)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("ParseURL(%q) error = %v, want %v", tt.url, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURL(%q) = %v", tt.url, err)
			}
			if got.Schema != tt.want.Schema || got.SynchronousCommit != tt.want.SynchronousCommit || got.PgBouncer != tt.want.PgBouncer || got.ListenConnString != tt.want.ListenConnString {
				t.Fatalf("ParseURL(%q) = %+v, want %+v", tt.url, got, tt.want)
			}
			for _, p := range []string{"schema=", "synchronous_commit=", "pgbouncer=", "listen_url="} {
				if strings.Contains(got.ConnString, p) {
					t.Fatalf("ConnString %q still holds %s", got.ConnString, p)
				}
			}
		})
	}
}

func FuzzParseURL(f *testing.F) {
	f.Add("postgres://u@h/db?schema=x")
	f.Add("postgresql://u:p@h:5432/db?sslmode=disable&pgbouncer=1")
	f.Add("postgres://?schema=%22")
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := postgres.ParseURL(s)
		if err != nil {
			if !errors.Is(err, steaderr.ErrInvalidArgument) && !errors.Is(err, steaderr.ErrInvalidName) {
				t.Fatalf("ParseURL(%q) = %v: not ErrInvalidArgument or ErrInvalidName", s, err)
			}
			return
		}
		if len(cfg.Schema) > 63 {
			t.Fatalf("ParseURL(%q) accepted a %d-byte schema", s, len(cfg.Schema))
		}
	})
}

func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	const migrators = 8
	engines := make([]*postgres.Engine, migrators)
	for i := range engines {
		engines[i] = openVirgin(t, db, "&pool_max_conns=2")
	}
	var wg sync.WaitGroup
	errs := make(chan error, migrators)
	for _, e := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- e.Migrate(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	current, latest, err := engines[0].SchemaVersion(ctx)
	if err != nil || current != latest || latest < 1 {
		t.Fatalf("SchemaVersion = %d, %d, %v; want current == latest >= 1", current, latest, err)
	}
	var rows, distinct int
	q := "SELECT count(*), count(DISTINCT version) FROM " + pgx.Identifier{db.Schema, "schema_version"}.Sanitize()
	if err := db.Admin.QueryRow(ctx, q).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != latest || distinct != latest {
		t.Fatalf("schema_version holds %d rows (%d distinct), want %d: a migration ran twice", rows, distinct, latest)
	}
}

func TestNewerSchemaIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	e := open(t, db, "")
	_, latest, _ := e.SchemaVersion(ctx)
	q := "INSERT INTO " + pgx.Identifier{db.Schema, "schema_version"}.Sanitize() + " (version, name) VALUES ($1, 'from_the_future')"
	if _, err := db.Admin.Exec(ctx, q, latest+1); err != nil {
		t.Fatal(err)
	}
	if err := e.Migrate(ctx); !errors.Is(err, steaderr.ErrSchema) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Migrate on a newer database = %v, want ErrSchema saying newer", err)
	}
	if current, _, err := e.SchemaVersion(ctx); err != nil || current != latest+1 {
		t.Fatalf("SchemaVersion = %d, %v; want %d", current, err, latest+1)
	}
}

// TestStatDoesNotReadValue proves Stat never loads a value: the plan is an
// index-only scan outputting the size, and it touches a handful of buffers
// while the value spans dozens of TOAST pages.
func TestStatDoesNotReadValue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	e := open(t, db, "")
	value := make([]byte, 200<<10)
	for i := range value {
		value[i] = byte(rand.Uint32()) // incompressible
	}
	key := blob.KeyOf(value)
	if _, err := e.Blobs().Put(ctx, blob.PutParams{Key: key, Value: value, Owner: "test", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{db.Schema, "blobs"}.Sanitize()
	plan := explain(t, db, "EXPLAIN (ANALYZE, BUFFERS, VERBOSE, FORMAT JSON) SELECT size FROM "+table+" WHERE key = $1", key.String())
	if strings.Contains(fmt.Sprint(plan["Output"]), "value") {
		t.Fatalf("stat plan outputs the value: %v", plan["Output"])
	}
	if plan["Node Type"] != "Index Only Scan" {
		t.Fatalf("stat plan is a %v, want an Index Only Scan of the key index, which includes size", plan["Node Type"])
	}
	statBuffers := buffers(plan)
	full := explain(t, db, "EXPLAIN (ANALYZE, BUFFERS, VERBOSE, FORMAT JSON) SELECT sha256(value) FROM "+table+" WHERE key = $1", key.String())
	if statBuffers >= 10 || buffers(full) < 20 {
		t.Fatalf("stat read %d buffers, reading the value %d: stat must not touch the value", statBuffers, buffers(full))
	}
	// The engine's own query must be the one explained above.
	info, err := e.Blobs().Stat(ctx, key)
	if err != nil || info.Size != int64(len(value)) {
		t.Fatalf("Stat = %+v, %v", info, err)
	}
}

func explain(t *testing.T, db *pgtest.DB, query string, args ...any) map[string]any {
	t.Helper()
	var out []map[string]any
	if err := db.Admin.QueryRow(context.Background(), query, args...).Scan(&out); err != nil {
		t.Fatal(err)
	}
	return out[0]["Plan"].(map[string]any)
}

func buffers(plan map[string]any) int {
	hit, _ := plan["Shared Hit Blocks"].(float64)
	read, _ := plan["Shared Read Blocks"].(float64)
	return int(hit + read)
}

func TestCallerPoolIsNotClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	e, err := postgres.Open(ctx, postgres.Config{Pool: db.Admin, Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Blobs().Stat(ctx, blob.KeyOf(nil)); !errors.Is(err, steaderr.ErrClosed) {
		t.Fatalf("Stat after Close = %v, want ErrClosed", err)
	}
	if err := db.Admin.Ping(ctx); err != nil {
		t.Fatalf("the caller's pool was closed: %v", err)
	}
	if _, err := postgres.Open(ctx, postgres.Config{Pool: db.Admin, MaxConns: 3}); !errors.Is(err, steaderr.ErrInvalidArgument) {
		t.Fatalf("Open with a pool and MaxConns = %v, want ErrInvalidArgument", err)
	}
	if _, err := postgres.Open(ctx, postgres.Config{Pool: db.Admin, ConnString: db.URL}); !errors.Is(err, steaderr.ErrInvalidArgument) {
		t.Fatalf("Open with a pool and a ConnString = %v, want ErrInvalidArgument", err)
	}
	// db.Admin caches prepared statements, which PgBouncer's transaction
	// pooling breaks.
	if _, err := postgres.Open(ctx, postgres.Config{Pool: db.Admin, PgBouncer: true}); !errors.Is(err, steaderr.ErrInvalidArgument) {
		t.Fatalf("Open with PgBouncer and a pool caching statements = %v, want ErrInvalidArgument", err)
	}
}

func TestPoolConfig(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	for _, tt := range []struct {
		params string
		want   int32
	}{
		{"", postgres.DefaultMaxConns},
		{"&pool_max_conns=3", 3},
		{"&application_name=pool_max_conns", postgres.DefaultMaxConns},
	} {
		if got := openVirgin(t, db, tt.params).Pool().Config().MaxConns; got != tt.want {
			t.Errorf("pool size with %q = %d, want %d", tt.params, got, tt.want)
		}
	}
	cfg, err := postgres.ParseURL(db.StoreURL() + "&pgbouncer=true&synchronous_commit=off")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Open(t.Context(), cfg); !errors.Is(err, steaderr.ErrInvalidArgument) {
		t.Fatalf("Open with PgBouncer and synchronous_commit = %v, want ErrInvalidArgument: PgBouncer refuses the startup parameter", err)
	}
}

func TestSynchronousCommitPerSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	e := open(t, db, "&synchronous_commit=off&pool_max_conns=2")
	var wg sync.WaitGroup
	for range 4 { // more callers than connections: every pooled session
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got string
			if err := e.Pool().QueryRow(ctx, "SHOW synchronous_commit").Scan(&got); err != nil || got != "off" {
				t.Errorf("synchronous_commit = %q, %v; want off", got, err)
			}
		}()
	}
	wg.Wait()
}

// TestCancelMidTransaction cancels a walk of All from its loop body and
// checks the walk stops with the context's error and the connection came
// back clean: no session idle in a transaction, no locks held, and the
// one-connection pool still works.
func TestCancelMidTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	app := "cancel_" + db.Schema
	e := open(t, db, "&pool_max_conns=1&application_name="+app)
	s := blob.NewStore(e.Blobs(), blob.Options{})
	for i := range 5 {
		if _, err := s.Put(ctx, strings.NewReader(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	listCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var iterErr error
	for _, err := range s.All(listCtx, blob.Key{}) {
		if err != nil {
			iterErr = err
			break
		}
		cancel() // mid-walk
	}
	if iterErr == nil || !errors.Is(iterErr, context.Canceled) {
		t.Fatalf("All after cancel: %v, want context.Canceled", iterErr)
	}
	if _, err := s.Put(ctx, strings.NewReader("after")); err != nil {
		t.Fatalf("Put after a cancelled transaction: %v", err)
	}
	var idleInTx, locks int
	err := db.Admin.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE state LIKE 'idle in transaction%'),
		(SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE a.application_name = $1 AND l.locktype <> 'virtualxid')
		FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&idleInTx, &locks)
	if err != nil {
		t.Fatal(err)
	}
	if idleInTx != 0 || locks != 0 {
		t.Fatalf("after cancel: %d sessions idle in transaction, %d locks held", idleInTx, locks)
	}
}

// TestKilledBackend terminates every backend of the engine's pool: the next
// operation fails with a clear error or succeeds, never stores half a
// value, and the engine recovers.
func TestKilledBackend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	app := "kill_" + db.Schema
	e := open(t, db, "&pool_max_conns=2&application_name="+app)
	s := blob.NewStore(e.Blobs(), blob.Options{})
	if _, err := s.Put(ctx, strings.NewReader("before")); err != nil {
		t.Fatal(err)
	}
	var killed int
	if err := db.Admin.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&killed); err != nil || killed == 0 {
		t.Fatalf("terminated %d backends: %v", killed, err)
	}
	value := []byte("during")
	if _, err := s.Put(ctx, bytes.NewReader(value)); err != nil {
		t.Logf("Put on a killed backend: %v", err)
		// Has may meet the other killed session first; ask until it
		// answers.
		var has bool
		testkit.Until(t, "Has to answer", func() bool {
			var err error
			has, err = s.Has(ctx, blob.KeyOf(value))
			return err == nil
		})
		if has {
			t.Fatal("a failed Put left its blob behind")
		}
	}
	testkit.Until(t, "Put to work again on fresh sessions", func() bool {
		_, err := s.Put(ctx, bytes.NewReader(value))
		return err == nil
	})
	if has, err := s.Has(ctx, blob.KeyOf(value)); !has || err != nil {
		t.Fatalf("Has after recovery = %v, %v", has, err)
	}
}

// TestGroupCommitCancellation races many puts with random cancellations
// through the group committer: a put that returned nil is stored; one that
// failed did so only because its own context ended.
func TestGroupCommitCancellation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	e := open(t, db, "&pool_max_conns=4")
	const workers, perWorker = 32, 40
	type outcome struct {
		key blob.Key
		err error
	}
	results := make(chan outcome, workers*perWorker)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				value := []byte(fmt.Sprintf("w%d-i%d", w, i))
				key := blob.KeyOf(value)
				putCtx, cancel := context.WithCancel(ctx)
				if rand.IntN(3) == 0 {
					time.AfterFunc(time.Duration(rand.IntN(2000))*time.Microsecond, cancel)
				}
				_, err := e.Blobs().Put(putCtx, blob.PutParams{Key: key, Value: value, Owner: "test", TTL: time.Minute})
				if err != nil && putCtx.Err() == nil {
					t.Errorf("put failed without being cancelled: %v", err)
				}
				cancel()
				results <- outcome{key, err}
			}
		}()
	}
	wg.Wait()
	close(results)
	var ok, cancelled int
	for r := range results {
		if r.err != nil {
			cancelled++
			continue
		}
		ok++
		if _, err := e.Blobs().Stat(ctx, r.key); err != nil {
			t.Fatalf("put of %s returned nil but Stat = %v", r.key, err)
		}
	}
	t.Logf("%d stored, %d cancelled", ok, cancelled)
	if ok == 0 {
		t.Fatal("no put succeeded")
	}
}

// A role that owns its schema and holds no database-level CREATE opens a
// store (which migrates) and uses every capability.
func TestLeastPrivilegeRole(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewOwned(t)
	var canCreate bool
	if err := db.Admin.QueryRow(ctx, "SELECT has_database_privilege($1, current_database(), 'CREATE')", db.Schema).Scan(&canCreate); err != nil || canCreate {
		t.Fatalf("the role may create schemas (%v, %v): the test proves nothing", canCreate, err)
	}
	for range 2 { // the second Open finds the schema migrated
		st, err := stead.Open(ctx, db.StoreURL())
		if err != nil {
			t.Fatalf("Open as the schema's owner: %v", err)
		}
		key, err := st.Blobs.Put(ctx, strings.NewReader("v"))
		if err != nil {
			t.Fatalf("Put: %v", err)
		}
		if ok, err := st.Blobs.Has(ctx, key); !ok || err != nil {
			t.Fatalf("Has = %v, %v", ok, err)
		}
		l, ok, err := st.Locks.TryLock(ctx, "l", "o", time.Minute)
		if !ok || err != nil {
			t.Fatalf("TryLock = %v, %v", ok, err)
		}
		if ok, err := l.Release(ctx); !ok || err != nil {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		if err := st.Records.RegisterGroup(ctx, "g"); err != nil {
			t.Fatalf("RegisterGroup: %v", err)
		}
		if _, err := st.Records.Save(ctx, record.Record{ID: "r", Group: "g", Status: record.Active}); err != nil && !errors.Is(err, steaderr.ErrConflict) {
			t.Fatalf("Save: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// With a pool of one connection the body of an All loop can still use the
// store: All holds no connection while the body runs. Before the keyset
// walk, the Get below waited forever for the connection All held.
func TestAllWithPoolOfOne(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e := open(t, db, "&pool_max_conns=1")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, pageSize := range []int{4, blob.DefaultPageSize} {
		s := blob.NewStore(e.Blobs(), blob.Options{PageSize: pageSize})
		for i := range 10 {
			if _, err := s.Put(ctx, strings.NewReader(fmt.Sprint("pool of one ", i))); err != nil {
				t.Fatal(err)
			}
		}
		n := 0
		for info, err := range s.All(ctx, blob.Key{}) {
			if err != nil {
				t.Fatalf("All (page %d): %v", pageSize, err)
			}
			if _, err := s.Stat(ctx, info.Key); err != nil {
				t.Fatalf("Stat inside All (page %d): %v", pageSize, err)
			}
			if _, err := s.Put(ctx, strings.NewReader(fmt.Sprint("put inside All ", pageSize, n))); err != nil {
				t.Fatalf("Put inside All (page %d): %v", pageSize, err)
			}
			n++
		}
		if n < 10 {
			t.Fatalf("All (page %d) yielded %d blobs, want at least 10", pageSize, n)
		}
	}
}

// TestOpenNeedsReadCommitted: stead's statements are written for READ
// COMMITTED. A role defaulting to another level still gets it in a pool
// Open creates; behind PgBouncer, or in a caller's pool, Open refuses.
func TestOpenNeedsReadCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewOwned(t)
	if _, err := db.Admin.Exec(ctx, "ALTER ROLE "+pgx.Identifier{db.Schema}.Sanitize()+" SET default_transaction_isolation = 'serializable'"); err != nil {
		t.Fatal(err)
	}
	e := open(t, db, "")
	var level string
	if err := e.Pool().QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&level); err != nil || level != "read committed" {
		t.Fatalf("a pool Open made runs at %q (%v), want read committed", level, err)
	}

	cfg, err := postgres.ParseURL(db.StoreURL() + "&pgbouncer=true")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := postgres.Open(ctx, cfg); !errors.Is(err, steaderr.ErrInvalidArgument) || !strings.Contains(fmt.Sprint(err), "read committed") {
		if e != nil {
			e.Close()
		}
		t.Fatalf("Open behind PgBouncer at serializable: %v, want ErrInvalidArgument naming read committed", err)
	}

	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if e, err := postgres.Open(ctx, postgres.Config{Pool: pool, Schema: db.Schema}); !errors.Is(err, steaderr.ErrInvalidArgument) {
		if e != nil {
			e.Close()
		}
		t.Fatalf("Open on a caller's pool at serializable: %v, want ErrInvalidArgument", err)
	}
}
