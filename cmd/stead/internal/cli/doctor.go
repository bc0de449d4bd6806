package cli

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/postgres"
)

// A check's verdict, worst last.
type verdict int

const (
	ok verdict = iota
	warn
	fail
)

func (v verdict) String() string { return [...]string{"ok  ", "warn", "fail"}[v] }

// report prints doctor's lines and remembers the worst verdict.
type report struct {
	e     *env
	worst verdict
}

func (r *report) line(v verdict, what, format string, args ...any) {
	r.worst = max(r.worst, v)
	fmt.Fprintf(r.e.stdout, "%s  %-18s %s\n", v, what, fmt.Sprintf(format, args...))
}

func doctorCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check the store: connectivity, schema, settings",
		Long: `Check the store and print one line per check: ok, warn or fail.
Exits 0 when every check is ok, 4 when the worst is a warning, 1 on any
failure. Nothing is changed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := &report{e: e}
			doctor(cmd.Context(), e, r)
			switch r.worst {
			case warn:
				return &exitError{code: exitWarn}
			case fail:
				return &exitError{code: exitFailure}
			}
			return nil
		},
	}
}

func doctor(ctx context.Context, e *env, r *report) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	st, err := stead.Open(ctx, e.db, stead.WithoutMigrate(), stead.WithLogger(e.log))
	if err != nil {
		r.line(fail, "connect", "%s: %s", redacted(e.db), oneLine(err))
		return
	}
	defer st.Close()
	shared, reason := st.Cluster()
	r.line(ok, "connect", "%s (%s; shared by a fleet: %v)", redacted(e.db), reason, shared)
	current, latest, err := st.SchemaVersion(ctx)
	switch {
	case err != nil:
		r.line(fail, "schema", "%s", oneLine(err))
	case current > latest:
		r.line(fail, "schema", "version %d is newer than this binary's %d: upgrade stead", current, latest)
	case current < latest:
		r.line(warn, "schema", "version %d of %d: run stead migrate", current, latest)
	default:
		r.line(ok, "schema", "version %d, current", current)
	}
	if pg, isPG := st.Engine().(*postgres.Engine); isPG {
		doctorPostgres(ctx, e, r, pg)
	}
	if t, isTiered := st.Engine().(engine.BytesTierChecker); isTiered {
		switch bucket, err := t.CheckBytesTier(ctx); {
		case err != nil:
			r.line(fail, "bytes tier", "%s", oneLine(err))
		case bucket != "":
			r.line(ok, "bytes tier", "%s: written, read back, listed and deleted a probe object", bucket)
		}
	}
}

func doctorPostgres(ctx context.Context, e *env, r *report, pg *postgres.Engine) {
	pool := pg.Pool()
	var version string
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		r.line(fail, "server version", "%s", oneLine(err))
	} else if major, _ := strconv.Atoi(strings.SplitN(version, ".", 2)[0]); major < 13 {
		r.line(warn, "server version", "PostgreSQL %s: stead is tested on 13 and later", version)
	} else {
		r.line(ok, "server version", "PostgreSQL %s", version)
	}
	var sync string
	if err := pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&sync); err != nil {
		r.line(fail, "synchronous_commit", "%s", oneLine(err))
	} else if sync == "off" || sync == "local" {
		r.line(warn, "synchronous_commit", "%s: a crash may lose the last commits", sync)
	} else {
		r.line(ok, "synchronous_commit", "%s", sync)
	}
	r.line(ok, "pool", "%d connections at most, %d open", pool.Config().MaxConns, pool.Stat().TotalConns())
	cfg, _ := postgres.ParseURL(e.db)
	port := ""
	if u, err := url.Parse(e.db); err == nil {
		port = u.Port()
	}
	switch {
	case cfg.PgBouncer:
		r.line(ok, "pgbouncer", "pgbouncer=true: no session state is relied on")
	case port == "6432":
		r.line(warn, "pgbouncer", "port 6432 is PgBouncer's: if it is, add pgbouncer=true to the URL")
	default:
		r.line(ok, "pgbouncer", "direct connection (pgbouncer=false)")
	}
	var canCreate, schemaExists bool
	err := pool.QueryRow(ctx, `SELECT has_database_privilege(current_database(), 'CREATE'),
		EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, pg.Schema()).Scan(&canCreate, &schemaExists)
	if err == nil && schemaExists {
		err = pool.QueryRow(ctx, `SELECT has_schema_privilege($1, 'CREATE')`, pg.Schema()).Scan(&canCreate)
	}
	switch {
	case err != nil:
		r.line(fail, "migrate privilege", "%s", oneLine(err))
	case !canCreate:
		r.line(warn, "migrate privilege", "this role cannot create in schema %q: run stead migrate as a role that can", pg.Schema())
	default:
		r.line(ok, "migrate privilege", "this role can migrate schema %q", pg.Schema())
	}
	doctorDeadRows(ctx, r, pg)
}

