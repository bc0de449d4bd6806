package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/internal/groupcommit"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// putSets group-commits PutSets: concurrent ones share a write
// transaction, each applied in turn under a savepoint, which a refused
// Set rolls back alone. They do not join the puts' group commit, whose
// batches have no savepoints, nor the Sets', whose requests carry no
// value: the writer runs one transaction at a time whichever commits it.
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

// flush applies a batch of PutSets in one write transaction, each under a
// savepoint: a PutSet with a Set refused (its condition not met) is rolled
// back to it and fails alone; any other error fails the batch, which then
// changes nothing.
func (ps *putSets) flush(ctx context.Context, batch []*groupcommit.Request[*putSetReq]) error {
	b, rs := &ps.e.blobs, &ps.e.refs
	st, err := prepared(ctx, &b.put, &b.putPin, &rs.setCheck, &rs.nextVer, &rs.upsert)
	if err != nil {
		return interpretError(ctx, err)
	}
	return ps.e.writeTx(ctx, func(tx *sql.Tx) error {
		tput, tpin := tx.StmtContext(ctx, st[0]), tx.StmtContext(ctx, st[1])
		check, nextVer, upsert := tx.StmtContext(ctx, st[2]), tx.StmtContext(ctx, st[3]), tx.StmtContext(ctx, st[4])
		for _, r := range batch {
			r.Err, r.Item.put.Created, r.Item.out = nil, false, nil
			if _, err := tx.ExecContext(ctx, "SAVEPOINT putset"); err != nil {
				return err
			}
			refused, err := putSetOne(ctx, tput, tpin, check, nextVer, upsert, r.Item)
			if err != nil {
				return err
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

// putSetOne applies one PutSet with a write transaction's statements:
// refused is why a Set may not write (the caller rolls the PutSet back),
// err a failed statement.
func putSetOne(ctx context.Context, tput, tpin, check, nextVer, upsert *sql.Stmt, q *putSetReq) (refused, err error) {
	if q.put.Created, err = putRow(ctx, tput, tpin, &q.put); err != nil {
		return nil, err
	}
	q.out = make([]ref.Ref, len(q.sets))
	for i, p := range q.sets {
		out, refused, err := setOne(ctx, check, nextVer, upsert, p)
		if err != nil {
			return nil, err
		}
		if refused != nil {
			return fmt.Errorf("ref %.80q: %w", p.Name, refused), nil
		}
		q.out[i] = out
	}
	return nil, nil
}
