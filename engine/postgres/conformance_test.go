package postgres_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/enginetest"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/internal/pgtest"
)

// TestConformance runs the suite in pgx's default (prepared statement
// cache) mode and in the PgBouncer-safe exec mode, and as a least-privilege
// role that owns its schema and nothing else.
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
	t.Run("owner", func(t *testing.T) {
		t.Parallel()
		enginetest.Run(t, enginetest.Harness{
			New: func(t *testing.T) engine.Engine { return open(t, pgtest.NewOwned(t), "") },
		})
	})
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
