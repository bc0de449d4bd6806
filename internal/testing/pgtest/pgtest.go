// Package pgtest gives each test a real PostgreSQL of its own: a fresh
// schema (New) or a fresh database (NewDatabase) on a shared server, dropped
// when the test ends, so tests run in parallel and leave nothing behind.
// Migrated (and Stead, for stead's own schema) hands out schemas migrated
// once and reset between tests, since migrating costs more than most tests.
//
// The server is found once per test process, in this order:
//
//  1. STEAD_TEST_DATABASE_URL, a postgres:// URL, if set; a URL that does
//     not connect fails the tests rather than falling through.
//  2. A server answering where libpq would look: PGHOST and PGPORT, else
//     127.0.0.1:5432 and the sockets in /var/run/postgresql and /tmp; as
//     PGUSER (PGPASSWORD), else postgres, else the OS user; in PGDATABASE,
//     else postgres.
//  3. A throwaway cluster in a temporary directory, when initdb and pg_ctl
//     are on PATH or under /usr/lib/postgresql/*/bin (highest version).
//     When the tests run as root it runs as the postgres user, or nobody.
//     Main stops it; should the process die first, a watchdog does.
//
// Failing all three, tests skip with one line saying what was tried and
// why it failed; with STEAD_REQUIRE_POSTGRES=1 they fail instead.
// STEAD_TEST_PG=throwaway skips steps 1 and 2.
//
// A package that uses pgtest calls Main from its TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

// schemaParam is the URL query parameter stead reads its schema from.
const schemaParam = "schema"

// envRequireBouncer set to "1" turns a skip for want of PgBouncer into a
// failure.
const envRequireBouncer = "STEAD_REQUIRE_PGBOUNCER"

// adminMaxConns is the size of DB.Admin.
const adminMaxConns = 4

// cleanupTimeout bounds each step of a test's cleanup: closing Admin, and
// dropping the schema or database.
const cleanupTimeout = 30 * time.Second

// dropDatabaseTimeout bounds DROP DATABASE, which waits for a checkpoint:
// on a busy, fsync-bound machine that took longer than cleanupTimeout.
const dropDatabaseTimeout = 3 * time.Minute

// maxIdentLen is PostgreSQL's limit on identifier length, in bytes.
const maxIdentLen = 63

// Main runs the tests of a package that uses pgtest and stops a throwaway
// cluster, if one was started, before exiting. When the tests pass it also
// fails the run if they left goroutines behind (goleak): a renewer, a
// listener or a pool nobody stopped. Call it from TestMain:
// func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	if err := stopBouncer(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest: stopping PgBouncer:", err)
		code = max(code, 1)
	}
	if err := dropRecycled(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		code = max(code, 1)
	}
	if code == 0 {
		// An HTTP transport's idle keep-alive connection is the
		// transport's to close, not a leak of the code under test.
		if err := goleak.Find(
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: goroutines left behind:", err)
			code = 1
		}
	}
	if err := stopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// DB is one test's private PostgreSQL namespace: a fresh schema name (not
// yet created — stead's migrations create it), dropped with CASCADE in
// t.Cleanup.
type DB struct {
	// URL is a postgres:// URL for the server, in URL form (so callers can
	// append query parameters), without a schema parameter.
	URL string
	// Schema is a fresh schema name unique to this test (lowercase, ≤ 63
	// bytes, derived from the test name plus random suffix).
	Schema string
	// Admin is a small pgxpool (max 4 conns) for the test's own assertions
	// and setup; closed in cleanup. Its connections use the server's
	// default search_path, so qualify names with Schema.
	Admin *pgxpool.Pool
}

// StoreURL returns URL with the schema query parameter set to d.Schema
// (properly escaped; works whether URL already has a query or not).
func (d *DB) StoreURL() string {
	return setQueryParam(d.URL, schemaParam, d.Schema)
}

