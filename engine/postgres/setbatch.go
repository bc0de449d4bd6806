package postgres

import (
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/ref"
)

// Sets without a version condition share group commits
// (docs/decisions/0055-put-with-refs.md): a batch is one pipeline with one
// Sync, so one round trip and one implicit transaction. It first locks
// every blob row its Sets name, FOR KEY SHARE in key order
// (sqlRefLockKeys), then runs each Set's own sqlRefSet, all the batch's in
// name order, not refusing: a Set whose blob is not stored, or whose name
// is live for an IfAbsent, answers so and writes nothing, failing neither
// the transaction nor the batch's other Sets; the batch's last statement
// records the store's declaration (sqlDeclareRefs). Blob rows before any
// ref row, then refs by name, then gc_declared's, as PutSets take them: a
// batch holds no ref row while it waits for an arbitration's blob lock,
// and batches never wait on each other in a circle. A batch of one is the
// lone statement in autocommit. Unconditional Sets share a committer whose
// batches a caller's cancellation may cancel and run again (the rerun may
// find the cancelled commit won: its Set then writes again, not told
// Created); IfAbsent ones share one that never runs a batch twice, since a
// second run would find the first's ref and answer a conflict: an IfAbsent
// whose batch started runs to its end though its caller's context ends.
var (
	// sqlRefLockKeys locks the blob rows of a batch of Sets' keys, FOR KEY
	// SHARE as a Set does, in key order (as an arbitration locks them).
	sqlRefLockKeys = declare("sqlRefLockKeys", `SELECT key FROM {schema}.blobs WHERE key = ANY ($1::text[]) ORDER BY key FOR KEY SHARE`)
)

// setItem is one Set waiting for a group commit, and the row its statement
// answered.
type setItem struct {
	p   ref.SetParams
	row setRow
}

// Size implements groupcommit.Item: the name and the annotation.
func (s *setItem) Size() int { return len(s.p.Name) + len(s.p.Annotation) }

// BatchKey implements groupcommit.Item: Sets of one name may share a
// batch, applied in batch order.
func (s *setItem) BatchKey() string { return "" }

// runSets commits items in one transaction, or none of them, filling each
// one's row; one item is its lone statement.
func (r *refs) runSets(ctx context.Context, items []*setItem) error {
	if len(items) == 1 {
		stmt, args := r.setStatement(items[0].p, false, true)
		return r.e.retryTransient(ctx, func() error {
			return r.e.pool.QueryRow(ctx, stmt, args...).Scan(items[0].row.dest()...)
		})
	}
	sets := make([]txSet, len(items))
	keys := make([]string, len(items))
	for i, it := range items {
		sets[i] = txSet{&it.p, &it.row}
		keys[i] = it.p.Key.String()
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	_, err := r.sendSets(ctx, r.e.sql(sqlRefLockKeys), []any{keys}, func(br pgx.BatchResults) error {
		_, err := br.Exec()
		return err
	}, sets, false)
	return err
}

// set runs the Set p and answers its statement's row: a compare-and-swap
// alone, others through their group commit (IfAbsent ones through the
// committer that never runs a batch twice).
func (r *refs) set(ctx context.Context, p ref.SetParams) (setRow, error) {
	it := &setItem{p: p}
	err := errAlone
	switch p.Cond {
	case ref.Always:
		err = r.sets.Put(ctx, it)
	case ref.IfAbsent:
		err = r.createSets.Put(ctx, it)
	}
	if errors.Is(err, errAlone) {
		err = r.runSets(ctx, []*setItem{it})
	}
	return it.row, err
}
