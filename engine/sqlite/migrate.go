package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/steadkit/stead/engine/internal/sqlengine"
	"github.com/steadkit/stead/steaderr"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

var migrations, errMigrations = sqlengine.LoadMigrations(migrationFiles, "migrations")

const createSchemaVersion = `CREATE TABLE IF NOT EXISTS schema_version (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)`

// Migrate implements engine.Engine. Each migration runs in its own write
// transaction together with its schema_version row. The transaction begins
// IMMEDIATE, taking the database's write lock before it re-reads the
// version, so concurrent migrators (other engines, other processes) apply
// each file once.
func (e *Engine) Migrate(ctx context.Context) error {
	if errMigrations != nil {
		return fmt.Errorf("sqlite: %w", errMigrations)
	}
	// Fast path, without the write lock: already current.
	if current, latest, err := e.SchemaVersion(ctx); err != nil {
		return err
	} else if current == latest {
		return e.attachTier(ctx)
	} else if err := checkNotNewer(current); err != nil {
		return err
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

// migrateOne applies the next pending migration, or reports that none is
// pending.
func (e *Engine) migrateOne(ctx context.Context) (done bool, err error) {
	if err := e.check(ctx); err != nil {
		return false, err
	}
	tx, err := e.writer.BeginTx(ctx, nil)
	if err != nil {
		return false, interpretError(ctx, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreDone(tx.Rollback()))
		}
	}()
	if _, err := tx.ExecContext(ctx, createSchemaVersion); err != nil {
		return false, interpretError(ctx, err)
	}
	current, err := currentVersion(ctx, tx)
	if err != nil {
		return false, err
	}
	if err := checkNotNewer(current); err != nil {
		return false, err
	}
	if current < len(migrations) {
		m := migrations[current]
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return false, fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, interpretError(ctx, err))
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO schema_version (version, name) VALUES (?, ?)", m.Version, m.Name); err != nil {
			return false, interpretError(ctx, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, interpretError(ctx, err)
	}
	return current+1 >= len(migrations), nil
}

// ignoreDone drops the error of a rollback that found the transaction
// already ended (database/sql rolls back by itself when ctx ends).
func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// SchemaVersion implements engine.Engine.
func (e *Engine) SchemaVersion(ctx context.Context) (current, latest int, err error) {
	if err := e.check(ctx); err != nil {
		return 0, 0, err
	}
	current, err = currentVersion(ctx, e.reader)
	if err = listError(ctx, err); err != nil {
		return 0, 0, err
	}
	return current, len(migrations), nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func currentVersion(ctx context.Context, q querier) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM schema_version").Scan(&v)
	return v, interpretError(ctx, err)
}

func checkNotNewer(current int) error {
	if current > len(migrations) {
		return fmt.Errorf("%w: database schema version %d is newer than this binary (%d): upgrade stead", steaderr.ErrSchema, current, len(migrations))
	}
	return nil
}
