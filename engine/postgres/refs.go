package postgres

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/internal/groupcommit"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// The ref statements (docs/decisions/0022). A ref is live while its expiry
// is NULL or after now (@now, or the database's now()). Set, Swap and Touch
// (of a weak ref too) lock the key's blob row first, FOR KEY SHARE as a pin
// does, so none can interleave with an arbitration of the key (its FOR
// UPDATE conflicts) while refs naming one blob do not queue on its row; each then judges the ref's row
// as it stands once locked (ON CONFLICT, or an UPDATE's recheck), never as
// the statement's snapshot saw it, and draws a new version only then, so
// versions commit in increasing order. A new expiry runs from
// clock_timestamp(), read once the row is locked, so a write that waited
// on an arbitration does not return a ref already expired. A TTL in
// microseconds becomes an interval as whole seconds plus microseconds,
// exact to the microsecond (interval arithmetic runs in float8).
var (
	// sqlRefSet locks the key's blob row, then the ref's row if any (after
	// the blob row, as every write of a ref), then inserts or replaces the
	// ref ($6 0), or only replaces an expired one ($6 1, create-only), and
	// records, once, that the store declared liveness (gc_declared: in the
	// statement, not a trigger, whose call cost as much as the rest of it;
	// migration 15), unless $7 says this engine saw it recorded already. It
	// answers whether the blob was stored and the ref written, if it was,
	// and whether that created the name: no row, or an expired one, once
	// locked. A row the statement's snapshot did not see (inserted
	// meanwhile) is replaced, not inserted: xmax = 0 tells the insert of a
	// new row. $1 name, $2 key, $3 annotation, $4 TTL in µs, $5 now, $8
	// weak. With $9 (a PutSet's, decision 0055) a ref not written fails the
	// statement instead, and its transaction: a cast that cannot parse,
	// carrying refusedMark, which reads the written row, so the planner
	// cannot fold it and fail a Set that wrote. Positional: pgx rewrites a
	// named statement's text on every call.
	sqlRefSet = declare("sqlRefSet", `WITH b AS (
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
SELECT CASE WHEN w.name IS NOT NULL OR NOT $9::boolean THEN EXISTS (SELECT FROM b)
	ELSE ('stead: ref condition not met: ' || coalesce(w.name, ''))::int = 0 END,
	w.name, w.key, w.version, w.annotation, w.expiry, w.weak,
	coalesce(w.inserted OR cur.expiry <= coalesce($5::timestamptz, now()), false)
FROM (SELECT) AS one LEFT JOIN w ON true LEFT JOIN cur ON true`)

	// sqlRefSwap locks the key's blob row, then replaces the live ref whose
	// version is $6 (a compare-and-swap: never an insert, so never a
	// creation). It answers as sqlRefSet does; its other parameters are
	// sqlRefSet's, $8 its $9.
	sqlRefSwap = declare("sqlRefSwap", `WITH b AS (
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
SELECT CASE WHEN w.name IS NOT NULL OR NOT $8::boolean THEN EXISTS (SELECT FROM b)
	ELSE ('stead: ref condition not met: ' || coalesce(w.name, ''))::int = 0 END,
	w.name, w.key, w.version, w.annotation, w.expiry, w.weak, false
FROM (SELECT) AS one LEFT JOIN w ON true`)

	// sqlDeclareRefs records, once, that the store declared liveness when
	// a ref of the names $1 exists: sent last by a transaction of several
	// Sets (refs.declareStatement), after every ref row it locks, as every
	// transaction takes gc_declared's row last. A ref that exists was set
	// by a transaction that declared, so the record is never wrong.
	sqlDeclareRefs = declare("sqlDeclareRefs", `INSERT INTO {schema}.gc_declared (id)
SELECT true WHERE NOT EXISTS (SELECT FROM {schema}.gc_declared) AND EXISTS (SELECT FROM {schema}.refs WHERE name = ANY ($1::text[]))
ON CONFLICT DO NOTHING`)

	sqlRefGet = declare("sqlRefGet", `SELECT name, key, version, annotation, expiry, weak FROM {schema}.refs
WHERE name = $1 AND (expiry IS NULL OR expiry > coalesce($2::timestamptz, now()))`)

	// sqlRefGetFresh is sqlRefGet answering too whether the ref has half
	// of $3 µs left (or no expiry), judged on the same clock.
	sqlRefGetFresh = declare("sqlRefGetFresh", `SELECT name, key, version, annotation, expiry, weak,
	expiry IS NULL OR 2 * (expiry - coalesce($2::timestamptz, now())) >= $3::bigint * interval '1 microsecond'
FROM {schema}.refs
WHERE name = $1 AND (expiry IS NULL OR expiry > coalesce($2::timestamptz, now()))`)

	// sqlRefTouch locks the blob row of the ref's key, then renews the
	// ref if it still names that key and is live at clock_timestamp(), the
	// instant the row is read (as a pin's renewal judges), keeping its
	// version; a ref without expiry is answered unchanged. It answers the
	// key whose row it locked, and the ref if it renewed it.
	sqlRefTouch = declare("sqlRefTouch", `WITH target AS (
	SELECT key FROM {schema}.refs WHERE name = $1
), b AS (
	SELECT key FROM {schema}.blobs WHERE key = (SELECT key FROM target) FOR KEY SHARE
), u AS (
	UPDATE {schema}.refs
	SET expiry = CASE WHEN expiry IS NOT NULL THEN coalesce($3::timestamptz, clock_timestamp()) + ($2::bigint / 1000000) * interval '1 second' + ($2::bigint % 1000000) * interval '1 microsecond' END
	WHERE name = $1 AND key = (SELECT key FROM b) AND (expiry IS NULL OR expiry > coalesce($3::timestamptz, clock_timestamp()))
	RETURNING name, key, version, annotation, expiry, weak
)
SELECT (SELECT key FROM target), u.name, u.key, u.version, u.annotation, u.expiry, u.weak
FROM (SELECT) AS one LEFT JOIN u ON true`)

	// sqlRefDelete locks the live ref, then deletes it if its version is
	// $2 (0: any), and answers whether a live ref had the name once locked
	// and whether it was deleted.
	sqlRefDelete = declare("sqlRefDelete", `WITH live AS (
	SELECT name, version FROM {schema}.refs
	WHERE name = $1 AND (expiry IS NULL OR expiry > coalesce($3::timestamptz, now()))
	FOR UPDATE
), d AS (
	DELETE FROM {schema}.refs r USING live
	WHERE r.name = live.name AND ($2::bigint = 0 OR live.version = $2::bigint)
	RETURNING 1
)
SELECT EXISTS (SELECT FROM live), EXISTS (SELECT FROM d)`)

	// sqlRefList lists live refs with names in [@prefix, @prefix_end) (no
	// upper bound when @prefix_end is NULL) after @after, in name order.
	sqlRefList = declare("sqlRefList", `SELECT name, key, version, annotation, expiry, weak FROM {schema}.refs
WHERE name >= @prefix AND (@prefix_end::text IS NULL OR name < @prefix_end) AND name > @after
AND (expiry IS NULL OR expiry > coalesce(@now::timestamptz, now()))
ORDER BY name LIMIT @lim`)
)