// New returns a fresh DB for t, skipping or failing t as described above
// when no PostgreSQL can be had. It is safe to call from parallel tests.
func New(t testing.TB) *DB {
	t.Helper()
	serverURL := need(t)
	d := &DB{URL: serverURL, Schema: uniqueName(t.Name())}
	d.Admin = newAdmin(t, d.URL)
	t.Cleanup(func() {
		closeAdmin(t, d.Admin)
		drop(t, serverURL, "DROP SCHEMA IF EXISTS "+pgx.Identifier{d.Schema}.Sanitize()+" CASCADE", cleanupTimeout)
	})
	return d
}

// NewDatabase returns a fresh, empty database (CREATE DATABASE with a
// unique name, dropped WITH (FORCE) in cleanup) — for tests that need
// whole-database isolation. Same skip rules. Its Schema field is "stead".
// URL and Admin point at the new database. Needs PostgreSQL 13 or later.
func NewDatabase(t testing.TB) *DB {
	t.Helper()
	serverURL := need(t)
	name := uniqueName(t.Name())
	quoted := pgx.Identifier{name}.Sanitize()

	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		t.Fatalf("pgtest: connecting to create database %s: %v", name, err)
	}
	// template0: empty whatever was added to template1, and never busy.
	_, err = conn.Exec(ctx, "CREATE DATABASE "+quoted+" TEMPLATE template0")
	conn.Close(ctx)
	if err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}

	d := &DB{URL: setDatabase(serverURL, name), Schema: "stead"}
	t.Cleanup(func() {
		if d.Admin != nil {
			closeAdmin(t, d.Admin)
		}
		drop(t, serverURL, "DROP DATABASE IF EXISTS "+quoted+" WITH (FORCE)", dropDatabaseTimeout)
	})
	d.Admin = newAdmin(t, d.URL)
	return d
}

// Available reports whether a PostgreSQL could be had, and why not; it
// never skips. For non-test callers such as TestMain decisions or
// benchmarks.
func Available() (url string, err error) {
	r := sharedResolution()
	return r.url, r.err
}

// need returns the server URL, or skips or fails t.
func need(t testing.TB) string {
	t.Helper()
	r := sharedResolution()
	if r.err != nil {
		if r.fatal || os.Getenv(envRequire) == "1" {
			t.Fatal(r.err.Error())
		}
		t.Skip(r.err.Error())
	}
	return r.url
}

// newAdmin opens DB.Admin. pgxpool connects lazily; resolution has already
// proved the server answers.
func newAdmin(t testing.TB, u string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cfg.MaxConns = adminMaxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return pool
}

// closeAdmin closes pool, which may already be closed. pgxpool's Close
// waits for every acquired connection, so a test that leaked one (unclosed
// Rows, say) gets an error instead of a hung cleanup.
func closeAdmin(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		pool.Close()
		close(done)
	}()
	timer := time.NewTimer(cleanupTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Errorf("pgtest: DB.Admin did not close within %v: the test left a connection acquired (unclosed Rows, Tx or Conn?)", cleanupTimeout)
	}
}

// drop runs one DROP statement on a connection of its own, so it works
// whatever the test did to its pools.
func drop(t testing.TB, u, stmt string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Errorf("pgtest: cleanup: %s: %v", stmt, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, stmt); err != nil {
		t.Errorf("pgtest: cleanup: %s: %v", stmt, err)
	}
}

// uniqueName returns a schema or database name for a test: see nameFor.
func uniqueName(testName string) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // Never fails.
	return nameFor(testName, hex.EncodeToString(b[:]))
}

// nameFor returns "t_" + testName lowercased with every byte outside
// [a-z0-9_] turned into "_", truncated so that "_" + suffix fits within
// PostgreSQL's 63 bytes, then "_" + suffix.
func nameFor(testName, suffix string) string {
	b := make([]byte, 0, maxIdentLen)
	b = append(b, "t_"...)
	room := maxIdentLen - len(b) - 1 - len(suffix)
	for i := 0; i < len(testName) && i < room; i++ {
		c := testName[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_':
		default:
			c = '_'
		}
		b = append(b, c)
	}
	b = append(b, '_')
	return string(append(b, suffix...))
}

