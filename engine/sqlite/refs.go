package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// The ref statements. Times are Unix microseconds; a ref is live while its
// expiry is NULL or after now. Writes run on the single writer, so a Set
// (weak or not) or Touch never interleaves with an arbitration of its key.
const (
	sqlRefStored  = `SELECT EXISTS (SELECT 1 FROM blobs WHERE key = ?1)`
	sqlRefLive    = `SELECT version FROM refs WHERE name = ?1 AND (expiry IS NULL OR expiry > ?2)`
	sqlRefNextVer = `UPDATE ref_versions SET last = last + 1 RETURNING last`
	sqlRefUpsert  = `INSERT INTO refs (name, key, version, annotation, expiry, weak) VALUES (@name, @key, @version, @annotation, @expiry, @weak)
ON CONFLICT (name) DO UPDATE SET key = excluded.key, version = excluded.version, annotation = excluded.annotation, expiry = excluded.expiry, weak = excluded.weak`
	sqlRefGet = `SELECT name, key, version, annotation, expiry, weak FROM refs WHERE name = ?1 AND (expiry IS NULL OR expiry > ?2)`
	// sqlRefTouch renews a live, expiring ref; a ref without expiry is
	// read back unchanged.
	sqlRefTouch  = `UPDATE refs SET expiry = ?3 WHERE name = ?1 AND expiry IS NOT NULL AND expiry > ?2`
	sqlRefDelete = `DELETE FROM refs WHERE name = ?1 AND (expiry IS NULL OR expiry > ?2) AND (?3 = 0 OR version = ?3)`
	// sqlRefList lists live refs with names in [@prefix, @prefix_end) (no
	// upper bound when @prefix_end is NULL) after @after, in name order.
	sqlRefList = `SELECT name, key, version, annotation, expiry, weak FROM refs
WHERE name >= @prefix AND (@prefix_end IS NULL OR name < @prefix_end) AND name > @after AND (expiry IS NULL OR expiry > @now)
ORDER BY name LIMIT @lim`
)

type refMech struct{ e *Engine }

var _ ref.Backend = refMech{}

// Refs implements engine.Engine.
func (e *Engine) Refs() ref.Backend { return refMech{e} }

// scanRef reads one ref's columns.
func scanRef(scan func(...any) error) (ref.Ref, error) {
	var r ref.Ref
	var key string
	var expiry sql.NullInt64
	if err := scan(&r.Name, &key, &r.Version, &r.Annotation, &expiry, &r.Weak); err != nil {
		return ref.Ref{}, err
	}
	k, err := blob.ParseKey(key)
	if err != nil {
		return ref.Ref{}, fmt.Errorf("sqlite: stored ref key: %w", err)
	}
	r.Key = k
	if expiry.Valid {
		r.Expiry = time.UnixMicro(expiry.Int64).UTC()
	}
	return r, nil
}

func (m refMech) Set(ctx context.Context, p ref.SetParams) (ref.Ref, error) {
	if err := m.e.check(ctx); err != nil {
		return ref.Ref{}, err
	}
	var out ref.Ref
	err := m.e.writeTx(ctx, func(tx *sql.Tx) error {
		now := clock.OrNow(p.Now)
		var stored bool
		if err := tx.QueryRowContext(ctx, sqlRefStored, p.Key.String()).Scan(&stored); err != nil {
			return err
		}
		if !stored {
			return fmt.Errorf("%w: blob %s is not stored", steaderr.ErrNotFound, p.Key)
		}
		var version int64
		err := tx.QueryRowContext(ctx, sqlRefLive, p.Name, now.UnixMicro()).Scan(&version)
		live := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		switch {
		case p.Cond == ref.IfAbsent && live:
			return fmt.Errorf("%w: a live ref has the name", steaderr.ErrConflict)
		case p.Cond == ref.IfVersion && (!live || version != p.Version):
			return fmt.Errorf("%w: the live ref's version is not %d", steaderr.ErrConflict, p.Version)
		}
		if err := tx.QueryRowContext(ctx, sqlRefNextVer).Scan(&version); err != nil {
			return err
		}
		out = ref.Ref{Name: p.Name, Key: p.Key, Version: version, Annotation: p.Annotation, Weak: p.Weak, Created: !live}
		var expiry any
		if p.TTL > 0 {
			out.Expiry = now.Add(p.TTL)
			expiry = out.Expiry.UnixMicro()
		}
		_, err = tx.ExecContext(ctx, sqlRefUpsert, sql.Named("name", p.Name), sql.Named("key", p.Key.String()),
			sql.Named("version", version), sql.Named("annotation", p.Annotation), sql.Named("expiry", expiry), sql.Named("weak", p.Weak))
		return err
	})
	if err != nil {
		return ref.Ref{}, interpretError(ctx, err)
	}
	return out, nil
}