type refs struct {
	e *Engine
	// declared is set once a Set of this engine committed, so the store's
	// declaration of liveness is recorded: later Sets skip the check.
	declared atomic.Bool
	// commit is the group commit of PutSets without conditions.
	commit *groupcommit.Committer[*putSet]
	// sets and createSets are the group commits of Sets without a
	// condition and of IfAbsent ones (setbatch.go).
	sets, createSets *groupcommit.Committer[*setItem]
	// batchAll makes conditional PutSets join the group commit too (tests
	// only: a refusal in a batch).
	batchAll atomic.Bool
}

func (r *refs) init(e *Engine) {
	r.e = e
	r.commit = groupcommit.New(putFlushers, maxBatchPuts, maxBatchBytes, flushAlone(r.runPutSets, false))
	r.sets = groupcommit.New(putFlushers, maxBatchPuts, maxBatchBytes, flushAlone(r.runSets, false))
	r.createSets = groupcommit.NewOnce(putFlushers, maxBatchPuts, maxBatchBytes, flushAlone(r.runSets, true))
}

// Refs implements engine.Engine.
func (e *Engine) Refs() ref.Backend { return &e.refs }

// refRow scans a ref's columns.
type refRow struct {
	name, key  pgtype.Text
	version    pgtype.Int8
	annotation []byte
	expiry     pgtype.Timestamptz
	weak       pgtype.Bool
}

