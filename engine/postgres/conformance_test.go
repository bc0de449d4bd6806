package postgres_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/enginetest"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/pgtest"
)

// TestConformance runs the suite in pgx's default (prepared statement
// cache) mode and in the PgBouncer-safe exec mode.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct{ name, params string }{
		{"cached", ""},
		{"pgbouncer", "&pgbouncer=true"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			enginetest.Run(t, harness(pgtest.NewDatabase(t), mode.params))
		})
	}
}

// harness makes engines in fresh schemas; namespaces, whose hostile names
// are fixed, live in nsDB, a database of their own that the suite opens one
// name at a time.
func harness(nsDB *pgtest.DB, params string) enginetest.Harness {
	return enginetest.Harness{
		New: func(t *testing.T) engine.Engine {
			return open(t, pgtest.New(t), params)
		},
		Virgin: func(t *testing.T) engine.Engine {
			return openVirgin(t, pgtest.New(t), params)
		},
		RefTable: refTable,
		Namespace: func(t *testing.T, name string) (engine.Engine, error) {
			cfg, err := postgres.ParseURL(nsDB.URL + params + "&schema=" + url.QueryEscape(name))
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

// refTable creates a reference table in the engine's schema, the names
// quoted, and returns it as a liveness source with a setter.
func refTable(t *testing.T, eng engine.Engine, table, column string) (gc.Source, func(blob.Key, bool)) {
	t.Helper()
	e := eng.(*postgres.Engine)
	ident := pgx.Identifier{e.Schema(), table}.Sanitize()
	col := pgx.Identifier{column}.Sanitize()
	if _, err := e.Pool().Exec(context.Background(), "CREATE TABLE "+ident+" ("+col+" text NOT NULL)"); err != nil {
		t.Fatalf("creating reference table: %v", err)
	}
	set := func(key blob.Key, referenced bool) {
		t.Helper()
		stmt := "DELETE FROM " + ident + " WHERE " + col + " = $1"
		if referenced {
			stmt = "INSERT INTO " + ident + " (" + col + ") VALUES ($1)"
		}
		if _, err := e.Pool().Exec(context.Background(), stmt, key.String()); err != nil {
			t.Fatalf("setting a reference: %v", err)
		}
	}
	return gc.Source{Schema: e.Schema(), Table: table, Column: column}, set
}
