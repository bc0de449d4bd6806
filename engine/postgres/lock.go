package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/lock"
)

// locks is the engine's lock.Engine. Each call is one statement, one round
// trip. Times come from the database (now()) unless the caller passes Now.
type locks struct {
	e *Engine
	// channel is the NOTIFY channel releases are announced on, one per
	// schema.
	channel string
	// listener is nil in PgBouncer mode, where LISTEN is not possible.
	listener *listener
	sql      struct{ acquire, renew, release string }
}

func (l *locks) init(e *Engine, listen bool) {
	l.e = e
	l.channel = fmt.Sprintf("stead_locks_%016x", uint64(e.lockKey("locks")))
	if listen {
		l.listener = &listener{connConfig: e.pool.Config().ConnConfig, channel: l.channel}
	}
	t := e.ident + ".locks"
	now := "coalesce($3::timestamptz, now())"
	free := "(l.owner IS NULL OR l.expiry <= " + now + ")"
	// $1 name, $2 owner, $3 now (NULL: the database's), $4 ttl in µs,
	// $5 whether a refused caller will wait.
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
	l.sql.acquire = `WITH g AS (
		INSERT INTO ` + t + ` AS l (name, owner, token, expiry)
		VALUES ($1, $2, 1, ` + now + ` + $4::bigint * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET
			owner        = CASE WHEN ` + free + ` THEN excluded.owner ELSE l.owner END,
			token        = CASE WHEN ` + free + ` THEN l.token + 1 ELSE l.token END,
			expiry       = CASE WHEN ` + free + ` THEN excluded.expiry ELSE l.expiry END,
			wanted_until = CASE WHEN ` + free + ` OR l.owner = excluded.owner THEN l.wanted_until
				ELSE greatest(l.wanted_until, l.expiry) END
		WHERE ` + free + ` OR l.owner = excluded.owner OR $5::boolean
		RETURNING l.owner = $2, l.owner, l.token, l.expiry)
	SELECT *, ` + now + ` FROM g
	UNION ALL
	SELECT false, owner, token, expiry, ` + now + ` FROM ` + t + `
	WHERE name = $1 AND owner IS NOT NULL AND NOT EXISTS (SELECT FROM g)`
	// An UPDATE re-checks its WHERE against the latest version of the row
	// it locks, so a renewal or release never touches a newer grant.
	l.sql.renew = `UPDATE ` + t + ` SET expiry = coalesce($4::timestamptz, now()) + $5::bigint * interval '1 microsecond'
		WHERE name = $1 AND owner = $2 AND token = $3 RETURNING expiry`
	// pg_notify runs only for a row released while a waiter may be waiting,
	// and its notification is delivered only if the release commits.
	l.sql.release = `UPDATE ` + t + ` SET owner = NULL, expiry = NULL
		WHERE name = $1 AND owner = $2 AND token = $3
		RETURNING CASE WHEN wanted_until > now() THEN pg_notify($4, name) END`
}

func (l *locks) close() {
	if l.listener != nil {
		l.listener.stop()
	}
}

// nowParam returns the query argument for a caller's Now: NULL for the
// database's clock.
func nowParam(now time.Time) any {
	if now.IsZero() {
		return nil
	}
	return now
}

func (l *locks) Acquire(ctx context.Context, p lock.AcquireParams) (lock.AcquireResult, error) {
	if err := l.e.check(ctx); err != nil {
		return lock.AcquireResult{}, err
	}
	var res lock.AcquireResult
	g := &res.Grant
	err := l.e.pool.QueryRow(ctx, l.sql.acquire, p.Name, p.Owner, nowParam(p.Now), p.TTL.Microseconds(), p.Wait).
		Scan(&res.Granted, &g.Owner, &g.Token, &g.Expiry, &res.Now)
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
	err := l.e.pool.QueryRow(ctx, l.sql.renew, p.Name, p.Owner, p.Token, nowParam(p.Now), p.TTL.Microseconds()).Scan(&expiry)
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

// WatchReleases subscribes to the engine's listener; in PgBouncer mode
// there is none and the channel is nil, so waiters poll.
func (l *locks) WatchReleases(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if err := l.e.check(ctx); err != nil {
		return nil, func() {}, err
	}
	if l.listener == nil {
		return nil, func() {}, nil
	}
	return l.listener.watch(name)
}

var _ lock.Engine = (*locks)(nil)
