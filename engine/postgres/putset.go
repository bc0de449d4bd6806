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

// A PutSet is one pipeline, one round trip: sqlPutOne for the one blob, then
// a Set's statement per ref, in name order, and a single Sync, so that the
// server runs them in one implicit transaction, which an error in any
// statement rolls back whole (docs/decisions/0055-put-with-refs.md). The
// put locks the blob row as a lone put does and holds the lock to the
// commit, so a ref's statement finds it stored and no arbitration
// interleaves. A Set whose condition fails must fail the transaction, so
// the ref statements are sqlRefSet and sqlRefSwap answering, in place of
// whether the blob is stored, true when the ref was written and otherwise
// a cast that fails (invalid_text_representation carrying refusedMark); the
// cast reads the written row, so the planner cannot fold it into a
// constant and fail a PutSet that wrote (TestPutSetStatements checks the
// two stay their Set statements but for that answer). Nothing in it keeps session state: it runs through
// PgBouncer in transaction mode as any statement does.
var (
	// sqlPutSetRef is sqlRefSet answering refusedAnswer.
	sqlPutSetRef = declare("sqlPutSetRef", `WITH b AS (
	SELECT key FROM {schema}.blobs WHERE key = $2 FOR KEY SHARE
), cur AS (
	SELECT expiry FROM {schema}.refs WHERE name = $1 AND EXISTS (SELECT FROM b) FOR NO KEY UPDATE
), w AS (
	INSERT INTO {schema}.refs AS r (name, key, version, annotation, expiry, weak)
	SELECT $1, b.key, nextval('{schema}.ref_versions'), $3,
	       CASE WHEN $4::bigint > 0 THEN coalesce($5::timestamptz, clock_timestamp()) + ($4::bigint / 1000000) * interval '1 second' + ($4::bigint % 1000000) * interval '1 microsecond' END,
	       $8::boolean
	FROM b LEFT JOIN cur ON true
	ON CONFLICT (name) DO UPDATE
	SET key = excluded.key, version = nextval('{schema}.ref_versions'), annotation = excluded.annotation, expiry = excluded.expiry, weak = excluded.weak
	WHERE $6::bigint = 0 OR r.expiry IS NOT NULL AND r.expiry <= coalesce($5::timestamptz, now())
	RETURNING name, key, version, annotation, expiry, weak, xmax = 0 AS inserted
), d AS (
	INSERT INTO {schema}.gc_declared (id) SELECT true FROM w
	WHERE NOT $7::boolean AND NOT EXISTS (SELECT FROM {schema}.gc_declared) LIMIT 1
	ON CONFLICT DO NOTHING
)
SELECT CASE WHEN w.name IS NOT NULL THEN true ELSE ('stead: ref condition not met: ' || coalesce(w.name, ''))::int = 0 END, w.name, w.key, w.version, w.annotation, w.expiry, w.weak,
	coalesce(w.inserted OR cur.expiry <= coalesce($5::timestamptz, now()), false)
FROM (SELECT) AS one LEFT JOIN w ON true LEFT JOIN cur ON true`)

	// sqlPutSetSwap is sqlRefSwap answering refusedAnswer.
	sqlPutSetSwap = declare("sqlPutSetSwap", `WITH b AS (
	SELECT key FROM {schema}.blobs WHERE key = $2 FOR KEY SHARE
), w AS (
	UPDATE {schema}.refs AS r
	SET key = $2, version = nextval('{schema}.ref_versions'), annotation = $3,
	    expiry = CASE WHEN $4::bigint > 0 THEN coalesce($5::timestamptz, clock_timestamp()) + ($4::bigint / 1000000) * interval '1 second' + ($4::bigint % 1000000) * interval '1 microsecond' END,
	    weak = $7::boolean
	WHERE (SELECT count(*) FROM b) = 1 AND r.name = $1 AND r.version = $6::bigint
	  AND (r.expiry IS NULL OR r.expiry > coalesce($5::timestamptz, now()))
	RETURNING r.name, r.key, r.version, r.annotation, r.expiry, r.weak
)
SELECT CASE WHEN w.name IS NOT NULL THEN true ELSE ('stead: ref condition not met: ' || coalesce(w.name, ''))::int = 0 END, w.name, w.key, w.version, w.annotation, w.expiry, w.weak, false
FROM (SELECT) AS one LEFT JOIN w ON true`)
)

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
			stmt, args := r.setStatement(sets[i], sqlPutSetRef, sqlPutSetSwap)
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
