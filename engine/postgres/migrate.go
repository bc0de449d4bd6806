package postgres

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/engine/internal/sqlengine"
	"github.com/steadkit/stead/steaderr"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

var migrations, errMigrations = sqlengine.LoadMigrations(migrationFiles, "migrations")

// Migrate implements engine.Engine. Each migration runs in its own
// transaction, together with its schema_version row, under a
// transaction-level advisory lock that serializes concurrent migrators of
// the same schema; each re-reads the version under the lock, so a file is
// never applied twice.
func (e *Engine) Migrate(ctx context.Context) error {
	if errMigrations != nil {
		return errMigrations
	}
	// Fast path, without locks or DDL: already current.
	if current, latest, err := e.SchemaVersion(ctx); err != nil {
		return err
	} else if current == latest {
		return e.attachTier(ctx)
	}
	for {
		done, err := e.migrateOne(ctx)
		if err != nil {
			return err
		}
		if done {
			return e.attachTier(ctx)
		}
	}
}

// The migrator's statements. The schema is created only when it is
// missing: CREATE SCHEMA IF NOT EXISTS checks the database-level CREATE
// privilege before it checks existence, so a least-privilege role that owns
// its schema could not migrate with it (docs/decisions/0016-least-privilege.md).
var (
	sqlMigrateLock         = declare("sqlMigrateLock", `SELECT pg_advisory_xact_lock($1)`)
	sqlSchemaExists        = declare("sqlSchemaExists", `SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1)`)
	sqlCreateSchema        = declare("sqlCreateSchema", `CREATE SCHEMA {schema}`)
	sqlCreateSchemaVersion = declare("sqlCreateSchemaVersion", `CREATE TABLE IF NOT EXISTS {schema}.schema_version (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now())`)
	sqlCurrentVersion = declare("sqlCurrentVersion", `SELECT coalesce(max(version), 0) FROM {schema}.schema_version`)
	// SET LOCAL ends with the transaction: a migration's unqualified names
	// land in the engine's schema, and no session state leaks.
	sqlMigrationSearchPath = declare("sqlMigrationSearchPath", `SET LOCAL search_path TO {schema}`)
	sqlInsertVersion       = declare("sqlInsertVersion", `INSERT INTO {schema}.schema_version (version, name) VALUES ($1, $2)`)
)

// migrateOne applies the next pending migration, or reports that none is
// pending.
func (e *Engine) migrateOne(ctx context.Context) (done bool, err error) {
	err = e.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, e.sql(sqlMigrateLock), e.lockKey("migrate")); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, e.sql(sqlSchemaExists), e.schema).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, e.sql(sqlCreateSchema)); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, e.sql(sqlCreateSchemaVersion)); err != nil {
			return err
		}
		current, err := e.currentVersion(ctx, tx)
		if err != nil {
			return err
		}
		if err := checkNotNewer(current); err != nil {
			return err
		}
		if current == len(migrations) {
			done = true
			return nil
		}
		m := migrations[current]
		if _, err := tx.Exec(ctx, e.sql(sqlMigrationSearchPath)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
		}
		_, err = tx.Exec(ctx, e.sql(sqlInsertVersion), m.Version, m.Name)
		return err
	})
	return done, err
}

// SchemaVersion implements engine.Engine.
func (e *Engine) SchemaVersion(ctx context.Context) (current, latest int, err error) {
	if err := e.check(ctx); err != nil {
		return 0, 0, err
	}
	current, err = e.currentVersion(ctx, e.pool)
	return current, len(migrations), listError(err)
}

func (e *Engine) currentVersion(ctx context.Context, q querier) (int, error) {
	var v int
	err := q.QueryRow(ctx, e.sql(sqlCurrentVersion)).Scan(&v)
	return v, interpretError(err)
}

func checkNotNewer(current int) error {
	if current > len(migrations) {
		return fmt.Errorf("%w: database schema version %d is newer than this binary (%d): upgrade stead", steaderr.ErrSchema, current, len(migrations))
	}
	return nil
}
