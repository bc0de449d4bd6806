package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/steadkit/stead/engine/internal/sqlengine"
	"github.com/steadkit/stead/steaderr"
)

// This file is the engine's whole error policy: which driver errors become
// which stead sentinels, and what a statement that met a database never
// migrated means. The prefix rule: every error the engine returns names
// the engine once — a driver error through sqlengine.Error, an error of the
// engine's own making with "postgres: " where it is made. The same policy, in the same shape, is in
// engine/sqlite/errors.go.

// The SQLSTATE codes the engine acts on, by their PostgreSQL names
// (https://www.postgresql.org/docs/current/errcodes-appendix.html).
const (
	sqlstateUndefinedTable       = "42P01"
	sqlstateUndefinedColumn      = "42703"
	sqlstateInvalidSchemaName    = "3F000"
	sqlstateForeignKeyViolation  = "23503"
	sqlstateUniqueViolation      = "23505"
	sqlstateDeadlockDetected     = "40P01"
	sqlstateSerializationFailure = "40001"
	sqlstateAdminShutdown        = "57P01" // pg_terminate_backend, or a fast or smart shutdown
	sqlstateCrashShutdown        = "57P02"
	sqlstateCannotConnectNow     = "57P03" // starting up, shutting down, recovering
	sqlstateClassConnection      = "08"    // connection_exception and its subclasses
)

// interpretError maps a driver error to stead's sentinels, keeping the
// driver's error in the chain:
//
//   - no row is steaderr.ErrNotFound;
//   - a closed pool is steaderr.ErrClosed;
//   - a missing table or schema is sqlengine.ErrNoSchema (steaderr.ErrSchema);
//   - a refused, reset, dropped or closed connection, a connect that got no answer
//     in time, a terminated backend or a server shutting down or starting
//     up is steaderr.ErrUnavailable;
//   - otherwise the caller's cancelled or expired context stays that
//     context's error (never ErrUnavailable, though pgx interrupts the
//     statement by breaking its connection).
//
// It is idempotent: an error already interpreted is returned unchanged.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if sqlengine.Decided(err) {
		return err
	}
	de := &sqlengine.Error{Engine: "postgres", Err: err}
	var pgErr *pgconn.PgError
	isPg := errors.As(err, &pgErr)
	var connectErr *pgconn.ConnectError
	switch {
	case errors.Is(err, context.Canceled):
		return de
	case !isPg && errors.As(err, &connectErr):
		// Not reached, or no answer within connect_timeout (a deadline pgx
		// sets itself, which is no caller's).
		return fmt.Errorf("%w: %w", steaderr.ErrUnavailable, de)
	case errors.Is(err, context.DeadlineExceeded):
		return de
	case errors.Is(err, pgx.ErrNoRows):
		return sqlengine.NotFound(err) // the driver's words are no use to a caller
	case errors.Is(err, puddle.ErrClosedPool):
		return fmt.Errorf("%w: %w", steaderr.ErrClosed, de)
	case isPg && (pgErr.Code == sqlstateUndefinedTable || pgErr.Code == sqlstateInvalidSchemaName):
		return fmt.Errorf("%w: %w", sqlengine.ErrNoSchema, de)
	case isPg && isUnavailableCode(pgErr.Code), !isPg && isConnectionFailure(err):
		return fmt.Errorf("%w: %w", steaderr.ErrUnavailable, de)
	}
	return de
}

// isUnavailableCode reports whether a server error says the server cannot
// serve this connection now, rather than that the statement is wrong.
func isUnavailableCode(code string) bool {
	switch code {
	case sqlstateAdminShutdown, sqlstateCrashShutdown, sqlstateCannotConnectNow:
		return true
	}
	return strings.HasPrefix(code, sqlstateClassConnection)
}

// isConnectionFailure reports whether err, which carries no server error,
// is a failure to reach the server or a connection lost mid-conversation
// (or before it: pgx's "conn closed" on a connection it closed when its
// backend went away). A failed connect that the server answered (bad password, unknown
// database) carries a server error and is not one.
func isConnectionFailure(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, pgconn.ErrConnClosed)
}

// isForeignKey reports whether err is a foreign-key violation.
func isForeignKey(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateForeignKeyViolation
}

// isChunkKeyViolation reports whether err is a unique violation of
// blob_chunks' primary key: a chunk at that offset of its set exists.
func isChunkKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateUniqueViolation && pgErr.ConstraintName == "blob_chunks_pkey"
}

// isTransient reports whether err is a deadlock (40P01) or serialization
// failure (40001): PostgreSQL rolled the transaction back whole, so it may
// run again.
func isTransient(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == sqlstateDeadlockDetected || pgErr.Code == sqlstateSerializationFailure)
}

// readError interprets err from a point read: on a database never migrated
// nothing is stored, so the answer is steaderr.ErrNotFound.
func readError(err error) error { return sqlengine.ReadError(interpretError(err)) }

// listError interprets err from a listing, count or probe: on a database
// never migrated nothing is stored, so the answer is empty (nil error).
func listError(err error) error { return sqlengine.ListError(interpretError(err)) }
