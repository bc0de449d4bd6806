package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/ref"
)

// The lock statements. Acquire, Renew and Release take positional
// arguments: name, owner, then Acquire's now (the caller's clock, NULL for
// the database's now()), ttl (an interval) and wait; Renew's token, now
// and ttl; Release's token and channel. The listings take named ones.
var (
	// sqlLockAcquire: $5 is whether a refused caller will wait.
	//
	// Under READ COMMITTED, ON CONFLICT locks the row and judges the WHERE
	// and SET against its latest committed version, while a plain read in
	// the same statement sees the statement's older snapshot. So only the
	// row the upsert returns decides: a free row becomes a new grant with
	// the next token; a live grant to the same owner is "updated" to itself;
	// a waiter's attempt on a live grant leaves the grant alone but marks
	// the row wanted until the holder's expiry, so that a release before
	// then notifies. A non-waiting attempt on a live grant writes nothing,
	// and the second branch, a snapshot read, gives the holder as a hint.
	//
	// Whether the grant is new: a new grant stamps the row with this
	// transaction's id (granted_by), which RETURNING, seeing only new
	// values, compares; a grant the owner already held keeps its stamp.
	sqlLockAcquire = declare("sqlLockAcquire", `WITH g AS (
	INSERT INTO {schema}.locks AS l (name, owner, token, expiry, granted_by)
	VALUES ($1, $2, 1, coalesce($3::timestamptz, now()) + $4::interval, pg_current_xact_id())
	ON CONFLICT (name) DO UPDATE SET
		owner        = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now()))
			THEN excluded.owner ELSE l.owner END,
		token        = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now()))
			THEN l.token + 1 ELSE l.token END,
		expiry       = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now()))
			THEN excluded.expiry ELSE l.expiry END,
		granted_by   = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now()))
			THEN excluded.granted_by ELSE l.granted_by END,
		wanted_until = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now())) OR l.owner = excluded.owner
			THEN l.wanted_until ELSE greatest(l.wanted_until, l.expiry) END
	WHERE (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now())) OR l.owner = excluded.owner OR $5::boolean
	RETURNING l.owner = $2, l.owner, l.token, l.expiry,
		l.owner = $2 AND l.granted_by IS NOT DISTINCT FROM pg_current_xact_id())
SELECT *, coalesce($3::timestamptz, now()) FROM g
UNION ALL
SELECT false, owner, token, expiry, false, coalesce($3::timestamptz, now()) FROM {schema}.locks
WHERE name = $1 AND owner IS NOT NULL AND NOT EXISTS (SELECT FROM g)`)

	// sqlLockRenew: an UPDATE re-checks its WHERE
	// against the latest version of the row it locks, so a renewal never
	// touches a newer grant.
	sqlLockRenew = declare("sqlLockRenew", `UPDATE {schema}.locks SET expiry = coalesce($4::timestamptz, now()) + $5::interval
WHERE name = $1 AND owner = $2 AND token = $3
RETURNING expiry`)

	// sqlLockRelease: $4 is the NOTIFY channel. pg_notify runs
	// only for a row released while a waiter may be waiting, and its
	// notification is delivered only if the release commits.
	sqlLockRelease = declare("sqlLockRelease", `UPDATE {schema}.locks SET owner = NULL, expiry = NULL
WHERE name = $1 AND owner = $2 AND token = $3
RETURNING CASE WHEN wanted_until > now() THEN pg_notify($4, name) END`)

	// sqlLockList reads the primary key over names in [@prefix,
	// @prefix_end) after @after, passing over free and expired rows;
	// sqlLockListFrom, for a prefix with no end (ref.PrefixEnd), over
	// names from @prefix on. Two statements, not one with an optional
	// bound, so that a generic plan bounds its index scan on both sides.
	sqlLockList = declare("sqlLockList", `SELECT name, owner, token, expiry FROM {schema}.locks
WHERE name >= @prefix AND name < @prefix_end AND name > @after
	AND owner IS NOT NULL AND expiry > coalesce(@now::timestamptz, now())
ORDER BY name LIMIT @lim`)
	sqlLockListFrom = declare("sqlLockListFrom", `SELECT name, owner, token, expiry FROM {schema}.locks
WHERE name >= @prefix AND name > @after
	AND owner IS NOT NULL AND expiry > coalesce(@now::timestamptz, now())
ORDER BY name LIMIT @lim`)
)