// A table (or its TOAST table) holding at least bloatBytes and
// bloatShare of dead rows is reported: space deletes freed that no vacuum
// has made reusable yet.
const (
	bloatBytes = 64 << 20
	bloatShare = 0.2
)

// sqlDeadRows lists the schema's tables and their TOAST tables with the
// statistics collector's live and dead row counts, their size on disk
// (without indexes) and when autovacuum last ran on them.
const sqlDeadRows = `SELECT coalesce(p.relname, c.relname), p.oid IS NOT NULL, s.n_live_tup, s.n_dead_tup,
	pg_catalog.pg_relation_size(c.oid), s.last_autovacuum, current_setting('autovacuum')
FROM pg_catalog.pg_stat_all_tables s
JOIN pg_catalog.pg_class c ON c.oid = s.relid
LEFT JOIN pg_catalog.pg_class p ON p.reltoastrelid = c.oid
JOIN pg_catalog.pg_namespace n ON n.oid = coalesce(p.relnamespace, c.relnamespace)
WHERE n.nspname = $1`

// doctorDeadRows warns of the table with the most dead bytes, estimated as
// its size times its share of dead rows, when they pass bloatBytes and
// bloatShare.
func doctorDeadRows(ctx context.Context, r *report, pg *postgres.Engine) {
	rows, err := pg.Pool().Query(ctx, sqlDeadRows, pg.Schema())
	if err != nil {
		r.line(fail, "dead rows", "%s", oneLine(err))
		return
	}
	type table struct {
		name              string
		toast             bool
		live, dead, bytes int64
		lastAutovacuum    *time.Time
		autovacuum        string
	}
	var worst *table
	var worstDead int64
	for rows.Next() {
		var t table
		if err := rows.Scan(&t.name, &t.toast, &t.live, &t.dead, &t.bytes, &t.lastAutovacuum, &t.autovacuum); err != nil {
			rows.Close()
			r.line(fail, "dead rows", "%s", oneLine(err))
			return
		}
		if t.live+t.dead == 0 || float64(t.dead) < bloatShare*float64(t.live+t.dead) {
			continue
		}
		if dead := int64(float64(t.bytes) * float64(t.dead) / float64(t.live+t.dead)); dead >= bloatBytes && dead > worstDead {
			worst, worstDead = &t, dead
		}
	}
	if err := rows.Err(); err != nil {
		r.line(fail, "dead rows", "%s", oneLine(err))
		return
	}
	if worst == nil {
		r.line(ok, "dead rows", "no table holds %d MiB of dead rows making %.0f%% of it", bloatBytes>>20, 100*bloatShare)
		return
	}
	name := worst.name
	if worst.toast {
		name += " (TOAST)"
	}
	last := "never"
	if worst.lastAutovacuum != nil {
		last = worst.lastAutovacuum.UTC().Format(time.RFC3339)
	}
	r.line(warn, "dead rows", "%s: about %d MiB of %d MiB is dead rows (last autovacuum %s, autovacuum %s): see docs/guides/operations.md",
		name, worstDead>>20, worst.bytes>>20, last, worst.autovacuum)
}
