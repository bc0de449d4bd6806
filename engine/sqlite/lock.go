package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/ref"
)

// locks is the engine's lock.Backend. Every grant, renewal and release is
// one autocommit statement on the writer connection; times are Unix
// microseconds on the system clock unless the caller passes Now. Other
// processes' releases cannot be seen, so WatchReleases leaves waiters to
// poll.
type locks struct {
	e                       *Engine
	acquire, renew, release stmt
	holder, list, listFrom  stmt
}

func (l *locks) init(e *Engine) {
	l.e = e
	// ?1 name, ?2 owner, ?3 now, ?4 ttl. Only a new grant writes: a free
	// or expired row takes the next token. RETURNING sees only the row as
	// written, so a live grant kept for its owner would look the same as a
	// new one; it is left alone, and found by reading the holder.
	l.acquire = stmt{db: e.writer, query: `INSERT INTO locks (name, owner, token, expiry) VALUES (?1, ?2, 1, ?3 + ?4)
		ON CONFLICT (name) DO UPDATE SET token = token + 1, expiry = excluded.expiry, owner = excluded.owner
		WHERE owner IS NULL OR expiry <= ?3
		RETURNING token, expiry`}
	l.renew = stmt{db: e.writer, query: "UPDATE locks SET expiry = ?4 WHERE name = ?1 AND owner = ?2 AND token = ?3"}
	l.release = stmt{db: e.writer, query: "UPDATE locks SET owner = NULL, expiry = NULL WHERE name = ?1 AND owner = ?2 AND token = ?3"}
	l.holder = stmt{db: e.reader, query: "SELECT owner, token, expiry FROM locks WHERE name = ?1 AND owner IS NOT NULL"}
	// The primary key over names in [@prefix, @prefix_end) after @after,
	// passing over free and expired rows; listFrom, for a prefix with no
	// end (ref.PrefixEnd), from @prefix on. Two statements, not one with
	// an optional bound, so that the scan is bounded on both sides.
	l.list = stmt{db: e.reader, query: `SELECT name, owner, token, expiry FROM locks
		WHERE name >= @prefix AND name < @prefix_end AND name > @after AND owner IS NOT NULL AND expiry > @now
		ORDER BY name LIMIT @lim`}
	l.listFrom = stmt{db: e.reader, query: `SELECT name, owner, token, expiry FROM locks
		WHERE name >= @prefix AND name > @after AND owner IS NOT NULL AND expiry > @now
		ORDER BY name LIMIT @lim`}
}

func (l *locks) close() error {
	return errors.Join(l.acquire.close(), l.renew.close(), l.release.close(), l.holder.close(), l.list.close(), l.listFrom.close())
}

// Acquire makes a new grant in one statement. When it finds the lock
// live, a read of the holder decides: p.Owner's grant comes back
// unchanged, another owner's is a refusal. A lock freed between the two
// is tried again.
func (l *locks) Acquire(ctx context.Context, p lock.AcquireParams) (lock.AcquireResult, error) {
	if err := l.e.check(ctx); err != nil {
		return lock.AcquireResult{}, err
	}
	now := clock.OrNow(p.Now)
	for {
		res := lock.AcquireResult{Now: now, Grant: lock.Grant{Name: p.Name, Owner: p.Owner}}
		s, err := l.acquire.get(ctx)
		if err != nil {
			return lock.AcquireResult{}, interpretError(ctx, err)
		}
		var expiry int64
		err = s.QueryRowContext(ctx, p.Name, p.Owner, now.UnixMicro(), p.TTL.Microseconds()).Scan(&res.Grant.Token, &expiry)
		switch {
		case err == nil:
			res.Granted, res.New, res.Grant.Expiry = true, true, time.UnixMicro(expiry).UTC()
			return res, nil
		case !errors.Is(err, sql.ErrNoRows):
			return lock.AcquireResult{}, interpretError(ctx, err)
		}
		if s, err = l.holder.get(ctx); err == nil {
			err = s.QueryRowContext(ctx, p.Name).Scan(&res.Grant.Owner, &res.Grant.Token, &expiry)
		}
		switch {
		case errors.Is(err, sql.ErrNoRows):
			continue // released since
		case err != nil:
			return lock.AcquireResult{}, interpretError(ctx, err)
		case expiry <= now.UnixMicro():
			continue // expired since
		}
		res.Granted, res.Grant.Expiry = res.Grant.Owner == p.Owner, time.UnixMicro(expiry).UTC()
		return res, nil
	}
}

func (l *locks) Renew(ctx context.Context, p lock.RenewParams) (time.Time, bool, error) {
	expiry := clock.OrNow(p.Now).Add(p.TTL)
	ok, err := l.exec(ctx, &l.renew, p.Name, p.Owner, p.Token, expiry.UnixMicro())
	if !ok {
		return time.Time{}, false, err
	}
	return expiry, true, nil
}

func (l *locks) Release(ctx context.Context, p lock.ReleaseParams) (bool, error) {
	return l.exec(ctx, &l.release, p.Name, p.Owner, p.Token)
}

// exec runs a statement that changes the grant it names, and reports
// whether it did.
func (l *locks) exec(ctx context.Context, st *stmt, args ...any) (bool, error) {
	if err := l.e.check(ctx); err != nil {
		return false, err
	}
	s, err := st.get(ctx)
	if err != nil {
		return false, interpretError(ctx, err)
	}
	r, err := s.ExecContext(ctx, args...)
	if err != nil {
		return false, interpretError(ctx, err)
	}
	n, err := r.RowsAffected()
	return n == 1, interpretError(ctx, err)
}

// WatchReleases returns a nil channel: releases by other processes sharing
// the file cannot be seen, so waiters poll.
func (l *locks) WatchReleases(ctx context.Context, _ string) (<-chan struct{}, bool, func(), error) {
	return nil, false, func() {}, l.e.check(ctx)
}

func (l *locks) ListHeld(ctx context.Context, p lock.ListParams) (_ []lock.Grant, err error) {
	if err := l.e.check(ctx); err != nil {
		return nil, err
	}
	st, args := &l.listFrom, []any{sql.Named("prefix", p.Prefix), sql.Named("after", p.After),
		sql.Named("now", clock.OrNow(p.Now).UnixMicro()), sql.Named("lim", p.Limit)}
	if end, ok := ref.PrefixEnd(p.Prefix); ok {
		st, args = &l.list, append(args, sql.Named("prefix_end", end))
	}
	s, err := st.get(ctx)
	if err != nil {
		return nil, listError(ctx, err)
	}
	rows, err := s.QueryContext(ctx, args...)
	if err != nil {
		return nil, listError(ctx, err)
	}
	defer func() { err = errors.Join(err, interpretError(ctx, rows.Close())) }()
	var out []lock.Grant
	for rows.Next() {
		var g lock.Grant
		var expiry int64
		if err := rows.Scan(&g.Name, &g.Owner, &g.Token, &expiry); err != nil {
			return nil, interpretError(ctx, err)
		}
		g.Expiry = time.UnixMicro(expiry).UTC()
		out = append(out, g)
	}
	return out, interpretError(ctx, rows.Err())
}

var _ lock.Backend = (*locks)(nil)
