package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/lock"
)

// The lock statements. $1 is the lock's name, $2 its owner; $3 (acquire)
// or $4 (renew) is the caller's clock, NULL for the database's now().
const (
	// sqlLockAcquire: $4 the TTL, $5 whether a refused caller will wait.
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
	sqlLockAcquire = `WITH g AS (
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
WHERE name = $1 AND owner IS NOT NULL AND NOT EXISTS (SELECT FROM g)`

	// sqlLockRenew: $3 the token, $5 the TTL. An UPDATE re-checks its WHERE
	// against the latest version of the row it locks, so a renewal never
	// touches a newer grant.
	sqlLockRenew = `UPDATE {schema}.locks SET expiry = coalesce($4::timestamptz, now()) + $5::interval
WHERE name = $1 AND owner = $2 AND token = $3
RETURNING expiry`

	// sqlLockRelease: $3 the token, $4 the NOTIFY channel. pg_notify runs
	// only for a row released while a waiter may be waiting, and its
	// notification is delivered only if the release commits.
	sqlLockRelease = `UPDATE {schema}.locks SET owner = NULL, expiry = NULL
WHERE name = $1 AND owner = $2 AND token = $3
RETURNING CASE WHEN wanted_until > now() THEN pg_notify($4, name) END`
)

// locks is the engine's lock.Engine. Each call is one statement, one round
// trip. Times come from the database (now()) unless the caller passes Now.
type locks struct {
	e *Engine
	// channel is the NOTIFY channel releases are announced on, one per
	// schema; its payload is the lock's name.
	channel string
	sql     struct{ acquire, renew, release string }
}

func (l *locks) init(e *Engine) {
	l.e = e
	l.channel = fmt.Sprintf("stead_locks_%016x", uint64(e.lockKey("locks")))
	l.sql.acquire = e.render(sqlLockAcquire)
	l.sql.renew = e.render(sqlLockRenew)
	l.sql.release = e.render(sqlLockRelease)
}

func (l *locks) Acquire(ctx context.Context, p lock.AcquireParams) (lock.AcquireResult, error) {
	if err := l.e.check(ctx); err != nil {
		return lock.AcquireResult{}, err
	}
	var res lock.AcquireResult
	g := &res.Grant
	err := l.e.pool.QueryRow(ctx, l.sql.acquire, p.Name, p.Owner, nowArg(p.Now), interval(p.TTL), p.Wait).
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
	err := l.e.pool.QueryRow(ctx, l.sql.renew, p.Name, p.Owner, p.Token, nowArg(p.Now), interval(p.TTL)).Scan(&expiry)
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
	tag, err := l.e.pool.Exec(ctx, l.sql.release, p.Name, p.Owner, p.Token, l.channel)
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

var _ lock.Engine = (*locks)(nil)
