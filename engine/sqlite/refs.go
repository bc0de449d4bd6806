package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/internal/groupcommit"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// The ref statements. Times are Unix microseconds; a ref is live while its
// expiry is NULL or after now. Writes run on the single writer, so a Set
// (weak or not) or Touch never interleaves with an arbitration of its key.
const (
	// sqlRefSetCheck answers whether the blob ?1 is stored and the live
	// version of the ref ?2 at ?3 (NULL: none).
	sqlRefSetCheck = `SELECT EXISTS (SELECT 1 FROM blobs WHERE key = ?1),
	(SELECT version FROM refs WHERE name = ?2 AND (expiry IS NULL OR expiry > ?3))`
	sqlRefLive = `SELECT version FROM refs WHERE name = ?1 AND (expiry IS NULL OR expiry > ?2)`
	// sqlRefNextVer takes ?1 versions from the counter and answers the
	// last of them.
	sqlRefNextVer = `UPDATE ref_versions SET last = last + ?1 RETURNING last`
	// sqlRefUpsert writes the ref ?1 to key ?2 at version ?3 with
	// annotation ?4, expiry ?5 (NULL: none) and weak ?6.
	sqlRefUpsert = `INSERT INTO refs (name, key, version, annotation, expiry, weak) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
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

// refStmts are the ref statements, prepared once: a ref read or write is
// a few small statements, and preparing them anew each call cost more
// than running them.
type refStmts struct {
	commit                     *groupcommit.Committer[*refSetReq]
	get                        stmt // on the reader
	setCheck, nextVer, upsert  stmt // on the writer
	live, touch, delete, getTx stmt // on the writer
}

func (s *refStmts) init(e *Engine) {
	s.commit = groupcommit.NewOnce(1, maxBatchRefSets, maxBatchRefSetBytes, refMech{e}.flushSets)
	s.get = stmt{db: e.reader, query: sqlRefGet}
	s.setCheck = stmt{db: e.writer, query: sqlRefSetCheck}
	s.nextVer = stmt{db: e.writer, query: sqlRefNextVer}
	s.upsert = stmt{db: e.writer, query: sqlRefUpsert}
	s.live = stmt{db: e.writer, query: sqlRefLive}
	s.touch = stmt{db: e.writer, query: sqlRefTouch}
	s.delete = stmt{db: e.writer, query: sqlRefDelete}
	s.getTx = stmt{db: e.writer, query: sqlRefGet}
}

func (s *refStmts) close() error {
	return errors.Join(s.get.close(), s.setCheck.close(), s.nextVer.close(), s.upsert.close(),
		s.live.close(), s.touch.close(), s.delete.close(), s.getTx.close())
}

// prepared returns the writer statements ss, prepared: before a write
// transaction, since preparing takes the writer's one connection.
func prepared(ctx context.Context, ss ...*stmt) ([]*sql.Stmt, error) {
	out := make([]*sql.Stmt, len(ss))
	for i, s := range ss {
		p, err := s.get(ctx)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

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
	q := &refSetReq{p: p}
	if err := m.e.refs.commit.Put(ctx, q); err != nil {
		return ref.Ref{}, interpretError(ctx, err)
	}
	return q.out, nil
}

// refSetReq is one Set in a group commit: concurrent Sets (a registry
// push sets two refs at once) share a write transaction, each applied in
// turn as if alone.
type refSetReq struct {
	p   ref.SetParams
	out ref.Ref
}

func (q *refSetReq) Size() int        { return len(q.p.Name) + len(q.p.Annotation) }
func (q *refSetReq) BatchKey() string { return "" } // in turn in one transaction, a later Set sees an earlier's

// Group commits of ref Sets.
const (
	maxBatchRefSets     = 64
	maxBatchRefSetBytes = 1 << 20
)

// flushSets applies a batch of Sets in one write transaction. A Set
// refused (its key not stored, its condition not met) changes nothing and
// fails alone; any other error fails the batch, which then changes
// nothing.
func (m refMech) flushSets(ctx context.Context, batch []*groupcommit.Request[*refSetReq]) error {
	rs := &m.e.refs
	ps, err := prepared(ctx, &rs.setCheck, &rs.nextVer, &rs.upsert)
	if err != nil {
		return err
	}
	return m.e.writeTx(ctx, func(tx *sql.Tx) error {
		check, nextVer, upsert := tx.StmtContext(ctx, ps[0]), tx.StmtContext(ctx, ps[1]), tx.StmtContext(ctx, ps[2])
		for _, r := range batch {
			r.Err = nil
			out, refused, err := setOne(ctx, check, nextVer, upsert, r.Item.p)
			switch {
			case refused != nil:
				r.Err = refused
			case err != nil:
				return err
			default:
				r.Item.out = out
			}
		}
		return nil
	})
}

// setOne applies one Set in the transaction the statements belong to:
// refused is why it changed nothing (ErrNotFound, ErrConflict), err a
// failed statement.
func setOne(ctx context.Context, check, nextVer, upsert *sql.Stmt, p ref.SetParams) (out ref.Ref, refused, err error) {
	now := clock.OrNow(p.Now)
	var stored bool
	var live sql.NullInt64
	if err := check.QueryRowContext(ctx, p.Key.String(), p.Name, now.UnixMicro()).Scan(&stored, &live); err != nil {
		return ref.Ref{}, nil, err
	}
	if !stored {
		return ref.Ref{}, fmt.Errorf("%w: blob %s is not stored", steaderr.ErrNotFound, p.Key), nil
	}
	if refused := condRefused(p, live); refused != nil {
		return ref.Ref{}, refused, nil
	}
	var version int64
	if err := nextVer.QueryRowContext(ctx, 1).Scan(&version); err != nil {
		return ref.Ref{}, nil, err
	}
	out, err = upsertRef(ctx, upsert, p, now, version, live.Valid)
	return out, nil, err
}

// condRefused answers why p's condition refuses the live version live
// (not valid: no live ref), or nil.
func condRefused(p ref.SetParams, live sql.NullInt64) error {
	switch {
	case p.Cond == ref.IfAbsent && live.Valid:
		return fmt.Errorf("%w: a live ref has the name", steaderr.ErrConflict)
	case p.Cond == ref.IfVersion && (!live.Valid || live.Int64 != p.Version):
		return fmt.Errorf("%w: the live ref's version is not %d", steaderr.ErrConflict, p.Version)
	}
	return nil
}

// upsertRef writes the ref p at version, set at now, and returns it as
// stored; wasLive is whether a live ref had its name.
func upsertRef(ctx context.Context, upsert *sql.Stmt, p ref.SetParams, now time.Time, version int64, wasLive bool) (ref.Ref, error) {
	out := ref.Ref{Name: p.Name, Key: p.Key, Version: version, Annotation: p.Annotation, Weak: p.Weak, Created: !wasLive}
	var expiry any
	if p.TTL > 0 {
		out.Expiry = now.Add(p.TTL)
		expiry = out.Expiry.UnixMicro()
	}
	_, err := upsert.ExecContext(ctx, p.Name, p.Key.String(), version, p.Annotation, expiry, p.Weak)
	return out, err
}

func (m refMech) Get(ctx context.Context, p ref.GetParams) (ref.Ref, error) {
	if err := m.e.check(ctx); err != nil {
		return ref.Ref{}, err
	}
	return m.get(ctx, p.Name, clock.OrNow(p.Now))
}

// get reads the live ref name at now on the reader.
func (m refMech) get(ctx context.Context, name string, now time.Time) (ref.Ref, error) {
	s, err := m.e.refs.get.get(ctx)
	if err != nil {
		return ref.Ref{}, readError(ctx, err)
	}
	r, err := scanRef(s.QueryRowContext(ctx, name, now.UnixMicro()).Scan)
	if err != nil {
		return ref.Ref{}, readError(ctx, err)
	}
	return r, nil
}

func (m refMech) Touch(ctx context.Context, p ref.TouchParams) (ref.Ref, error) {
	if err := m.e.check(ctx); err != nil {
		return ref.Ref{}, err
	}
	if p.Lazy {
		// A read answers a ref with half its TTL left, writing nothing.
		now := clock.OrNow(p.Now)
		r, err := m.get(ctx, p.Name, now)
		if err != nil {
			return ref.Ref{}, err
		}
		if r.Expiry.IsZero() || r.Expiry.Sub(now) >= p.TTL/2 {
			return r, nil
		}
	}
	ps, err := prepared(ctx, &m.e.refs.touch, &m.e.refs.getTx)
	if err != nil {
		return ref.Ref{}, readError(ctx, err)
	}
	var out ref.Ref
	err = m.e.writeTx(ctx, func(tx *sql.Tx) error {
		// The clock is read once the writer is held (as a pin's renewal):
		// an arbitration before this one has committed.
		now := clock.OrNow(p.Now)
		if _, err := tx.StmtContext(ctx, ps[0]).ExecContext(ctx, p.Name, now.UnixMicro(), now.Add(p.TTL).UnixMicro()); err != nil {
			return err
		}
		var err error
		out, err = scanRef(tx.StmtContext(ctx, ps[1]).QueryRowContext(ctx, p.Name, now.UnixMicro()).Scan)
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
	ps, err := prepared(ctx, &m.e.refs.delete, &m.e.refs.live)
	if err != nil {
		return readError(ctx, err)
	}
	err = m.e.writeTx(ctx, func(tx *sql.Tx) error {
		now := clock.OrNow(p.Now).UnixMicro()
		res, err := tx.StmtContext(ctx, ps[0]).ExecContext(ctx, p.Name, now, p.Version)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 {
			return err
		}
		var version int64
		switch err := tx.StmtContext(ctx, ps[1]).QueryRowContext(ctx, p.Name, now).Scan(&version); {
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
