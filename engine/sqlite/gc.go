package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/clock"
)

// The garbage-collection statements. Times are Unix microseconds. Every
// write runs on the single writer connection, so an arbitration (one write
// transaction: read the blob, its pins, the sources, then delete) never
// interleaves with a put or a pin.
const (
	sqlArbBlob        = `SELECT size FROM blobs WHERE key = ?1`
	sqlArbPinned      = `SELECT EXISTS (SELECT 1 FROM pins WHERE key = ?1 AND expiry > ?2)`
	sqlArbDeleteBlob  = `DELETE FROM blobs WHERE key = ?1`
	sqlArbDeleteStage = `DELETE FROM gc_window WHERE key = ?1`
	sqlArbDeletePins  = `DELETE FROM pins WHERE key = ?1`
	sqlReapPins       = `DELETE FROM pins WHERE expiry <= ?1`
	sqlCountExpired   = `SELECT count(*) FROM pins WHERE expiry <= ?1`
	sqlStage          = `INSERT INTO gc_window (key, visible_after) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET visible_after = excluded.visible_after`
	// sqlUnreferenced pages through the blobs no live pin holds and not
	// staged yet, for the Go-function sources to judge.
	sqlUnreferenced = `SELECT key FROM blobs b WHERE key > ?1
AND NOT EXISTS (SELECT 1 FROM pins p WHERE p.key = b.key AND p.expiry > ?2)
AND NOT EXISTS (SELECT 1 FROM gc_window w WHERE w.key = b.key)
ORDER BY key LIMIT ?3`
	sqlStageNew = `INSERT INTO gc_window (key, visible_after) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING`
	sqlTake     = `DELETE FROM gc_window WHERE key IN (
	SELECT key FROM gc_window WHERE visible_after <= ?1 ORDER BY key LIMIT ?2)
RETURNING key`
	sqlPeek          = `SELECT key FROM gc_window WHERE visible_after <= ?1 ORDER BY key LIMIT ?2`
	sqlExplainPins   = `SELECT owner, expiry FROM pins WHERE key = ?1 ORDER BY owner`
	sqlExplainWindow = `SELECT visible_after FROM gc_window WHERE key = ?1`
	sqlListPins      = `SELECT key, owner, expiry FROM pins ORDER BY key, owner`
	sqlListWindow    = `SELECT key, visible_after FROM gc_window ORDER BY key`

	sqlFuncSourceMark   = `INSERT INTO gc_func_sources (name) VALUES (?1) ON CONFLICT (name) DO NOTHING`
	sqlFuncSourceUnmark = `DELETE FROM gc_func_sources WHERE name = ?1`
	sqlFuncSourceMarks  = `SELECT name FROM gc_func_sources ORDER BY name`
)

// stagePage is how many candidates one page of StageUnreferenced reads.
const stagePage = 1000

// gcMech is the engine's gc.Engine.
type gcMech struct{ b *blobs }

var _ gc.Engine = gcMech{}

func (b *blobs) arbitrate(ctx context.Context, key blob.Key, now time.Time, dry bool) (gc.Verdict, error) {
	if err := b.e.check(ctx); err != nil {
		return gc.Verdict{}, err
	}
	var v gc.Verdict
	err := b.e.writeTx(ctx, func(tx *sql.Tx) error {
		if err := b.checkFuncSources(ctx, tx); err != nil {
			return err
		}
		k := key.String()
		err := tx.QueryRowContext(ctx, sqlArbBlob, k).Scan(&v.Size)
		if errors.Is(err, sql.ErrNoRows) {
			v.Outcome = gc.Absent
			return nil
		} else if err != nil {
			return err
		}
		var pinned bool
		if err := tx.QueryRowContext(ctx, sqlArbPinned, k, clock.OrNow(now).UnixMicro()).Scan(&pinned); err != nil {
			return err
		}
		if !pinned {
			refs, err := b.sources.References(ctx, key, true)
			if err != nil {
				return err
			}
			pinned = len(refs) > 0
		}
		if pinned {
			v.Outcome = gc.Protected
			return nil
		}
		v.Outcome = gc.Deleted
		if dry {
			return nil
		}
		if _, err := tx.ExecContext(ctx, sqlArbDeleteBlob, k); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlArbDeleteStage, k); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, sqlArbDeletePins, k)
		return err
	})
	return v, err
}

