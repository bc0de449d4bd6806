package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/steadkit/stead/engine/internal/sqlengine"
	"github.com/steadkit/stead/steaderr"
)

// This file is the engine's whole error policy: which driver errors become
// which stead sentinels, and what a statement that met a database never
// migrated means. The prefix rule: every error the engine returns names
// the engine once — a driver error through sqlengine.Error, an error of the
// engine's own making with "sqlite: " where it is made. The same policy, in the same shape, is in
// engine/postgres/errors.go.

// interpretError maps a database/sql or driver error to stead's sentinels,
// keeping the driver's error in the chain:
//
//   - no row is steaderr.ErrNotFound;
//   - a closed database or statement is steaderr.ErrClosed;
//   - a missing table is sqlengine.ErrNoSchema (steaderr.ErrSchema);
//   - the database still locked by another connection when the busy
//     timeout ran out (SQLITE_BUSY) is steaderr.ErrUnavailable: retrying
//     later may succeed;
//   - a statement interrupted because ctx ended, or a transaction
//     database/sql rolled back because ctx ended, is ctx's error.
//
// Disk errors (SQLITE_IOERR, SQLITE_FULL, SQLITE_CORRUPT, SQLITE_CANTOPEN)
// are deliberately not ErrUnavailable: they need an operator, not a retry
// (docs/decisions/0015-unavailable.md). interpretError is idempotent.
func interpretError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if sqlengine.Decided(err) {
		return err
	}
	de := &sqlengine.Error{Engine: "sqlite", Err: err}
	var sqliteErr *sqlite.Error
	isSQLite := errors.As(err, &sqliteErr)
	var primary int
	if isSQLite {
		primary = sqliteErr.Code() & 0xff
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return de
	case errors.Is(err, sql.ErrNoRows):
		return sqlengine.NotFound(err) // the driver's words are no use to a caller
	case primary == sqlite3.SQLITE_INTERRUPT && ctx.Err() != nil:
		return fmt.Errorf("%w: %w", ctx.Err(), de)
	case ctx.Err() != nil && (errors.Is(err, sql.ErrTxDone) || isClosed(err)):
		// database/sql rolled the transaction back on cancellation and
		// closed its statements: the cause is the context.
		return fmt.Errorf("%w: %w", ctx.Err(), de)
	case primary == sqlite3.SQLITE_ERROR && strings.Contains(sqliteErr.Error(), "no such table"):
		return fmt.Errorf("%w: %w", sqlengine.ErrNoSchema, de)
	case primary == sqlite3.SQLITE_BUSY:
		return fmt.Errorf("%w: %w", steaderr.ErrUnavailable, de)
	case isClosed(err):
		return fmt.Errorf("%w: %w", steaderr.ErrClosed, de)
	}
	return de
}

// isClosed reports whether err is database/sql's answer for a closed
// database or statement; it has no exported sentinel.
func isClosed(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "sql: database is closed") || strings.Contains(msg, "sql: statement is closed")
}

// isForeignKey reports whether err is a foreign-key violation.
func isForeignKey(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}

// readError interprets err from a point read: on a database never migrated
// nothing is stored, so the answer is steaderr.ErrNotFound.
func readError(ctx context.Context, err error) error {
	return sqlengine.ReadError(interpretError(ctx, err))
}

// listError interprets err from a listing, count or probe: on a database
// never migrated nothing is stored, so the answer is empty (nil error).
func listError(ctx context.Context, err error) error {
	return sqlengine.ListError(interpretError(ctx, err))
}
