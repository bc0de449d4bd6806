package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/steadkit/stead/engine/internal/groupcommit"
	"github.com/steadkit/stead/steaderr"
)

// TestInterpretError pins the error policy, including the server codes a
// test cannot provoke on demand (a server starting up, a crash restart).
func TestInterpretError(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "m"} }
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name string
		err  error
		want error // nil: no sentinel
	}{
		{"no rows", pgx.ErrNoRows, steaderr.ErrNotFound},
		{"closed pool", puddle.ErrClosedPool, steaderr.ErrClosed},
		{"undefined table", pg(sqlstateUndefinedTable), steaderr.ErrSchema},
		{"invalid schema", pg(sqlstateInvalidSchemaName), steaderr.ErrSchema},
		{"admin shutdown", pg(sqlstateAdminShutdown), steaderr.ErrUnavailable},
		{"crash shutdown", pg(sqlstateCrashShutdown), steaderr.ErrUnavailable},
		{"cannot connect now", pg(sqlstateCannotConnectNow), steaderr.ErrUnavailable},
		{"connection failure", pg("08006"), steaderr.ErrUnavailable},
		{"connection refused", opErr, steaderr.ErrUnavailable},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), steaderr.ErrUnavailable},
		{"broken pipe", fmt.Errorf("write: %w", syscall.EPIPE), steaderr.ErrUnavailable},
		{"unexpected EOF", fmt.Errorf("receive message failed: %w", io.ErrUnexpectedEOF), steaderr.ErrUnavailable},
		{"conn closed", fmt.Errorf("begin: %w", pgconn.ErrConnClosed), steaderr.ErrUnavailable},
		{"bad password", pg("28P01"), nil},
		{"syntax", pg("42601"), nil},
		{"cancelled", fmt.Errorf("timeout: %w", context.Canceled), nil},
		{"deadline", &net.OpError{Op: "read", Err: fmt.Errorf("%w", context.DeadlineExceeded)}, nil},
	}
	sentinels := []error{steaderr.ErrNotFound, steaderr.ErrClosed, steaderr.ErrSchema, steaderr.ErrUnavailable}
	for _, tt := range tests {
		got := interpretError(tt.err)
		if !errors.Is(got, tt.err) {
			t.Errorf("%s: %v lost the driver's error", tt.name, got)
		}
		for _, s := range sentinels {
			if errors.Is(got, s) != (s == tt.want) {
				t.Errorf("%s: interpretError = %v: errors.Is(%v) = %v", tt.name, got, s, !(s == tt.want))
			}
		}
		if again := interpretError(got); again != got {
			t.Errorf("%s: interpreting twice changed %q to %q", tt.name, got, again)
		}
		if msg := got.Error(); tt.want == nil && msg[:len("postgres: ")] != "postgres: " {
			t.Errorf("%s: %q lacks the engine prefix", tt.name, msg)
		}
	}
}

// TestFlushAloneOnce: a batch run once is handed errAlone, to be run again
// one item at a time, only when the server failed it (so rolled it back);
// a batch whose outcome is unknown fails each item with its error.
func TestFlushAloneOnce(t *testing.T) {
	lost := fmt.Errorf("reading the commit: %w", io.ErrUnexpectedEOF)
	refused := &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}
	for _, tc := range []struct {
		name string
		once bool
		err  error
		want error
	}{
		{"server failed, once", true, refused, errAlone},
		{"outcome unknown, once", true, lost, lost},
		{"server failed", false, refused, errAlone},
		{"outcome unknown", false, lost, errAlone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flush := flushAlone(func(context.Context, []*setItem) error { return tc.err }, tc.once)
			batch := []*groupcommit.Request[*setItem]{{Item: &setItem{}}, {Item: &setItem{}}}
			err := flush(t.Context(), batch)
			for i, req := range batch {
				got := req.Err
				if got == nil {
					got = err // the batch's own error, every item's
				}
				if !errors.Is(got, tc.want) {
					t.Errorf("item %d: %v, want %v", i, got, tc.want)
				}
			}
		})
	}
}
