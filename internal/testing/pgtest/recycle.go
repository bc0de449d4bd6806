package pgtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Migrated returns a DB for t whose schema holds what migrate leaves in a
// fresh schema, and nothing else: migrating a schema costs far more than a
// test's own statements, so a schema is migrated once and then handed from
// test to test. migrate runs once per schema, on a fresh one (d.Schema not
// yet created, d.URL and d.Admin as from New); kind names the migration,
// so that schemas of different migrations never mix.
//
// When t ends its schema goes back to the pool only if its definition is
// the one migrate left (tables, columns, indexes, constraints, triggers,
// functions, sequences, owners and privileges, compared by a catalog
// fingerprint) and it can be reset: every table emptied and refilled with
// the rows migrate left, every sequence set back. Otherwise it is dropped,
// as New's would be. With owned, the schema is owned by a role of its own
// and d.URL logs in as that role, as NewOwned's. Main drops the pool.
func Migrated(t testing.TB, kind string, owned bool, migrate func(ctx context.Context, d *DB) error) *DB {
	t.Helper()
	serverURL := need(t)
	key := poolKey{kind: kind, owned: owned, server: serverURL}
	s := recycled.take(key)
	if s == nil {
		s = freshSchema(t, serverURL, owned, migrate)
	}
	d := &DB{URL: s.url, Schema: s.name, Admin: newAdmin(t, serverURL)}
	t.Cleanup(func() {
		closeAdmin(t, d.Admin)
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := s.reset(ctx, serverURL); err != nil {
			s.drop(t, serverURL)
			return
		}
		recycled.put(key, s)
	})
	return d
}

// poolKey says which schemas may stand in for one another.
type poolKey struct {
	kind   string
	owned  bool
	server string
}

// schema is a migrated schema of the pool: its name, the URL that reaches
// it (as its owner role when owned), and what migrate left in it.
type schema struct {
	name, url   string
	role        string // quoted; "" unless owned
	fingerprint string
	tables      []string // schema-qualified, quoted
	seed        []tableRows
	sequences   []sequenceState
}

type tableRows struct {
	table string // schema-qualified, quoted
	rows  string // jsonb array
}

type sequenceState struct {
	sequence  string // schema-qualified, quoted
	lastValue int64
	isCalled  bool
}

// pool holds schemas no test uses, by key.
type pool struct {
	mu   sync.Mutex
	free map[poolKey][]*schema
	all  map[*schema]string // every pooled schema's server, for Main to drop
	// conns is a small pool to the server for resetting schemas, opened
	// with the first one; Main closes it.
	conns *pgxpool.Pool
}

// conn returns a connection of the pool's own to serverURL.
func (p *pool) conn(ctx context.Context, serverURL string) (*pgxpool.Conn, error) {
	p.mu.Lock()
	if p.conns == nil {
		cfg, err := pgxpool.ParseConfig(serverURL)
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		cfg.MaxConns = adminMaxConns
		if p.conns, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
			p.mu.Unlock()
			return nil, err
		}
	}
	conns := p.conns
	p.mu.Unlock()
	return conns.Acquire(ctx)
}

var recycled = pool{free: map[poolKey][]*schema{}, all: map[*schema]string{}}

func (p *pool) take(k poolKey) *schema {
	p.mu.Lock()
	defer p.mu.Unlock()
	free := p.free[k]
	if len(free) == 0 {
		return nil
	}
	s := free[len(free)-1]
	p.free[k] = free[:len(free)-1]
	delete(p.all, s)
	return s
}

func (p *pool) put(k poolKey, s *schema) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free[k] = append(p.free[k], s)
	p.all[s] = k.server
}

// dropRecycled drops every pooled schema (and its role); Main calls it.
func dropRecycled() error {
	recycled.mu.Lock()
	defer recycled.mu.Unlock()
	var errs []string
	for s, server := range recycled.all {
		if err := s.dropErr(server); err != nil {
			errs = append(errs, err.Error())
		}
	}
	recycled.all, recycled.free = map[*schema]string{}, map[poolKey][]*schema{}
	if recycled.conns != nil {
		recycled.conns.Close()
		recycled.conns = nil
	}
	if len(errs) > 0 {
		return fmt.Errorf("dropping recycled schemas: %s", strings.Join(errs, "; "))
	}
	return nil
}

// freshSchema makes, migrates and records a schema for the pool.
func freshSchema(t testing.TB, serverURL string, owned bool, migrate func(ctx context.Context, d *DB) error) *schema {
	t.Helper()
	s := &schema{name: uniqueName(t.Name()), url: serverURL}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if owned {
		s.role = pgx.Identifier{s.name}.Sanitize()
		for _, stmt := range []string{
			"CREATE ROLE " + s.role + " LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE",
			"CREATE SCHEMA " + s.role + " AUTHORIZATION " + s.role,
		} {
			if err := execOn(ctx, serverURL, stmt); err != nil {
				s.drop(t, serverURL)
				t.Fatalf("pgtest: %s: %v", stmt, err)
			}
		}
		s.url = setQueryParam(serverURL, "user", s.name)
	}
	d := &DB{URL: s.url, Schema: s.name, Admin: newAdmin(t, serverURL)}
	err := migrate(ctx, d)
	closeAdmin(t, d.Admin)
	if err == nil {
		err = s.record(ctx, serverURL)
	}
	if err != nil {
		s.drop(t, serverURL)
		t.Fatalf("pgtest: migrating schema %s: %v", s.name, err)
	}
	return s
}

