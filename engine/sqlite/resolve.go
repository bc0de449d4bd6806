package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/ref"
)

// The statements of Resolve. A ref and its blob are one joined row, read
// by one statement (one snapshot); a weak ref's blob row is deleted with
// the ref, so the join finds none without the other.
const (
	// sqlRefResolve answers the live ref ?1 at ?2 with its blob's stored
	// form, and whether it is due a renewal of ?3 µs: it expires in less
	// than half of that.
	sqlRefResolve = `SELECT r.name, r.key, r.version, r.annotation, r.expiry, r.weak, b.size, b.value, b.chunks, b.object,
	r.expiry IS NOT NULL AND 2 * (r.expiry - ?2) < ?3
FROM refs r JOIN blobs b ON b.key = r.key
WHERE r.name = ?1 AND (r.expiry IS NULL OR r.expiry > ?2)`
	// sqlRefRenewDue renews the live ref ?1 to expire at ?2 + ?3 µs when
	// it is due: it expires in less than half of ?3.
	sqlRefRenewDue = `UPDATE refs SET expiry = ?2 + ?3 WHERE name = ?1 AND expiry IS NOT NULL AND expiry > ?2 AND 2 * (expiry - ?2) < ?3`
)

// resolveStmts are Resolve's statements, prepared once as the other ref
// statements are.
type resolveStmts struct {
	read          stmt // on the reader
	renew, readTx stmt // on the writer
}

func (s *resolveStmts) init(e *Engine) {
	s.read = stmt{db: e.reader, query: sqlRefResolve}
	s.renew = stmt{db: e.writer, query: sqlRefRenewDue}
	s.readTx = stmt{db: e.writer, query: sqlRefResolve}
}

func (s *resolveStmts) close() error {
	return errors.Join(s.read.close(), s.renew.close(), s.readTx.close())
}

// Resolve reads the ref and its blob in one statement on the reader; a
// ref due a renewal is renewed, and read again, in one write transaction,
// judged on the clock read once the writer is held.
func (m refMech) Resolve(ctx context.Context, p ref.ResolveParams) (ref.Ref, blob.Stored, error) {
	if err := m.e.check(ctx); err != nil {
		return ref.Ref{}, blob.Stored{}, err
	}
	s, err := m.e.resolve.read.get(ctx)
	if err != nil {
		return ref.Ref{}, blob.Stored{}, readError(ctx, err)
	}
	r, st, due, err := scanResolved(s.QueryRowContext(ctx, p.Name, clock.OrNow(p.Now).UnixMicro(), p.TTL.Microseconds()).Scan)
	if err != nil || !due {
		return r, st, readError(ctx, err)
	}
	ps, err := prepared(ctx, &m.e.resolve.renew, &m.e.resolve.readTx)
	if err != nil {
		return ref.Ref{}, blob.Stored{}, readError(ctx, err)
	}
	err = m.e.writeTx(ctx, func(tx *sql.Tx) error {
		now := clock.OrNow(p.Now).UnixMicro()
		if _, err := tx.StmtContext(ctx, ps[0]).ExecContext(ctx, p.Name, now, p.TTL.Microseconds()); err != nil {
			return err
		}
		var err error
		r, st, _, err = scanResolved(tx.StmtContext(ctx, ps[1]).QueryRowContext(ctx, p.Name, now, p.TTL.Microseconds()).Scan)
		return err
	})
	if err != nil {
		return ref.Ref{}, blob.Stored{}, readError(ctx, err)
	}
	return r, st, nil
}

// scanResolved reads sqlRefResolve's row.
func scanResolved(scan func(...any) error) (ref.Ref, blob.Stored, bool, error) {
	var row blobRow
	var due bool
	r, err := scanRef(func(dest ...any) error { return scan(append(append(dest, row.dest()...), &due)...) })
	if err != nil {
		return ref.Ref{}, blob.Stored{}, false, err
	}
	return r, row.stored(), due, nil
}
