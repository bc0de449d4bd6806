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

// putSets group-commits PutSets: concurrent ones share a write
// transaction, each applied in turn, one with a condition under a
// savepoint, which a refused Set rolls back alone. They do not join the
// puts' group commit, whose batches have no savepoints, nor the Sets',
// whose requests carry no value: the writer runs one transaction at a
// time whichever commits it.
type putSets struct {
	e      *Engine
	commit *groupcommit.Committer[*putSetReq]
}

func (ps *putSets) init(e *Engine) {
	ps.e = e
	ps.commit = groupcommit.NewOnce(1, maxBatchPuts, maxBatchBytes, ps.flush)
}

// putSetReq is one PutSet in a group commit.
type putSetReq struct {
	put  groupcommit.Put
	sets []ref.SetParams
	out  []ref.Ref
}

func (q *putSetReq) Size() int { return q.put.Size() }

// BatchKey implements groupcommit.Item: in turn in one transaction, a later
// PutSet sees an earlier's refs.
func (q *putSetReq) BatchKey() string { return "" }

func (m refMech) PutSet(ctx context.Context, p blob.PutParams, sets []ref.SetParams) (bool, []ref.Ref, error) {
	if p.Chunks != 0 || len(p.Children) > 0 {
		return false, nil, fmt.Errorf("%w: a put with refs stores an inline value without children", steaderr.ErrInvalidArgument)
	}
	for _, s := range sets {
		// The put stores the one key the refs may name, so no Set finds
		// its blob not stored.
		if s.Key != p.Key {
			return false, nil, fmt.Errorf("%w: ref %.80q names %s, not the put's key %s", steaderr.ErrInvalidArgument, s.Name, s.Key, p.Key)
		}
	}
	if err := m.e.check(ctx); err != nil {
		return false, nil, err
	}
	value := p.Value
	if value == nil {
		value = []byte{} // nil binds as NULL
	}
	q := &putSetReq{put: groupcommit.Put{Key: p.Key.String(), Value: value, Pin: groupcommit.Pin{Owner: p.Owner, TTL: p.TTL, Now: p.Now}}, sets: sets}
	if err := m.e.putSets.commit.Put(ctx, q); err != nil {
		return false, nil, interpretError(ctx, err)
	}
	return q.put.Created, q.out, nil
}

// flush applies a batch of PutSets in one write transaction. A PutSet with
// a Set refused (its condition not met) is rolled back to a savepoint taken
// before it and fails alone; one without conditions cannot be refused and
// takes none. Any other error fails the batch, which then changes nothing.
func (ps *putSets) flush(ctx context.Context, batch []*groupcommit.Request[*putSetReq]) error {
	b, rs := &ps.e.blobs, &ps.e.refs
	st, err := prepared(ctx, &b.put, &b.putPin, &rs.live, &rs.nextVer, &rs.upsert)
	if err != nil {
		return interpretError(ctx, err)
	}
	return ps.e.writeTx(ctx, func(tx *sql.Tx) error {
		s := putSetStmts{put: tx.StmtContext(ctx, st[0]), pin: tx.StmtContext(ctx, st[1]),
			live: tx.StmtContext(ctx, st[2]), nextVer: tx.StmtContext(ctx, st[3]), upsert: tx.StmtContext(ctx, st[4])}
		for _, r := range batch {
			r.Err, r.Item.put.Created, r.Item.out = nil, false, nil
			savepoint := conditional(r.Item.sets)
			if savepoint {
				if _, err := tx.ExecContext(ctx, "SAVEPOINT putset"); err != nil {
					return err
				}
			}
			refused, err := putSetOne(ctx, s, r.Item)
			if err != nil {
				return err
			}
			if !savepoint {
				if refused != nil {
					return refused // cannot happen; fail the batch rather than keep half of it
				}
				continue
			}
			if refused != nil {
				r.Err, r.Item.put.Created, r.Item.out = refused, false, nil
				if _, err := tx.ExecContext(ctx, "ROLLBACK TO putset"); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, "RELEASE putset"); err != nil {
				return err
			}
		}
		return nil
	})
}

// conditional is whether some Set of sets has a condition, the one way a
// PutSet is refused.
func conditional(sets []ref.SetParams) bool {
	for _, p := range sets {
		if p.Cond != ref.Always {
			return true
		}
	}
	return false
}

// putSetStmts are a PutSet's statements in its write transaction.
type putSetStmts struct {
	put, pin, live, nextVer, upsert *sql.Stmt
}

// putSetOne applies one PutSet with a write transaction's statements:
// refused is why a Set may not write (the caller rolls the PutSet back),
// err a failed statement. Its Sets take their versions from the counter
// at once, in their order.
func putSetOne(ctx context.Context, s putSetStmts, q *putSetReq) (refused, err error) {
	if q.put.Created, err = putRow(ctx, s.put, s.pin, &q.put); err != nil {
		return nil, err
	}
	type checked struct {
		now     time.Time
		wasLive bool
	}
	c := make([]checked, len(q.sets))
	for i, p := range q.sets {
		now := clock.OrNow(p.Now)
		var live sql.NullInt64
		switch err := s.live.QueryRowContext(ctx, p.Name, now.UnixMicro()).Scan(&live); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return nil, err
		}
		if refused := condRefused(p, live); refused != nil {
			return &ref.RefusedError{Name: p.Name, Err: refused}, nil
		}
		c[i] = checked{now, live.Valid}
	}
	var last int64
	if err := s.nextVer.QueryRowContext(ctx, len(q.sets)).Scan(&last); err != nil {
		return nil, err
	}
	q.out = make([]ref.Ref, len(q.sets))
	first := last - int64(len(q.sets)) + 1
	for i, p := range q.sets {
		if q.out[i], err = upsertRef(ctx, s.upsert, p, c[i].now, first+int64(i), c[i].wasLive); err != nil {
			return nil, err
		}
	}
	return nil, nil
}
