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
	"github.com/steadkit/stead/engine/internal/groupcommit"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// PutSets are sent as one pipeline, one round trip: the put statement for
// their blobs (sqlPutOne for one), then a Set's statement per ref, all the
// batch's in name order, and a single Sync, so that the server
// runs them in one implicit transaction, which an error in any statement
// rolls back whole (docs/decisions/0055-put-with-refs.md). The put locks
// the blob rows as puts do and holds the locks to the commit, so a ref's
// statement finds its blob stored and no arbitration interleaves; blob
// rows are locked in key order, then refs in name order, then, last,
// gc_declared's row while the store has not declared (sqlDeclareRefs), so
// concurrent batches never deadlock each other. A Set whose condition fails must
// fail the transaction: its statement is sent refusing (setStatement), so
// that it fails with invalid_text_representation carrying refusedMark. A
// PutSet with a conditional Set runs alone, so its refusal rolls back no
// other; unconditional ones share a group commit, since nothing refuses
// them: the blob is stored by the same transaction. Nothing in it keeps
// session state: it runs through PgBouncer in transaction mode as any
// statement does.

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

// errAlone tells a PutSet its shared batch failed: it is run again alone,
// so that what failed the batch fails only its own PutSet.
var errAlone = errors.New("postgres: put with refs: run alone")

// putSet is one PutSet: its put, its Sets, and the rows their statements
// answered.
type putSet struct {
	put  groupcommit.Put
	sets []ref.SetParams
	rows []setRow
}

// Size implements groupcommit.Item: the value, the refs' names and
// annotations.
func (ps *putSet) Size() int {
	n := len(ps.put.Value)
	for _, s := range ps.sets {
		n += len(s.Name) + len(s.Annotation)
	}
	return n
}

// BatchKey implements groupcommit.Item: unconditional PutSets of one key
// or ref may share a batch, applied in batch order.
func (ps *putSet) BatchKey() string { return "" }

// PutSet joins a group commit of PutSets when no Set has a condition;
// else, and for a PutSet whose batch failed, it runs alone.
func (r *refs) PutSet(ctx context.Context, p blob.PutParams, sets []ref.SetParams) (bool, []ref.Ref, error) {
	if p.Chunks != 0 || len(p.Children) > 0 {
		return false, nil, fmt.Errorf("%w: a put with refs stores an inline value without children", steaderr.ErrInvalidArgument)
	}
	if err := r.e.check(ctx); err != nil {
		return false, nil, err
	}
	value := p.Value
	if value == nil {
		value = []byte{} // nil binds as NULL
	}
	ps := &putSet{
		put:  groupcommit.Put{Key: p.Key.String(), Value: value, Pin: groupcommit.Pin{Owner: p.Owner, TTL: p.TTL, Now: p.Now}},
		sets: sets,
		rows: make([]setRow, len(sets)),
	}
	err := errAlone
	if r.batchAll.Load() || !slices.ContainsFunc(sets, func(s ref.SetParams) bool { return s.Cond != ref.Always }) {
		err = r.commit.Put(ctx, ps)
	}
	if errors.Is(err, errAlone) {
		err = r.runPutSets(ctx, []*putSet{ps})
	}
	if err != nil {
		return false, nil, err
	}
	out := make([]ref.Ref, len(sets))
	for i, s := range sets {
		if out[i], err = r.setResult(s, &ps.rows[i]); err != nil {
			return false, nil, err
		}
	}
	return ps.put.Created, out, nil
}

// flushAlone returns the flush of a group commit that commits a batch
// with run: a batch of one fails with its own error; a larger one that
// fails (short of its context ending) hands each item errAlone. With
// once, only a batch the server failed, so rolled back, is handed
// errAlone; one whose outcome is unknown (the connection failed) fails
// each item with its error, since a rerun could find the batch's own
// writes and answer them as another's (an IfAbsent's conflict).
func flushAlone[T groupcommit.Item](run func(context.Context, []T) error, once bool) func(context.Context, []*groupcommit.Request[T]) error {
	return func(ctx context.Context, batch []*groupcommit.Request[T]) error {
		items := make([]T, len(batch))
		for i, req := range batch {
			items[i] = req.Item
		}
		err := run(ctx, items)
		var pgErr *pgconn.PgError
		if err == nil || len(batch) == 1 || ctx.Err() != nil || once && !errors.As(err, &pgErr) {
			return err
		}
		for _, req := range batch {
			req.Err = errAlone
		}
		return nil
	}
}

// runPutSets commits items in one pipeline and one transaction, or none
// of them, filling each one's rows and Created. A refused Set fails it
// with the Set's conflict.
func (r *refs) runPutSets(ctx context.Context, items []*putSet) error {
	var sets []txSet
	puts := make([]*groupcommit.Request[*groupcommit.Put], len(items))
	for i, ps := range items {
		puts[i] = &groupcommit.Request[*groupcommit.Put]{Item: &ps.put}
		for j := range ps.sets {
			sets = append(sets, txSet{&ps.sets[j], &ps.rows[j]})
		}
	}
	stmt, args, _ := r.e.blobs.putStatement(puts)
	created := map[string]bool{}
	failed, err := r.sendSets(ctx, stmt, args, func(br pgx.BatchResults) error {
		clear(created)
		res, err := br.Query()
		if err != nil {
			return err
		}
		return readCreated(res, created)
	}, sets, true)
	switch {
	case err != nil && failed != nil && isRefused(err):
		return &ref.RefusedError{Name: failed.Name, Err: refConflict(*failed)}
	case err != nil:
		return err
	}
	tellCreated(puts, created)
	return nil
}

// txSet is one Set of a transaction of several, and the row its
// statement answers.
type txSet struct {
	p   *ref.SetParams
	row *setRow
}

// sendSets commits, in one pipeline and one implicit transaction, first
// (the statement that locks the Sets' blob rows: a batch's put, or
// sqlRefLockKeys), whose results readFirst reads, then sets' statements
// in name order (one name Set twice in sets' order), then, while the
// store has not declared liveness, its declaration: blob rows, ref rows by
// name, gc_declared's row, the one order every transaction takes them in,
// so that none waits on another in a circle. With refuse a Set that
// writes no ref fails the transaction; failed is then that Set.
func (r *refs) sendSets(ctx context.Context, first string, firstArgs []any, readFirst func(pgx.BatchResults) error, sets []txSet, refuse bool) (failed *ref.SetParams, err error) {
	slices.SortStableFunc(sets, func(x, y txSet) int { return strings.Compare(x.p.Name, y.p.Name) })
	names := make([]string, len(sets))
	for i, s := range sets {
		names[i] = s.p.Name
	}
	declare, declareArgs := r.declareStatement(names)
	err = r.e.retryTransient(ctx, func() error {
		failed = nil
		b := &pgx.Batch{}
		b.Queue(first, firstArgs...)
		for _, s := range sets {
			stmt, args := r.setStatement(*s.p, refuse, false)
			b.Queue(stmt, args...)
		}
		if declare != "" {
			b.Queue(declare, declareArgs...)
		}
		br := r.e.pool.SendBatch(ctx, b)
		err := func() error {
			if err := readFirst(br); err != nil {
				return err
			}
			for _, s := range sets {
				if err := br.QueryRow().Scan(s.row.dest()...); err != nil {
					failed = s.p
					return err
				}
			}
			if declare != "" {
				_, err := br.Exec()
				return err
			}
			return nil
		}()
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return err
	})
	return failed, err
}