// locks is the engine's lock.Backend. Each call is one statement, one round
// trip. Times come from the database (now()) unless the caller passes Now.
type locks struct {
	e *Engine
	// channel is the NOTIFY channel releases are announced on, one per
	// schema; its payload is the lock's name.
	channel string
}

func (l *locks) init(e *Engine) {
	l.e = e
	l.channel = fmt.Sprintf("stead_locks_%016x", uint64(e.lockKey("locks")))
}

func (l *locks) Acquire(ctx context.Context, p lock.AcquireParams) (lock.AcquireResult, error) {
	if err := l.e.check(ctx); err != nil {
		return lock.AcquireResult{}, err
	}
	var res lock.AcquireResult
	g := &res.Grant
	// Positional arguments, here and in Renew and Release: pgx rewrites a
	// named statement's text on every call.
	err := l.e.pool.QueryRow(ctx, l.e.sql(sqlLockAcquire), p.Name, p.Owner, nowArg(p.Now), interval(p.TTL), p.Wait).
		Scan(&res.Granted, &g.Owner, &g.Token, &g.Expiry, &res.New, &res.Now)
	switch {
	case errors.Is(err, pgx.ErrNoRows): // not granted; holder unknown
		return lock.AcquireResult{Now: p.Now}, nil
	case err != nil:
		return lock.AcquireResult{}, interpretError(err)
	}
	g.Name, g.Expiry, res.Now = p.Name, g.Expiry.UTC(), res.Now.UTC()
	return res, nil
}

func (l *locks) Renew(ctx context.Context, p lock.RenewParams) (time.Time, bool, error) {
	if err := l.e.check(ctx); err != nil {
		return time.Time{}, false, err
	}
	var expiry time.Time
	err := l.e.pool.QueryRow(ctx, l.e.sql(sqlLockRenew), p.Name, p.Owner, p.Token, nowArg(p.Now), interval(p.TTL)).Scan(&expiry)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, interpretError(err)
	}
	return expiry.UTC(), true, nil
}

func (l *locks) Release(ctx context.Context, p lock.ReleaseParams) (bool, error) {
	if err := l.e.check(ctx); err != nil {
		return false, err
	}
	tag, err := l.e.pool.Exec(ctx, l.e.sql(sqlLockRelease), p.Name, p.Owner, p.Token, l.channel)
	if err != nil {
		return false, interpretError(err)
	}
	return tag.RowsAffected() == 1, nil
}

// WatchReleases subscribes to the engine's listener, live while it
// listens; without one (PgBouncer mode without a listen URL) the channel
// is nil, so waiters poll.
func (l *locks) WatchReleases(ctx context.Context, name string) (<-chan struct{}, bool, func(), error) {
	if err := l.e.check(ctx); err != nil {
		return nil, false, func() {}, err
	}
	if l.e.listen == nil {
		return nil, false, func() {}, nil
	}
	return l.e.listen.watch(l.channel, name)
}

func (l *locks) ListHeld(ctx context.Context, p lock.ListParams) ([]lock.Grant, error) {
	if err := l.e.check(ctx); err != nil {
		return nil, err
	}
	query, args := sqlLockListFrom, pgx.StrictNamedArgs{"prefix": p.Prefix, "after": p.After, "now": nowArg(p.Now), "lim": p.Limit}
	if end, ok := ref.PrefixEnd(p.Prefix); ok {
		query, args["prefix_end"] = sqlLockList, end
	}
	var out []lock.Grant
	err := l.e.retryTransient(ctx, func() error {
		out = nil
		rows, err := l.e.pool.Query(ctx, l.e.sql(query), args)
		if err != nil {
			return interpretError(err)
		}
		defer rows.Close()
		for rows.Next() {
			var g lock.Grant
			if err := rows.Scan(&g.Name, &g.Owner, &g.Token, &g.Expiry); err != nil {
				return interpretError(err)
			}
			g.Expiry = g.Expiry.UTC()
			out = append(out, g)
		}
		return interpretError(rows.Err())
	})
	if err != nil {
		return nil, listError(err)
	}
	return out, nil
}

var _ lock.Backend = (*locks)(nil)
