package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// A PutSet is one pipeline, one round trip: sqlPutOne for the one blob,
// then a Set's statement per ref, in name order, and a single Sync, so
// that the server runs them in one implicit transaction, which an error in
// any statement rolls back whole (docs/decisions/0055-put-with-refs.md).
// The put locks the blob row as a lone put does and holds the lock to the
// commit, so a ref's statement finds it stored and no arbitration
// interleaves. A Set whose condition fails must fail the transaction: its
// statement is sent refusing (setStatement), so that it fails with
// invalid_text_representation carrying refusedMark. Nothing in it keeps
// session state: it runs through PgBouncer in transaction mode as any
// statement does.

// refusedMark is the text of the cast a PutSet's refused Set fails.
const refusedMark = "stead: ref condition not met"

// isRefused reports whether err is the failed cast of a refused Set.
func isRefused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateInvalidTextRepresentation && strings.Contains(pgErr.Message, refusedMark)
}

// sqlstateInvalidTextRepresentation is the error of a cast from text that
// does not parse.
const sqlstateInvalidTextRepresentation = "22P02"

// PutSet does not join the puts' group commit: a refused Set must roll
// back its own put and refs, and in a shared statement or transaction it
// would roll back the batch's other puts too.
func (r *refs) PutSet(ctx context.Context, p blob.PutParams, sets []ref.SetParams) (bool, []ref.Ref, error) {
	if p.Chunks != 0 || len(p.Children) > 0 {
		return false, nil, fmt.Errorf("%w: a put with refs stores an inline value without children", steaderr.ErrInvalidArgument)
	}
	if err := r.e.check(ctx); err != nil {
		return false, nil, err
	}
	// Refs are locked in name order, as every PutSet locks them, so that
	// two naming the same refs do not deadlock.
	order := make([]int, len(sets))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return strings.Compare(sets[i].Name, sets[j].Name) })
	key, value := p.Key.String(), p.Value
	if value == nil {
		value = []byte{} // nil binds as NULL
	}
	ttl, now := p.TTL.Microseconds(), nowTimestamp(p.Now)
	put := []any{key, int64(len(value)), value, p.Owner, ttl, now}
	rows := make([]setRow, len(sets))
	var created bool
	failed := -1
	err := r.e.retryTransient(ctx, func() error {
		b := &pgx.Batch{}
		b.Queue(r.e.sql(sqlPutOne), put...)
		for _, i := range order {
			stmt, args := r.setStatement(sets[i], true)
			b.Queue(stmt, args...)
		}
		br := r.e.pool.SendBatch(ctx, b)
		created, failed = false, -1
		err := func() error {
			res, err := br.Query()
			if err != nil {
				return err
			}
			var k string
			if _, err := pgx.ForEachRow(res, []any{&k}, func() error { created = true; return nil }); err != nil {
				return err
			}
			for _, i := range order {
				if err := br.QueryRow().Scan(rows[i].dest()...); err != nil {
					failed = i
					return err
				}
			}
			return nil
		}()
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return err
	})
	switch {
	case err != nil && failed >= 0 && isRefused(err):
		return false, nil, fmt.Errorf("ref %.80q: %w", sets[failed].Name, refConflict(sets[failed]))
	case err != nil:
		return false, nil, err
	}
	out := make([]ref.Ref, len(sets))
	for i, s := range sets {
		if out[i], err = r.setResult(s, &rows[i]); err != nil {
			return false, nil, err
		}
	}
	return created, out, nil
}