// record notes the schema's fingerprint, rows and sequences as migrate
// left them.
func (s *schema) record(ctx context.Context, serverURL string) error {
	conn, err := recycled.conn(ctx, serverURL)
	if err != nil {
		return err
	}
	defer conn.Release()
	if s.fingerprint, err = fingerprint(ctx, conn, s.name); err != nil {
		return err
	}
	s.tables, err = names(ctx, conn, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY c.relname`, s.name)
	if err != nil {
		return err
	}
	for _, table := range s.tables {
		var rows *string
		if err := conn.QueryRow(ctx, "SELECT jsonb_agg(to_jsonb(t))::text FROM "+table+" t").Scan(&rows); err != nil {
			return err
		}
		if rows != nil {
			s.seed = append(s.seed, tableRows{table: table, rows: *rows})
		}
	}
	seqs, err := names(ctx, conn, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'S' ORDER BY c.relname`, s.name)
	if err != nil {
		return err
	}
	for _, seq := range seqs {
		st := sequenceState{sequence: seq}
		if err := conn.QueryRow(ctx, "SELECT last_value, is_called FROM "+seq).Scan(&st.lastValue, &st.isCalled); err != nil {
			return err
		}
		s.sequences = append(s.sequences, st)
	}
	return nil
}

// reset brings the schema back to what record saw, or fails when its
// definition changed (the caller then drops it).
func (s *schema) reset(ctx context.Context, serverURL string) error {
	conn, err := recycled.conn(ctx, serverURL)
	if err != nil {
		return err
	}
	defer conn.Release()
	fp, err := fingerprint(ctx, conn, s.name)
	if err != nil {
		return err
	}
	if fp != s.fingerprint {
		return fmt.Errorf("schema %s was altered", s.name)
	}
	// One transaction: foreign keys and triggers off (the rows go back as
	// they were), a lock wait bounded in case a test left a transaction
	// open.
	b := &pgx.Batch{}
	b.Queue("SET LOCAL session_replication_role = replica")
	b.Queue("SET LOCAL lock_timeout = '10s'")
	for _, table := range s.tables {
		b.Queue("DELETE FROM " + table)
	}
	for _, seed := range s.seed {
		b.Queue("INSERT INTO "+seed.table+" OVERRIDING SYSTEM VALUE SELECT * FROM jsonb_populate_recordset(NULL::"+seed.table+", $1::jsonb)", seed.rows)
	}
	for _, seq := range s.sequences {
		b.Queue("SELECT setval($1::regclass, $2, $3)", seq.sequence, seq.lastValue, seq.isCalled)
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
}

func (s *schema) drop(t testing.TB, serverURL string) {
	t.Helper()
	if err := s.dropErr(serverURL); err != nil {
		t.Errorf("pgtest: cleanup: %v", err)
	}
}

func (s *schema) dropErr(serverURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := execOn(ctx, serverURL, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.name}.Sanitize()+" CASCADE"); err != nil {
		return err
	}
	if s.role != "" {
		return execOn(ctx, serverURL, "DROP ROLE IF EXISTS "+s.role)
	}
	return nil
}

// execOn runs stmt on a connection of its own to u.
func execOn(ctx context.Context, u, stmt string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	return nil
}

func names(ctx context.Context, conn *pgxpool.Conn, query, schema string) ([]string, error) {
	rows, err := conn.Query(ctx, query, schema)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// sqlFingerprint identifies the definition of schema $1 as it stands: the
// id and row version (xmin) of its pg_namespace row and of every catalog
// row of its relations, columns, constraints, triggers and functions. DDL
// on any of them (a new column, index, trigger or grant, a replaced
// function, a new owner) writes a new row version or adds or removes a
// row; ANALYZE and VACUUM update pg_class in place and leave it alone.
const sqlFingerprint = `WITH n AS (SELECT oid, xmin FROM pg_catalog.pg_namespace WHERE nspname = $1),
c AS (SELECT oid, xmin FROM pg_catalog.pg_class WHERE relnamespace = (SELECT oid FROM n))
SELECT md5(concat_ws(E'\n',
	(SELECT oid::text || ' ' || xmin::text FROM n),
	(SELECT string_agg(oid::text || ' ' || xmin::text, ',' ORDER BY oid) FROM c),
	(SELECT string_agg(attrelid::text || ' ' || attnum::text || ' ' || xmin::text, ',' ORDER BY attrelid, attnum)
		FROM pg_catalog.pg_attribute WHERE attrelid IN (SELECT oid FROM c)),
	(SELECT string_agg(oid::text || ' ' || xmin::text, ',' ORDER BY oid) FROM pg_catalog.pg_constraint WHERE connamespace = (SELECT oid FROM n)),
	(SELECT string_agg(oid::text || ' ' || xmin::text, ',' ORDER BY oid) FROM pg_catalog.pg_trigger WHERE tgrelid IN (SELECT oid FROM c)),
	(SELECT string_agg(oid::text || ' ' || xmin::text, ',' ORDER BY oid) FROM pg_catalog.pg_proc WHERE pronamespace = (SELECT oid FROM n)),
	(SELECT string_agg(adrelid::text || ' ' || adnum::text || ' ' || xmin::text, ',' ORDER BY adrelid, adnum)
		FROM pg_catalog.pg_attrdef WHERE adrelid IN (SELECT oid FROM c))))`

func fingerprint(ctx context.Context, conn *pgxpool.Conn, schema string) (string, error) {
	var fp string
	err := conn.QueryRow(ctx, sqlFingerprint, schema).Scan(&fp)
	return fp, err
}