func (m refMech) Get(ctx context.Context, p ref.GetParams) (ref.Ref, error) {
	if err := m.e.check(ctx); err != nil {
		return ref.Ref{}, err
	}
	r, err := m.read(ctx, p.Name, clock.OrNow(p.Now))
	if err != nil {
		return ref.Ref{}, readError(ctx, err)
	}
	return r, nil
}

// read reads the ref name live at now on the reader.
func (m refMech) read(ctx context.Context, name string, now time.Time) (ref.Ref, error) {
	s, err := m.e.refGet.get(ctx)
	if err != nil {
		return ref.Ref{}, err
	}
	return scanRef(s.QueryRowContext(ctx, name, now.UnixMicro()).Scan)
}

func (m refMech) Touch(ctx context.Context, p ref.TouchParams) (ref.Ref, error) {
	if err := m.e.check(ctx); err != nil {
		return ref.Ref{}, err
	}
	if p.Lazy {
		// A read answers a ref with half its TTL left, writing nothing.
		now := clock.OrNow(p.Now)
		r, err := m.read(ctx, p.Name, now)
		if err != nil {
			return ref.Ref{}, readError(ctx, err)
		}
		if r.Expiry.IsZero() || r.Expiry.Sub(now) >= p.TTL/2 {
			return r, nil
		}
	}
	var out ref.Ref
	err := m.e.writeTx(ctx, func(tx *sql.Tx) error {
		// The clock is read once the writer is held (as a pin's renewal):
		// an arbitration before this one has committed.
		now := clock.OrNow(p.Now)
		if _, err := tx.ExecContext(ctx, sqlRefTouch, p.Name, now.UnixMicro(), now.Add(p.TTL).UnixMicro()); err != nil {
			return err
		}
		var err error
		out, err = scanRef(tx.QueryRowContext(ctx, sqlRefGet, p.Name, now.UnixMicro()).Scan)
		return err
	})
	if err != nil {
		return ref.Ref{}, readError(ctx, err)
	}
	return out, nil
}

func (m refMech) Delete(ctx context.Context, p ref.DeleteParams) error {
	if err := m.e.check(ctx); err != nil {
		return err
	}
	err := m.e.writeTx(ctx, func(tx *sql.Tx) error {
		now := clock.OrNow(p.Now).UnixMicro()
		deleted, err := changed(ctx, tx, sqlRefDelete, p.Name, now, p.Version)
		if err != nil || deleted {
			return err
		}
		var version int64
		switch err := tx.QueryRowContext(ctx, sqlRefLive, p.Name, now).Scan(&version); {
		case errors.Is(err, sql.ErrNoRows):
			return steaderr.ErrNotFound
		case err != nil:
			return err
		}
		return fmt.Errorf("%w: the live ref's version is not %d", steaderr.ErrConflict, p.Version)
	})
	return readError(ctx, err)
}

func (m refMech) List(ctx context.Context, p ref.ListParams, yield func(ref.Ref) bool) (err error) {
	if err := m.e.check(ctx); err != nil {
		return err
	}
	if p.Limit < 1 {
		return fmt.Errorf("%w: list limit %d, want at least 1", steaderr.ErrInvalidArgument, p.Limit)
	}
	var end any
	if e, ok := ref.PrefixEnd(p.Prefix); ok {
		end = e
	}
	rows, err := m.e.reader.QueryContext(ctx, sqlRefList, sql.Named("prefix", p.Prefix), sql.Named("prefix_end", end),
		sql.Named("after", p.After), sql.Named("now", clock.OrNow(p.Now).UnixMicro()), sql.Named("lim", p.Limit))
	if err != nil {
		return listError(ctx, err)
	}
	defer func() { err = errors.Join(err, interpretError(ctx, rows.Close())) }()
	for rows.Next() {
		r, err := scanRef(rows.Scan)
		if err != nil {
			return interpretError(ctx, err)
		}
		if !yield(r) {
			return nil
		}
	}
	return listError(ctx, rows.Err())
}
