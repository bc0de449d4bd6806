package postgres_test

import (
	"context"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/enginetest"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/testing/pgtest"
)

// direct reaches a test database without a proxy.
func direct(_ testing.TB, db *pgtest.DB) *pgtest.DB { return db }

// viaPgBouncer reaches a test database through a real PgBouncer in
// transaction pooling mode, or directly where none is installed (and
// none is required).
func viaPgBouncer(t testing.TB, db *pgtest.DB) *pgtest.DB { return db.ViaPgBouncerIfAny(t) }

// TestConformance runs the whole suite in pgx's default (prepared
// statement cache) mode, and the areas each variation changes
// (docs/design.md, "Where each promise is tested"): in the PgBouncer-safe
// exec mode through a real PgBouncer in transaction pooling mode
// (directly where PgBouncer is not installed); with the bytes tier on a
// file:// bucket; and as a least-privilege role that owns its schema and
// nothing else.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name   string
		params string
		via    func(testing.TB, *pgtest.DB) *pgtest.DB
		areas  []string
	}{
		{"cached", "", direct, nil},
		// Every statement, in exec mode and pooled by transaction, and the
		// mechanisms without session state (the sweep's lease row,
		// instance rows, the LISTEN connection). BlobChunked repeats
		// Blob's statements with smaller chunks, Metamorphic in a random
		// order.
		{"pgbouncer", "&pgbouncer=true", viaPgBouncer, []string{"Blob", "GC", "GCChunked", "Lifecycle", "Lock", "Overlap", "PutSet", "Record", "Ref", "RefResolve", "Upload"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			nsDB := pgtest.NewDatabase(t)
			h := harness(nsDB, mode.params, mode.via)
			h.Areas = mode.areas
			enginetest.Run(t, h)
		})
	}
	t.Run("bytes", func(t *testing.T) {
		t.Parallel()
		tiered := func(t *testing.T, params string) engine.Engine {
			return open(t, pgtest.Stead(t, false), "&bytes="+url.QueryEscape("file://"+filepath.ToSlash(t.TempDir()))+params)
		}
		enginetest.Run(t, enginetest.Harness{
			Areas:    enginetest.TierAreas,
			New:      func(t *testing.T) engine.Engine { return tiered(t, "") },
			OneConn:  func(t *testing.T) engine.Engine { return tiered(t, "&pool_max_conns=1") },
			RefTable: refTable,
		})
	})
	t.Run("owner", func(t *testing.T) {
		t.Parallel()
		enginetest.Run(t, enginetest.Harness{
			// What reaches past the schema's own tables: migrations,
			// advisory locks and the sweep's session settings, liveness
			// source tables, LISTEN and NOTIFY.
			Areas:    []string{"GC", "Lifecycle", "Lock", "Record"},
			New:      func(t *testing.T) engine.Engine { return open(t, pgtest.Stead(t, true), "") },
			RefTable: refTable,
		})
	})
}

// harness makes engines in migrated schemas (pgtest.Stead: fresh or reset,
// never another test's data), reached through via; namespaces,
// whose hostile names are fixed, live in nsDB, a database of their own that
// the suite opens one name at a time.
func harness(nsDB *pgtest.DB, params string, via func(testing.TB, *pgtest.DB) *pgtest.DB) enginetest.Harness {
	return enginetest.Harness{
		New: func(t *testing.T) engine.Engine {
			return open(t, via(t, pgtest.Stead(t, false)), params)
		},
		Virgin: func(t *testing.T) engine.Engine {
			return openVirgin(t, via(t, pgtest.New(t)), params)
		},
		OneConn: func(t *testing.T) engine.Engine {
			return open(t, via(t, pgtest.Stead(t, false)), params+"&pool_max_conns=1")
		},
		RefTable: refTable,
		Namespace: func(t *testing.T, name string) (engine.Engine, error) {
			cfg, err := postgres.ParseURL(setSchema(via(t, nsDB).URL, name) + params)
			if err != nil {
				return nil, err
			}
			e, err := postgres.Open(context.Background(), cfg)
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() {
				e.Close()
				nsDB.Admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
			})
			return e, e.Migrate(context.Background())
		},
	}
}

// setSchema returns u, a URL without a query or with one, with schema set
// to name.
func setSchema(u, name string) string {
	parsed, err := url.Parse(u)
	if err != nil || parsed.RawQuery == "" {
		return u + "?schema=" + url.QueryEscape(name)
	}
	return u + "&schema=" + url.QueryEscape(name)
}

// refTable creates a reference table in the engine's schema, the names
// quoted, and returns it as a liveness source with a setter.
func refTable(t *testing.T, eng engine.Engine, table, column string) (gc.Source, func(blob.Key, bool)) {
	t.Helper()
	e := eng.(*postgres.Engine)
	return pgtest.RefTable(t, e.Pool(), e.Schema(), table, column)
}
