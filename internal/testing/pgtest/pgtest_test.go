package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestMain(m *testing.M) { Main(m) }

func TestNameFor(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("A", 100)
	tests := []struct {
		testName string
		want     string
	}{
		{"TestPut", "t_testput_0123abcd"},
		{"TestPut/sub_test#01", "t_testput_sub_test_01_0123abcd"},
		{"Test Put-Get.ok", "t_test_put_get_ok_0123abcd"},
		{"TestÉté", "t_test__t___0123abcd"}, // Each byte of É and é.
		{"", "t__0123abcd"},
		{long, "t_" + strings.Repeat("a", 63-2-1-8) + "_0123abcd"},
	}
	for _, tt := range tests {
		got := nameFor(tt.testName, "0123abcd")
		if got != tt.want {
			t.Errorf("nameFor(%q) = %q, want %q", tt.testName, got, tt.want)
		}
		if len(got) > maxIdentLen {
			t.Errorf("nameFor(%q) is %d bytes, over %d", tt.testName, len(got), maxIdentLen)
		}
	}
}

var namePattern = regexp.MustCompile(`^t_[a-z0-9_]*_[0-9a-f]{8}$`)

func TestUniqueName(t *testing.T) {
	t.Parallel()
	a, b := uniqueName(t.Name()), uniqueName(t.Name())
	if a == b {
		t.Errorf("two calls gave the same name %q", a)
	}
	for _, n := range []string{a, b} {
		if !namePattern.MatchString(n) || !strings.HasPrefix(n, "t_testuniquename_") {
			t.Errorf("uniqueName = %q, want t_testuniquename_ and 8 hex digits", n)
		}
	}
}

func FuzzNameFor(f *testing.F) {
	f.Add("TestPut/sub")
	f.Add(strings.Repeat("x", 70))
	f.Fuzz(func(t *testing.T, testName string) {
		got := uniqueName(testName)
		if len(got) > maxIdentLen || !namePattern.MatchString(got) {
			t.Errorf("uniqueName(%q) = %q", testName, got)
		}
	})
}

func TestStoreURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url, schema, want string
	}{
		{"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "t_a_1",
			"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&schema=t_a_1"},
		{"postgres://u@h/db", "s", "postgres://u@h/db?schema=s"},
		{"postgres://u@h/db?", "s", "postgres://u@h/db?schema=s"},
		{"postgres://h", "s", "postgres://h?schema=s"},
		{"postgres://postgres@/postgres?host=/tmp/pgtest-1&port=5432&sslmode=disable", "s",
			"postgres://postgres@/postgres?host=/tmp/pgtest-1&port=5432&sslmode=disable&schema=s"},
		// An existing schema parameter is replaced, wherever it is.
		{"postgres://h/db?schema=old&sslmode=disable", "s", "postgres://h/db?sslmode=disable&schema=s"},
		{"postgres://h/db?%73chema=old", "s", "postgres://h/db?schema=s"},
		// Escaped with %20, never "+", which libpq reads literally.
		{"postgres://h/db", "a b&c=d+é", "postgres://h/db?schema=a%20b%26c%3Dd%2B%C3%A9"},
		// A "?" in the password is not the query.
		{"postgres://u:p?w@h/db", "s", "postgres://u:p?w@h/db?schema=s"},
		// An IPv6 host in brackets may hold what ends a host elsewhere.
		{"postgres://[::1]:5432/db", "s", "postgres://[::1]:5432/db?schema=s"},
		{"postgres://[?]", "s", "postgres://[?]?schema=s"},
	}
	for _, tt := range tests {
		d := &DB{URL: tt.url, Schema: tt.schema}
		got := d.StoreURL()
		if got != tt.want {
			t.Errorf("StoreURL(%q, %q) = %q, want %q", tt.url, tt.schema, got, tt.want)
		}
		cfg, err := pgconn.ParseConfig(got)
		if err != nil {
			t.Errorf("pgconn.ParseConfig(%q): %v", got, err)
			continue
		}
		if cfg.RuntimeParams[schemaParam] != tt.schema {
			t.Errorf("pgconn.ParseConfig(%q) schema = %q, want %q", got, cfg.RuntimeParams[schemaParam], tt.schema)
		}
	}
}

