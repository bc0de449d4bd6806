package pgtest

import (
	"context"
	"testing"

	"github.com/steadkit/stead/engine/postgres"
)

// Stead returns a DB for t whose schema stead's PostgreSQL engine has
// migrated to its newest version, from the pool Migrated keeps: for tests
// that open a store on it (Open migrates nothing then). With owned, the
// schema belongs to a role of its own, as NewOwned's. A test of migration
// itself, or of a store never migrated, takes New.
func Stead(t testing.TB, owned bool) *DB {
	t.Helper()
	return Migrated(t, "stead", owned, func(ctx context.Context, d *DB) error {
		cfg, err := postgres.ParseURL(d.StoreURL())
		if err != nil {
			return err
		}
		e, err := postgres.Open(ctx, cfg)
		if err != nil {
			return err
		}
		defer e.Close()
		return e.Migrate(ctx)
	})
}