// splitURL splits a postgres:// URL the way libpq and pgx read it: head is
// the scheme, userinfo and host list; path is "" or "/" plus the database;
// query is what follows "?", and hasQuery says whether there was a "?".
func splitURL(raw string) (head, path, query string, hasQuery bool) {
	start := strings.Index(raw, "://")
	if start < 0 {
		start = 0
	} else {
		start += len("://")
	}
	rest := raw[start:]
	// As in libpq, only a "/" ends the search for the userinfo's "@".
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		start += i + 1
	}
	// Then a comma-separated list of host[:port], where a host may be an
	// IPv6 address in brackets holding any byte but "]".
	end := start
	skipTo := func(stops string) {
		if i := strings.IndexAny(raw[end:], stops); i >= 0 {
			end += i
		} else {
			end = len(raw)
		}
	}
	for {
		if strings.HasPrefix(raw[end:], "[") {
			skipTo("]")
			if end < len(raw) {
				end++
			}
		} else {
			skipTo(":/?,")
		}
		if strings.HasPrefix(raw[end:], ":") {
			skipTo("/?,")
		}
		if !strings.HasPrefix(raw[end:], ",") {
			break
		}
		end++
	}
	head, rest = raw[:end], raw[end:]
	if strings.HasPrefix(rest, "/") {
		path = rest
		if i := strings.IndexByte(rest, '?'); i >= 0 {
			path = rest[:i]
		}
		rest = rest[len(path):]
	}
	if strings.HasPrefix(rest, "?") {
		return head, path, rest[1:], true
	}
	return head, path, "", false
}

// setQueryParam returns raw with every key parameter removed and
// key=value (escaped) appended; other parameters keep their exact bytes.
func setQueryParam(raw, key, value string) string {
	u := removeQueryParam(raw, key)
	head, path, query, _ := splitURL(u)
	if query != "" {
		query += "&"
	}
	return head + path + "?" + query + escape(key, "") + "=" + escape(value, "")
}

// removeQueryParam returns raw without its key parameters, and without
// empty ones (libpq allows a trailing "&").
func removeQueryParam(raw, key string) string {
	head, path, query, hasQuery := splitURL(raw)
	if !hasQuery {
		return raw
	}
	var kept []string
	for pair := range strings.SplitSeq(query, "&") {
		k, _, _ := strings.Cut(pair, "=")
		if pair != "" && unescape(k) != key {
			kept = append(kept, pair)
		}
	}
	if len(kept) == 0 {
		return head + path
	}
	return head + path + "?" + strings.Join(kept, "&")
}

// setDatabase returns raw naming database db instead of its own.
func setDatabase(raw, db string) string {
	head, _, query, hasQuery := splitURL(raw)
	u := head + "/" + escape(db, "")
	if hasQuery {
		u += "?" + query
	}
	return u
}

// unescape percent-decodes s as libpq does (surrounding spaces dropped,
// "+" kept); it returns s unchanged if s is not validly escaped.
func unescape(s string) string {
	s = strings.Trim(s, " ")
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return s
		}
		n, err := hex.DecodeString(s[i+1 : i+3])
		if err != nil {
			return s
		}
		b.Write(n)
		i += 2
	}
	return b.String()
}

// NewOwned is New for a least-privilege deployment: the schema is created
// up front, owned by a fresh login role that holds no other privilege (no
// CREATE on the database, no superuser), and URL logs in as that role.
// Admin stays a superuser. The role and the schema are dropped when t
// ends.
func NewOwned(t testing.TB) *DB {
	t.Helper()
	d := New(t)
	role := pgx.Identifier{d.Schema}.Sanitize() // unique, like the schema
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE",
		"CREATE SCHEMA " + role + " AUTHORIZATION " + role,
	} {
		if _, err := d.Admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("pgtest: %s: %v", stmt, err)
		}
	}
	superuser := d.URL
	t.Cleanup(func() {
		// Before New's cleanup: the role can go only once its schema has.
		drop(t, superuser, "DROP SCHEMA IF EXISTS "+role+" CASCADE", cleanupTimeout)
		drop(t, superuser, "DROP ROLE IF EXISTS "+role, cleanupTimeout)
	})
	d.URL = setQueryParam(d.URL, "user", d.Schema)
	return d
}