// FuzzStoreURL checks that adding the schema parameter to any URL pgx
// accepts keeps every other setting and yields exactly that schema.
func FuzzStoreURL(f *testing.F) {
	f.Add("postgres://u:p@h:5432/db?sslmode=disable", "t_x_0123abcd")
	f.Add("postgresql://h1,h2:5433/db?schema=a&schema=b", "a b")
	f.Add("postgres://u@/db?host=/tmp&port=5432", "s")
	f.Add("postgres://h?a=b@c", "s")
	f.Add("postgres://[::1]:5432", "s")
	f.Fuzz(func(t *testing.T, raw, schema string) {
		if strings.IndexByte(schema, 0) >= 0 {
			return // PostgreSQL names cannot hold NUL.
		}
		if !strings.HasPrefix(raw, "postgres://") && !strings.HasPrefix(raw, "postgresql://") {
			return // A keyword=value string: pgtest only hands out URLs.
		}
		before, err := pgconn.ParseConfig(raw)
		if err != nil {
			return
		}
		u := (&DB{URL: raw, Schema: schema}).StoreURL()
		after, err := pgconn.ParseConfig(u)
		if err != nil {
			t.Fatalf("StoreURL(%q, %q) = %q, which pgx rejects: %v", raw, schema, u, err)
		}
		if got := after.RuntimeParams[schemaParam]; got != schema {
			t.Errorf("StoreURL(%q, %q) = %q: schema %q", raw, schema, u, got)
		}
		delete(before.RuntimeParams, schemaParam)
		delete(after.RuntimeParams, schemaParam)
		if before.Host != after.Host || before.Port != after.Port || before.Database != after.Database ||
			before.User != after.User || before.Password != after.Password ||
			fmt.Sprint(before.RuntimeParams) != fmt.Sprint(after.RuntimeParams) {
			t.Errorf("StoreURL(%q, %q) = %q changed other settings", raw, schema, u)
		}
	})
}

func TestSetDatabase(t *testing.T) {
	t.Parallel()
	tests := []struct{ url, want string }{
		{"postgres://u@h:1/postgres?sslmode=disable", "postgres://u@h:1/t_x?sslmode=disable"},
		{"postgres://u@h", "postgres://u@h/t_x"},
		{"postgres://u@/postgres?host=/tmp", "postgres://u@/t_x?host=/tmp"},
	}
	for _, tt := range tests {
		if got := setDatabase(tt.url, "t_x"); got != tt.want {
			t.Errorf("setDatabase(%q) = %q, want %q", tt.url, got, tt.want)
		}
	}
}

func TestAvailable(t *testing.T) {
	t.Parallel()
	u, err := Available()
	if err != nil {
		t.Logf("no PostgreSQL: %v", err)
		if u != "" {
			t.Errorf("Available() = %q with error %v", u, err)
		}
		return
	}
	t.Logf("tests use %s", redact(u))
	if _, err := pgconn.ParseConfig(u); err != nil {
		t.Errorf("pgx rejects Available() = %q: %v", u, err)
	}
	if strings.Contains(u, "schema=") {
		t.Errorf("Available() = %q has a schema parameter", u)
	}
}

// connect opens a connection to u that t closes.
func connect(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestNewDropsSchemaAfterTest(t *testing.T) {
	t.Parallel()
	for _, closeAdmin := range []bool{false, true} {
		t.Run(fmt.Sprintf("closeAdmin=%v", closeAdmin), func(t *testing.T) {
			t.Parallel()
			var schema, serverURL string
			t.Run("sub", func(t *testing.T) {
				ctx := context.Background()
				db := New(t)
				schema, serverURL = db.Schema, db.URL
				if !strings.HasPrefix(db.Schema, "t_testnewdropsschemaaftertest_closeadmin_") {
					t.Errorf("Schema = %q", db.Schema)
				}
				var n int
				if err := db.Admin.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", db.Schema).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 0 {
					t.Fatalf("schema %s exists before the migrations create it", db.Schema)
				}
				q := pgx.Identifier{db.Schema}.Sanitize()
				for _, stmt := range []string{"CREATE SCHEMA " + q, "CREATE TABLE " + q + ".t (id int)", "INSERT INTO " + q + ".t VALUES (1)"} {
					if _, err := db.Admin.Exec(ctx, stmt); err != nil {
						t.Fatal(err)
					}
				}
				if closeAdmin {
					db.Admin.Close()
				}
			})
			if schema == "" {
				return // sub skipped: no PostgreSQL.
			}
			var n int
			if err := connect(t, serverURL).QueryRow(context.Background(),
				"SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("schema %s still exists after its test", schema)
			}
		})
	}
}

func TestNewParallel(t *testing.T) {
	t.Parallel()
	var seen sync.Map
	for i := range 16 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			db := New(t)
			if _, dup := seen.LoadOrStore(db.Schema, true); dup {
				t.Errorf("schema %s handed out twice", db.Schema)
			}
			ctx := context.Background()
			q := pgx.Identifier{db.Schema}.Sanitize()
			if _, err := db.Admin.Exec(ctx, "CREATE SCHEMA "+q+"; CREATE TABLE "+q+".t (id int)"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestNewDatabaseDropsAfterTest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var name, serverURL string
	var lingering *pgx.Conn
	t.Run("sub", func(t *testing.T) {
		db := NewDatabase(t)
		serverURL, _ = Available()
		if db.Schema != "stead" {
			t.Errorf("Schema = %q, want stead", db.Schema)
		}
		if err := db.Admin.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, "t_testnewdatabasedropsaftertest_sub_") {
			t.Errorf("database = %q", name)
		}
		var tables int
		if err := db.Admin.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')").Scan(&tables); err != nil {
			t.Fatal(err)
		}
		if tables != 0 {
			t.Errorf("new database has %d tables", tables)
		}
		// A connection the test leaves open must not stop the drop.
		var err error
		if lingering, err = pgx.Connect(ctx, db.URL); err != nil {
			t.Fatal(err)
		}
		if _, err := pgx.ParseConfig(db.StoreURL()); err != nil {
			t.Error(err)
		}
	})
	if lingering != nil {
		lingering.Close(ctx)
	}
	if name == "" {
		return // sub skipped or failed early.
	}
	var n int
	if err := connect(t, serverURL).QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database %s still exists after its test", name)
	}
}