// writeTx runs fn in a write transaction on the writer connection.
func (e *Engine) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	tx, err := e.writer.BeginTx(ctx, nil)
	if err != nil {
		return interpretError(ctx, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(interpretError(ctx, err), ignoreDone(tx.Rollback()))
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

func (g gcMech) Arbitrate(ctx context.Context, p gc.ArbitrateParams) (gc.Verdict, error) {
	return g.b.arbitrate(ctx, p.Key, p.Now, p.DryRun)
}

func (g gcMech) ReapPins(ctx context.Context, p gc.NowParams) (int64, error) {
	e := g.b.e
	if err := e.check(ctx); err != nil {
		return 0, err
	}
	now := clock.OrNow(p.Now).UnixMicro()
	if p.DryRun {
		var n int64
		err := e.reader.QueryRowContext(ctx, sqlCountExpired, now).Scan(&n)
		return n, listError(ctx, err)
	}
	res, err := e.writer.ExecContext(ctx, sqlReapPins, now)
	if err != nil {
		return 0, interpretError(ctx, err)
	}
	n, err := res.RowsAffected()
	return n, interpretError(ctx, err)
}

func (g gcMech) Stage(ctx context.Context, key blob.Key, visibleAfter time.Time) error {
	e := g.b.e
	if err := e.check(ctx); err != nil {
		return err
	}
	_, err := e.writer.ExecContext(ctx, sqlStage, key.String(), visibleAfter.UnixMicro())
	return interpretError(ctx, err)
}

// StageUnreferenced reads candidates a page at a time (keys not pinned and
// not staged), asks the Go-function sources about each in process, and
// stages the rest, each page in one write transaction.
func (g gcMech) StageUnreferenced(ctx context.Context, p gc.StageParams) (int64, error) {
	b := g.b
	if err := b.e.check(ctx); err != nil {
		return 0, err
	}
	now := clock.OrNow(p.Now)
	after := now.Add(p.Grace).UnixMicro()
	var n int64
	cursor := ""
	for {
		rows, err := b.e.reader.QueryContext(ctx, sqlUnreferenced, cursor, now.UnixMicro(), stagePage)
		if err != nil {
			return n, listError(ctx, err)
		}
		var keys []string
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return n, interpretError(ctx, err)
			}
			keys = append(keys, k)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return n, interpretError(ctx, err)
		}
		if len(keys) == 0 {
			return n, nil
		}
		cursor = keys[len(keys)-1]
		var stage []string
		for _, k := range keys {
			key, err := blob.ParseKey(k)
			if err != nil {
				return n, fmt.Errorf("sqlite: stored key: %w", err)
			}
			refs, err := b.sources.References(ctx, key, true)
			if err != nil {
				return n, err
			}
			if len(refs) == 0 {
				stage = append(stage, k)
			}
		}
		if p.DryRun {
			n += int64(len(stage))
			continue
		}
		err = b.e.writeTx(ctx, func(tx *sql.Tx) error {
			for _, k := range stage {
				res, err := tx.ExecContext(ctx, sqlStageNew, k, after)
				if err != nil {
					return err
				}
				c, err := res.RowsAffected()
				if err != nil {
					return err
				}
				n += c
			}
			return nil
		})
		if err != nil {
			return n, err
		}
	}
}

func (g gcMech) Take(ctx context.Context, p gc.TakeParams) ([]blob.Key, error) {
	e := g.b.e
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	db, query := e.writer, sqlTake
	if p.DryRun {
		db, query = e.reader, sqlPeek
	}
	limit := p.Limit
	if limit <= 0 {
		limit = -1
	}
	rows, err := db.QueryContext(ctx, query, clock.OrNow(p.Now).UnixMicro(), limit)
	if err != nil {
		return nil, listError(ctx, err)
	}
	var keys []blob.Key
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return nil, interpretError(ctx, err)
		}
		key, err := blob.ParseKey(k)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: stored window key: %w", err)
		}
		keys = append(keys, key)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, interpretError(ctx, err)
	}
	slices.SortFunc(keys, blob.Key.Compare)
	return keys, nil
}

// AcquireSweep takes the in-process sweep lease: one process uses a
// database file.
func (g gcMech) AcquireSweep(ctx context.Context, holder string) (gc.Lease, bool, error) {
	if err := g.b.e.check(ctx); err != nil {
		return nil, false, err
	}
	if err := g.b.checkFuncSources(ctx, g.b.e.reader); err != nil {
		return nil, false, err
	}
	lease, ok := g.b.lease.TryAcquire()
	return lease, ok, nil
}

// queryer is a connection pool or a transaction.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// checkFuncSources refuses, with an error wrapping gc.ErrSourceMissing,
// when a Go-function source registered on the file (by any process) is
// not registered in this one: its references cannot be consulted here.
func (b *blobs) checkFuncSources(ctx context.Context, q queryer) error {
	rows, err := q.QueryContext(ctx, sqlFuncSourceMarks)
	if err != nil {
		return interpretError(ctx, err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return interpretError(ctx, err)
		}
		names = append(names, n)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return interpretError(ctx, err)
	}
	if missing := b.sources.Missing(names); len(missing) > 0 {
		return fmt.Errorf("%w: sqlite: Go-function liveness sources %q are registered on this database but not in this process, which cannot consult them: nothing is deleted; run the sweep in the application, or, if a source is stale, unregister it (gc.Collector.UnregisterSource with its name)", gc.ErrSourceMissing, missing)
	}
	return nil
}