func (rr *refRow) dest() []any {
	return []any{&rr.name, &rr.key, &rr.version, &rr.annotation, &rr.expiry, &rr.weak}
}

func (rr *refRow) ref() (ref.Ref, error) {
	k, err := blob.ParseKey(rr.key.String)
	if err != nil {
		return ref.Ref{}, fmt.Errorf("postgres: stored ref key: %w", err)
	}
	return ref.Ref{Name: rr.name.String, Key: k, Version: rr.version.Int64, Annotation: rr.annotation, Expiry: rr.expiry.Time, Weak: rr.weak.Bool}, nil
}

// Set runs a compare-and-swap alone; other Sets share group commits
// (setbatch.go), a Set alone costing its lone statement.
func (r *refs) Set(ctx context.Context, p ref.SetParams) (ref.Ref, error) {
	if err := r.e.check(ctx); err != nil {
		return ref.Ref{}, err
	}
	sr, err := r.set(ctx, p)
	if err != nil {
		return ref.Ref{}, err
	}
	return r.setResult(p, &sr)
}

// setStatement returns the statement of the Set p and its arguments:
// sqlRefSwap's for a compare-and-swap, else sqlRefSet's; with refuse, one
// that fails its transaction when it writes no ref. A Set among others in
// one transaction (not alone) leaves the store's declaration to the
// transaction's last statement (declareStatement), so that no
// transaction takes gc_declared's row between two refs' rows.
func (r *refs) setStatement(p ref.SetParams, refuse, alone bool) (string, []any) {
	if p.Cond == ref.IfVersion {
		return r.e.sql(sqlRefSwap), []any{p.Name, p.Key.String(), p.Annotation, p.TTL.Microseconds(), nowArg(p.Now), p.Version, p.Weak, refuse}
	}
	return r.e.sql(sqlRefSet), []any{p.Name, p.Key.String(), p.Annotation, p.TTL.Microseconds(), nowArg(p.Now), int64(p.Cond), !alone || r.declared.Load(), p.Weak, refuse}
}

// declareStatement returns, for a transaction of several Sets of names,
// the statement to send after them that records the store's declaration
// (sqlDeclareRefs), or "" once this engine saw it recorded.
func (r *refs) declareStatement(names []string) (string, []any) {
	if r.declared.Load() {
		return "", nil
	}
	return r.e.sql(sqlDeclareRefs), []any{names}
}

// setRow scans what a Set's statement answers.
type setRow struct {
	stored, created bool
	rr              refRow
}

func (sr *setRow) dest() []any {
	return append(append([]any{&sr.stored}, sr.rr.dest()...), &sr.created)
}

// setResult is the outcome of the Set p whose statement committed and
// answered sr.
func (r *refs) setResult(p ref.SetParams, sr *setRow) (ref.Ref, error) {
	switch {
	case !sr.stored:
		return ref.Ref{}, fmt.Errorf("%w: blob %s is not stored", steaderr.ErrNotFound, p.Key)
	case !sr.rr.name.Valid:
		return ref.Ref{}, refConflict(p)
	}
	if p.Cond != ref.IfVersion {
		// The statement committed a ref, so gc_declared holds its row,
		// which nothing deletes (gc.Backend.Declared: once declared,
		// always).
		r.declared.Store(true)
	}
	out, err := sr.rr.ref()
	out.Created = sr.created
	return out, err
}

// refConflict is the error of a Set whose condition did not hold.
func refConflict(p ref.SetParams) error {
	if p.Cond == ref.IfAbsent {
		return fmt.Errorf("%w: a live ref has the name", steaderr.ErrConflict)
	}
	return fmt.Errorf("%w: the live ref's version is not %d", steaderr.ErrConflict, p.Version)
}