// env returns a getenv over m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func noCluster(context.Context) (*cluster, error) {
	return nil, errors.New("initdb and pg_ctl not found")
}

func TestResolveNothing(t *testing.T) {
	t.Parallel()
	r := resolve(context.Background(), env(map[string]string{"PGHOST": "/nonexistent,/nonexistent2", "PGPORT": "5555"}), noCluster)
	if r.err == nil || r.fatal || r.url != "" {
		t.Fatalf("resolve = %+v, want a non-fatal error", r)
	}
	want := "pgtest: no PostgreSQL (tried STEAD_TEST_DATABASE_URL, unix socket /nonexistent/.s.PGSQL.5555, " +
		"unix socket /nonexistent2/.s.PGSQL.5555, installed binaries): STEAD_TEST_DATABASE_URL unset; " +
		"unix socket /nonexistent/.s.PGSQL.5555: no such socket; unix socket /nonexistent2/.s.PGSQL.5555: no such socket; " +
		"throwaway cluster: initdb and pg_ctl not found"
	if got := r.err.Error(); got != want {
		t.Errorf("error:\n got %s\nwant %s", got, want)
	}
}

func TestResolveRefusedTCP(t *testing.T) {
	t.Parallel()
	// Port 1 on loopback: nothing listens, the refusal is immediate.
	r := resolve(context.Background(), env(map[string]string{"PGHOST": "127.0.0.1", "PGPORT": "1"}), noCluster)
	if r.err == nil || r.fatal {
		t.Fatalf("resolve = %+v, want a non-fatal error", r)
	}
	msg := r.err.Error()
	if !strings.Contains(msg, "tried STEAD_TEST_DATABASE_URL, 127.0.0.1:1, installed binaries") ||
		strings.Contains(msg, "\n") || strings.Count(msg, "failed to connect") != 1 {
		t.Errorf("error = %s", msg)
	}
}

func TestResolveMisconfigured(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"unknown mode", map[string]string{envMode: "docker"}, `STEAD_TEST_PG="docker"`},
		{"throwaway impossible", map[string]string{envMode: "throwaway", envURL: "postgres://ignored"}, "initdb and pg_ctl not found"},
		{"keyword URL", map[string]string{envURL: "host=localhost dbname=x"}, "not a postgres:// URL"},
		{"unreachable URL", map[string]string{envURL: "postgres://u:secret@127.0.0.1:1/db?sslmode=disable"}, "u:xxxxx@127.0.0.1:1"},
	}
	for _, tt := range tests {
		r := resolve(context.Background(), env(tt.env), noCluster)
		if r.err == nil || !r.fatal {
			t.Errorf("%s: resolve = %+v, want a fatal error", tt.name, r)
			continue
		}
		if msg := r.err.Error(); !strings.Contains(msg, tt.want) || strings.Contains(msg, "secret") {
			t.Errorf("%s: error = %s, want it to contain %q and no password", tt.name, msg, tt.want)
		}
	}
}

func TestResolveThrowawayForced(t *testing.T) {
	t.Parallel()
	c := &cluster{url: "postgres://postgres@/postgres?host=/x"}
	r := resolve(context.Background(), env(map[string]string{envMode: "throwaway", envURL: "postgres://ignored"}),
		func(context.Context) (*cluster, error) { return c, nil })
	if r.err != nil || r.url != c.url || r.cluster != c {
		t.Errorf("resolve = %+v, want the started cluster", r)
	}
}

func TestResolveURLDropsSchema(t *testing.T) {
	t.Parallel()
	u := need(t)
	r := resolve(context.Background(), env(map[string]string{envURL: setQueryParam(u, schemaParam, "x")}), noCluster)
	if r.err != nil || r.url != u {
		t.Errorf("resolve = %+v, want url %s", r, u)
	}
}

// ViaPgBouncer reaches the same database through a proxy: the server sees
// the connection come from PgBouncer, not from this client's socket.
func TestViaPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := New(t)
	via := db.ViaPgBouncer(t)
	conn := connect(t, via.URL)
	var gotDB, wantDB string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&gotDB); err != nil {
		t.Fatal(err)
	}
	if err := db.Admin.QueryRow(ctx, "SELECT current_database()").Scan(&wantDB); err != nil {
		t.Fatal(err)
	}
	if gotDB != wantDB {
		t.Fatalf("through PgBouncer: database %q, want %q", gotDB, wantDB)
	}
	local := conn.PgConn().Conn().LocalAddr().(*net.TCPAddr)
	var serverSeesPort *int32
	if err := conn.QueryRow(ctx, "SELECT inet_client_port()").Scan(&serverSeesPort); err != nil {
		t.Fatal(err)
	}
	if serverSeesPort != nil && int(*serverSeesPort) == local.Port {
		t.Fatalf("the server sees this client's own port %d: not proxied", local.Port)
	}
}