// RegisterSource accepts Go-function sources, consulted in this process,
// and marks each in the file, so a process that has not registered it
// (the CLI, another service) refuses to delete.
func (g gcMech) RegisterSource(ctx context.Context, src gc.Source) error {
	if err := g.b.e.check(ctx); err != nil {
		return err
	}
	if err := g.b.sources.Register("sqlite", src); err != nil {
		return err
	}
	if _, err := g.b.e.writer.ExecContext(ctx, sqlFuncSourceMark, src.Name); err != nil {
		g.b.sources.Unregister(src)
		return interpretError(ctx, err)
	}
	return nil
}

// UnregisterSource removes the source here and its mark in the file; a
// process that never registered it may so clear a stale mark.
func (g gcMech) UnregisterSource(ctx context.Context, src gc.Source) error {
	if err := g.b.e.check(ctx); err != nil {
		return err
	}
	g.b.sources.Unregister(src)
	if src.IsSQL() {
		return nil
	}
	_, err := g.b.e.writer.ExecContext(ctx, sqlFuncSourceUnmark, src.Name)
	return interpretError(ctx, err)
}

func (g gcMech) Sources(ctx context.Context) ([]gc.Source, error) {
	if err := g.b.e.check(ctx); err != nil {
		return nil, err
	}
	return g.b.sources.List(), nil
}

// Explain reads in one read transaction: one snapshot.
func (g gcMech) Explain(ctx context.Context, key blob.Key, now time.Time) (gc.Explanation, error) {
	b := g.b
	if err := b.e.check(ctx); err != nil {
		return gc.Explanation{}, err
	}
	x := gc.Explanation{Key: key, Now: clock.OrNow(now)}
	k := key.String()
	tx, err := b.e.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return x, interpretError(ctx, err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	switch err := tx.QueryRowContext(ctx, sqlArbBlob, k).Scan(&x.Size); {
	case err == nil:
		x.Stored = true
	case !errors.Is(err, sql.ErrNoRows):
		return x, listError(ctx, err)
	}
	rows, err := tx.QueryContext(ctx, sqlExplainPins, k)
	if err != nil {
		return x, listError(ctx, err)
	}
	for rows.Next() {
		p := gc.PinInfo{Key: key}
		var expiry int64
		if err := rows.Scan(&p.Owner, &expiry); err != nil {
			rows.Close()
			return x, interpretError(ctx, err)
		}
		p.Expiry = time.UnixMicro(expiry).UTC()
		x.Pins = append(x.Pins, p)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return x, interpretError(ctx, err)
	}
	var after int64
	switch err := tx.QueryRowContext(ctx, sqlExplainWindow, k).Scan(&after); {
	case err == nil:
		x.Staged, x.VisibleAfter = true, time.UnixMicro(after).UTC()
	case !errors.Is(err, sql.ErrNoRows):
		return x, listError(ctx, err)
	}
	if x.Sources, err = b.sources.References(ctx, key, false); err != nil {
		return x, err
	}
	return x, nil
}

func (g gcMech) Pins(ctx context.Context, yield func(gc.PinInfo) bool) error {
	return g.scan(ctx, sqlListPins, func(r *sql.Rows) (bool, error) {
		var p gc.PinInfo
		var k string
		var expiry int64
		if err := r.Scan(&k, &p.Owner, &expiry); err != nil {
			return false, err
		}
		var err error
		if p.Key, err = blob.ParseKey(k); err != nil {
			return false, fmt.Errorf("sqlite: stored pin key: %w", err)
		}
		p.Expiry = time.UnixMicro(expiry).UTC()
		return yield(p), nil
	})
}

func (g gcMech) Window(ctx context.Context, yield func(gc.Candidate) bool) error {
	return g.scan(ctx, sqlListWindow, func(r *sql.Rows) (bool, error) {
		var c gc.Candidate
		var k string
		var after int64
		if err := r.Scan(&k, &after); err != nil {
			return false, err
		}
		var err error
		if c.Key, err = blob.ParseKey(k); err != nil {
			return false, fmt.Errorf("sqlite: stored window key: %w", err)
		}
		c.VisibleAfter = time.UnixMicro(after).UTC()
		return yield(c), nil
	})
}

func (g gcMech) scan(ctx context.Context, query string, row func(*sql.Rows) (bool, error)) (err error) {
	e := g.b.e
	if err := e.check(ctx); err != nil {
		return err
	}
	rows, err := e.reader.QueryContext(ctx, query)
	if err != nil {
		return listError(ctx, err)
	}
	defer func() { err = errors.Join(err, interpretError(ctx, rows.Close())) }()
	for rows.Next() {
		more, err := row(rows)
		if err != nil || !more {
			return interpretError(ctx, err)
		}
	}
	return listError(ctx, rows.Err())
}