func (r *refs) Get(ctx context.Context, p ref.GetParams) (ref.Ref, error) {
	if err := r.e.check(ctx); err != nil {
		return ref.Ref{}, err
	}
	var rr refRow
	if err := readError(r.e.pool.QueryRow(ctx, r.e.sql(sqlRefGet), p.Name, nowArg(p.Now)).Scan(rr.dest()...)); err != nil {
		return ref.Ref{}, err
	}
	return rr.ref()
}

// Touch renews the ref under its key's blob row lock; a ref moved to
// another key meanwhile (so under another row) is tried again, for as long
// as it keeps moving and ctx lasts. A lazy
// Touch reads first, and locks nothing for a ref with half its TTL left.
func (r *refs) Touch(ctx context.Context, p ref.TouchParams) (ref.Ref, error) {
	if err := r.e.check(ctx); err != nil {
		return ref.Ref{}, err
	}
	if p.Lazy {
		var rr refRow
		var fresh bool
		err := r.e.pool.QueryRow(ctx, r.e.sql(sqlRefGetFresh), p.Name, nowArg(p.Now), p.TTL.Microseconds()).Scan(append(rr.dest(), &fresh)...)
		if err := readError(err); err != nil {
			return ref.Ref{}, err
		}
		if fresh {
			return rr.ref()
		}
	}
	for {
		var target pgtype.Text
		var rr refRow
		err := r.e.retryTransient(ctx, func() error {
			return r.e.pool.QueryRow(ctx, r.e.sql(sqlRefTouch), p.Name, p.TTL.Microseconds(), nowArg(p.Now)).Scan(append([]any{&target}, rr.dest()...)...)
		})
		switch {
		case err != nil:
			return ref.Ref{}, readError(err)
		case rr.name.Valid:
			return rr.ref()
		}
		// Not renewed: gone or expired (then Get, judging later or at the
		// same p.Now, says so too), or moved to another blob meanwhile,
		// perhaps and back: try again under the row of the key it names.
		if _, err := r.Get(ctx, ref.GetParams{Name: p.Name, Now: p.Now}); err != nil {
			return ref.Ref{}, err
		}
		if err := ctx.Err(); err != nil {
			return ref.Ref{}, err
		}
	}
}

func (r *refs) Delete(ctx context.Context, p ref.DeleteParams) error {
	if err := r.e.check(ctx); err != nil {
		return err
	}
	var live, deleted bool
	err := r.e.retryTransient(ctx, func() error {
		return r.e.pool.QueryRow(ctx, r.e.sql(sqlRefDelete), p.Name, p.Version, nowArg(p.Now)).Scan(&live, &deleted)
	})
	switch {
	case err != nil:
		return readError(err)
	case deleted:
		return nil
	case !live:
		return steaderr.ErrNotFound
	}
	return fmt.Errorf("%w: the live ref's version is not %d", steaderr.ErrConflict, p.Version)
}

func (r *refs) List(ctx context.Context, p ref.ListParams, yield func(ref.Ref) bool) error {
	if err := r.e.check(ctx); err != nil {
		return err
	}
	if p.Limit < 1 {
		return fmt.Errorf("%w: list limit %d, want at least 1", steaderr.ErrInvalidArgument, p.Limit)
	}
	var end *string
	if e, ok := ref.PrefixEnd(p.Prefix); ok {
		end = &e
	}
	rows, err := r.e.pool.Query(ctx, r.e.sql(sqlRefList), pgx.StrictNamedArgs{
		"prefix": p.Prefix, "prefix_end": end, "after": p.After, "now": nowArg(p.Now), "lim": p.Limit,
	})
	if err != nil {
		return listError(err)
	}
	defer rows.Close()
	var rr refRow
	for rows.Next() {
		if err := rows.Scan(rr.dest()...); err != nil {
			return interpretError(err)
		}
		x, err := rr.ref()
		if err != nil {
			return err
		}
		if !yield(x) {
			return nil
		}
	}
	return listError(rows.Err())
}
