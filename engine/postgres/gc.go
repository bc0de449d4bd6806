package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/steaderr"
)

// The garbage-collection statements (docs/decisions/0006-0010). An
// arbitration is three steps in one short transaction: lock the blob row,
// then read (and lock) its pins in a new statement (its snapshot sees a
// pin committed while the lock was awaited), then, in yet another
// statement, every source, then delete the blob with its expired pins: a
// one-statement DELETE … WHERE NOT EXISTS (pins) keeps the statement's old
// snapshot and was seen deleting a blob whose pin had just committed.
const (
	sqlLockBlob           = `SELECT size FROM {schema}.blobs WHERE key = $1 FOR UPDATE`
	sqlLockBlobSkipLocked = `SELECT size FROM {schema}.blobs WHERE key = $1 FOR UPDATE SKIP LOCKED`
	sqlBlobExists         = `SELECT EXISTS (SELECT 1 FROM {schema}.blobs WHERE key = $1)`
	// sqlPinned locks every pin of the key, then judges them: a renewal
	// in flight (which judged the pin live before it expired) is waited
	// for and its new expiry read; one arriving later waits for this
	// transaction, which deletes the pins with the blob, and finds none.
	// The judgement stays above the lock (an aggregate): a filter pushed
	// into the locking scan would judge the old row version and skip it
	// unlocked.
	sqlPinned = `SELECT coalesce(bool_or(p.expiry > coalesce($2::timestamptz, now())), false)
FROM (SELECT expiry FROM {schema}.pins WHERE key = $1 FOR UPDATE) p`
	sqlReferenced = `SELECT EXISTS (SELECT 1 FROM {schema}.gc_references($1))`
	sqlDeleteBlob = `WITH w AS (DELETE FROM {schema}.gc_window WHERE key = $1),
p AS (DELETE FROM {schema}.pins WHERE key = $1)
DELETE FROM {schema}.blobs WHERE key = $1`

	// sqlArbitrateNaive is the known-unsafe one-statement arbitration, for
	// tests that prove the torture test sees the race: its pin check keeps
	// the statement's snapshot, so a pin committed after the statement
	// began is not seen. The test widens that window with a pause of $3
	// seconds inside the statement.
	sqlArbitrateNaive = `WITH pause AS (SELECT pg_sleep($3::float8))
DELETE FROM {schema}.blobs b WHERE key = $1
AND EXISTS (SELECT FROM pause)
AND NOT EXISTS (SELECT 1 FROM {schema}.pins p WHERE p.key = b.key AND p.expiry > coalesce($2::timestamptz, now()))
AND NOT EXISTS (SELECT 1 FROM {schema}.gc_references($1))
RETURNING size`

	// sqlReapPins skips pins a put or renewal holds, so a reap never
	// waits on (or deadlocks with) a writer; they are reaped next time.
	sqlReapPins = `DELETE FROM {schema}.pins WHERE ctid IN (
	SELECT ctid FROM {schema}.pins WHERE expiry <= coalesce($1::timestamptz, now()) FOR UPDATE SKIP LOCKED)`
	sqlCountExpiredPins = `SELECT count(*) FROM {schema}.pins WHERE expiry <= coalesce($1::timestamptz, now())`

	sqlStage = `INSERT INTO {schema}.gc_window AS w (key, visible_after) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET visible_after = excluded.visible_after
WHERE w.visible_after IS DISTINCT FROM excluded.visible_after`
	sqlStageUnreferenced = `SELECT {schema}.gc_stage(coalesce($1::timestamptz, now()), $2 * interval '1 microsecond', $3)`

	// sqlTake removes and returns the overdue candidates in one statement;
	// SKIP LOCKED hands a row to one concurrent taker only.
	sqlTake = `DELETE FROM {schema}.gc_window WHERE key IN (
	SELECT key FROM {schema}.gc_window WHERE visible_after <= coalesce($1::timestamptz, now())
	ORDER BY key LIMIT CASE WHEN $2 > 0 THEN $2 END FOR UPDATE SKIP LOCKED)
RETURNING key`
	sqlPeekOverdue = `SELECT key FROM {schema}.gc_window WHERE visible_after <= coalesce($1::timestamptz, now())
ORDER BY key LIMIT CASE WHEN $2 > 0 THEN $2 END`

	sqlSweepTryLock = `SELECT pg_try_advisory_lock($1)`
	sqlSweepUnlock  = `SELECT pg_advisory_unlock($1)`
	// The lease row, behind PgBouncer: taken when free or expired. Its
	// holder is unique per sweep, so a second sweep of one process is
	// refused too.
	sqlSweepLeaseAcquire = `INSERT INTO {schema}.gc_lease AS l (name, holder, expiry)
VALUES ('sweep', $1, now() + $2 * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expiry = excluded.expiry
WHERE l.expiry <= now()
RETURNING holder`
	// sqlSweepLeaseRenew, in each arbitration's transaction, confirms the
	// row still names this sweep and extends it; its row lock keeps any
	// other sweeper from taking the row before the arbitration commits.
	sqlSweepLeaseRenew = `UPDATE {schema}.gc_lease SET expiry = now() + $2 * interval '1 microsecond'
WHERE name = 'sweep' AND holder = $1 AND expiry > now()`
	sqlSweepLeaseRelease = `DELETE FROM {schema}.gc_lease WHERE name = 'sweep' AND holder = $1`

	// sqlSourceCheck reads zero rows of the source and reports its
	// column's type: it fails when the table or column does not exist.
	sqlSourceCheck = `SELECT c.relkind::text, format_type(a.atttypid, a.atttypmod)
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND a.attname = $3 AND a.attnum > 0 AND NOT a.attisdropped`
	sqlSourceRegister   = `INSERT INTO {schema}.gc_sources (schema_name, table_name, column_name) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`
	sqlSourceUnregister = `DELETE FROM {schema}.gc_sources WHERE schema_name = $1 AND table_name = $2 AND column_name = $3`
	sqlSources          = `SELECT schema_name, table_name, column_name FROM {schema}.gc_sources ORDER BY 1, 2, 3`

	sqlExplainBlob    = `SELECT size FROM {schema}.blobs WHERE key = $1`
	sqlExplainPins    = `SELECT owner, expiry FROM {schema}.pins WHERE key = $1 ORDER BY owner`
	sqlExplainSources = `SELECT s FROM {schema}.gc_references($1) AS s`
	sqlExplainWindow  = `SELECT visible_after FROM {schema}.gc_window WHERE key = $1`
	sqlExplainNow     = `SELECT coalesce($1::timestamptz, now())`
	sqlListPins       = `SELECT key, owner, expiry FROM {schema}.pins ORDER BY key, owner`
	sqlListWindow     = `SELECT key, visible_after FROM {schema}.gc_window ORDER BY key`
)

// sweepLeaseTTL is how long a lease row lasts without renewal, behind
// PgBouncer; every arbitration of the sweep renews it, and one that finds
// it lapsed or taken fails with ErrLost.
const sweepLeaseTTL = 10 * time.Minute

type gcMech struct {
	e   *Engine
	sql struct {
		lockBlob, lockBlobSkip, blobExists, pinned, referenced, deleteBlob, arbitrateNaive string
		reap, countExpired, stage, stageUnref, take, peek                                  string
		leaseAcquire, leaseRenew, leaseRelease                                             string
		sourceRegister, sourceUnregister, sources                                          string
		explainBlob, explainPins, explainSources, explainWindow, explainNow                string
		listPins, listWindow                                                               string
	}
	// naiveArbitration, when set (tests only), selects sqlArbitrateNaive
	// with a pause of that many nanoseconds.
	naiveArbitration atomic.Pointer[time.Duration]
	// beforeDelete, when set (tests only), runs between an arbitration's
	// checks and its delete (before the naive arbitration's statement), so
	// a test can race a put of the key against the delete.
	beforeDelete atomic.Pointer[func(blob.Key)]
	pgBouncer    bool
}

func (g *gcMech) init(e *Engine, pgBouncer bool) {
	g.e, g.pgBouncer = e, pgBouncer
	s := &g.sql
	s.lockBlob, s.lockBlobSkip = e.render(sqlLockBlob), e.render(sqlLockBlobSkipLocked)
	s.blobExists, s.pinned, s.referenced = e.render(sqlBlobExists), e.render(sqlPinned), e.render(sqlReferenced)
	s.deleteBlob, s.arbitrateNaive = e.render(sqlDeleteBlob), e.render(sqlArbitrateNaive)
	s.reap, s.countExpired = e.render(sqlReapPins), e.render(sqlCountExpiredPins)
	s.stage, s.stageUnref = e.render(sqlStage), e.render(sqlStageUnreferenced)
	s.take, s.peek = e.render(sqlTake), e.render(sqlPeekOverdue)
	s.leaseAcquire, s.leaseRenew, s.leaseRelease = e.render(sqlSweepLeaseAcquire), e.render(sqlSweepLeaseRenew), e.render(sqlSweepLeaseRelease)
	s.sourceRegister, s.sourceUnregister, s.sources = e.render(sqlSourceRegister), e.render(sqlSourceUnregister), e.render(sqlSources)
	s.explainBlob, s.explainPins, s.explainSources = e.render(sqlExplainBlob), e.render(sqlExplainPins), e.render(sqlExplainSources)
	s.explainWindow, s.explainNow = e.render(sqlExplainWindow), e.render(sqlExplainNow)
	s.listPins, s.listWindow = e.render(sqlListPins), e.render(sqlListWindow)
}

// Delete implements blob.Engine: an arbitration that waits for the row.
func (b *blobs) Delete(ctx context.Context, p blob.DeleteParams) error {
	v, err := b.e.gc.arbitrate(ctx, p.Key, p.Now, nil, false, false)
	if err != nil {
		return err
	}
	return v.Err()
}

func (g *gcMech) Arbitrate(ctx context.Context, p gc.ArbitrateParams) (gc.Verdict, error) {
	return g.arbitrate(ctx, p.Key, p.Now, p.Lease, true, p.DryRun)
}

// arbitrate runs one arbitration of key; skipLocked makes a row a put
// holds Busy instead of waited for. Under a session lease it runs on the
// lease's own connection, so a lease whose session ended deletes nothing.
func (g *gcMech) arbitrate(ctx context.Context, key blob.Key, now time.Time, lease gc.Lease, skipLocked, dry bool) (gc.Verdict, error) {
	var v gc.Verdict
	k := key.String()
	var db beginner = g.e.pool
	session, _ := lease.(*sessionLease)
	if session != nil {
		db = session.conn
	}
	row, _ := lease.(*rowLease)
	err := retryTransient(ctx, func() error {
		return g.e.inTxOn(ctx, db, func(tx pgx.Tx) error {
			v = gc.Verdict{}
			if row != nil {
				tag, err := tx.Exec(ctx, g.sql.leaseRenew, row.holder, sweepLeaseTTL.Microseconds())
				if err != nil {
					return err
				}
				if tag.RowsAffected() == 0 {
					return fmt.Errorf("%w: sweep lease row lapsed or taken by another sweeper", steaderr.ErrLost)
				}
			}
			if pause := g.naiveArbitration.Load(); pause != nil && !dry {
				if hook := g.beforeDelete.Load(); hook != nil {
					(*hook)(key)
				}
				err := tx.QueryRow(ctx, g.sql.arbitrateNaive, k, nowArg(now), pause.Seconds()).Scan(&v.Size)
				if errors.Is(err, pgx.ErrNoRows) {
					v.Outcome = gc.Protected
					return nil
				}
				v.Outcome = gc.Deleted
				return err
			}
			lock := g.sql.lockBlob
			if skipLocked {
				lock = g.sql.lockBlobSkip
			}
			err := tx.QueryRow(ctx, lock, k).Scan(&v.Size)
			if errors.Is(err, pgx.ErrNoRows) {
				v.Outcome = gc.Absent
				if skipLocked {
					// Skipped, or absent: tell them apart without waiting.
					var exists bool
					if err := tx.QueryRow(ctx, g.sql.blobExists, k).Scan(&exists); err != nil {
						return err
					}
					if exists {
						v.Outcome = gc.Busy
					}
				}
				return nil
			} else if err != nil {
				return err
			}
			// Pins first, then sources, each in a statement of its own: an
			// application references a key before it releases its pin, so
			// a reference committed before the pin's release is visible to
			// the later statement.
			var protected bool
			if err := tx.QueryRow(ctx, g.sql.pinned, k, nowArg(now)).Scan(&protected); err != nil {
				return err
			}
			if !protected {
				if err := tx.QueryRow(ctx, g.sql.referenced, k).Scan(&protected); err != nil {
					return fmt.Errorf("reading liveness sources: %w", sourceError(err))
				}
			}
			if protected {
				v.Outcome = gc.Protected
				return nil
			}
			v.Outcome = gc.Deleted
			if dry {
				return nil
			}
			if hook := g.beforeDelete.Load(); hook != nil {
				(*hook)(key)
			}
			_, err = tx.Exec(ctx, g.sql.deleteBlob, k)
			return err
		})
	})
	if err != nil && session != nil && session.conn.IsClosed() {
		err = fmt.Errorf("%w: sweep lease: its session ended: %w", steaderr.ErrLost, err)
	}
	return v, err
}

func (g *gcMech) ReapPins(ctx context.Context, p gc.NowParams) (int64, error) {
	if err := g.e.check(ctx); err != nil {
		return 0, err
	}
	if p.DryRun {
		var n int64
		err := g.e.pool.QueryRow(ctx, g.sql.countExpired, nowArg(p.Now)).Scan(&n)
		return n, interpretError(err)
	}
	tag, err := g.e.pool.Exec(ctx, g.sql.reap, nowArg(p.Now))
	return tag.RowsAffected(), interpretError(err)
}

func (g *gcMech) Stage(ctx context.Context, key blob.Key, visibleAfter time.Time) error {
	if err := g.e.check(ctx); err != nil {
		return err
	}
	_, err := g.e.pool.Exec(ctx, g.sql.stage, key.String(), visibleAfter)
	return interpretError(err)
}

func (g *gcMech) StageUnreferenced(ctx context.Context, p gc.StageParams) (int64, error) {
	if err := g.e.check(ctx); err != nil {
		return 0, err
	}
	var n int64
	err := retryTransient(ctx, func() error {
		return sourceError(g.e.pool.QueryRow(ctx, g.sql.stageUnref, nowArg(p.Now), p.Grace.Microseconds(), p.DryRun).Scan(&n))
	})
	return n, err
}

func (g *gcMech) Take(ctx context.Context, p gc.TakeParams) ([]blob.Key, error) {
	if err := g.e.check(ctx); err != nil {
		return nil, err
	}
	stmt := g.sql.take
	if p.DryRun {
		stmt = g.sql.peek
	}
	rows, err := g.e.pool.Query(ctx, stmt, nowArg(p.Now), int64(p.Limit))
	if err != nil {
		return nil, interpretError(err)
	}
	texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, interpretError(err)
	}
	keys := make([]blob.Key, len(texts))
	for i, t := range texts {
		if keys[i], err = blob.ParseKey(t); err != nil {
			return nil, fmt.Errorf("stored window key: %w", err)
		}
	}
	return keys, nil
}

// AcquireSweep takes the sweep lease: a session advisory lock on a
// connection of its own, opened from the pool's configuration but outside
// the pool (so a pool of one connection still serves the sweep's
// statements, and the pool never recycles the lock's session under it),
// held until Release, which unlocks on that same connection and closes it.
// Behind PgBouncer, where session locks are unsafe, a lease row instead.
func (g *gcMech) AcquireSweep(ctx context.Context, holder string) (gc.Lease, bool, error) {
	if err := g.e.check(ctx); err != nil {
		return nil, false, err
	}
	if g.pgBouncer {
		var token [8]byte
		if _, err := rand.Read(token[:]); err != nil {
			return nil, false, err
		}
		holder = holder + "/" + hex.EncodeToString(token[:])
		var got string
		err := g.e.pool.QueryRow(ctx, g.sql.leaseAcquire, holder, sweepLeaseTTL.Microseconds()).Scan(&got)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, interpretError(err)
		}
		return &rowLease{g: g, holder: holder}, true, nil
	}
	conn, err := pgx.ConnectConfig(ctx, g.e.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, false, interpretError(err)
	}
	key := g.e.lockKey("sweep")
	var ok bool
	if err := conn.QueryRow(ctx, sqlSweepTryLock, key).Scan(&ok); err != nil || !ok {
		return nil, false, errors.Join(interpretError(err), conn.Close(context.WithoutCancel(ctx)))
	}
	return &sessionLease{conn: conn, key: key}, true, nil
}

type sessionLease struct {
	conn *pgx.Conn
	key  int64
}

// Release unlocks on the lease's own connection, then closes it (which
// would release the lock too).
func (l *sessionLease) Release(ctx context.Context) error {
	var ok bool
	err := l.conn.QueryRow(ctx, sqlSweepUnlock, l.key).Scan(&ok)
	if err == nil && !ok {
		err = fmt.Errorf("postgres: sweep lease was not held at release")
	}
	err = interpretError(err)
	if err != nil && l.conn.IsClosed() {
		err = fmt.Errorf("%w: sweep lease: its session ended: %w", steaderr.ErrLost, err)
	}
	return errors.Join(err, l.conn.Close(context.WithoutCancel(ctx)))
}

type rowLease struct {
	g      *gcMech
	holder string
}

func (l *rowLease) Release(ctx context.Context) error {
	_, err := l.g.e.pool.Exec(ctx, l.g.sql.leaseRelease, l.holder)
	return interpretError(err)
}

// RegisterSource records a SQL source after checking that its table and
// column exist and hold text; PostgreSQL refuses a Go-function source,
// which a sweep in another process could not consult.
func (g *gcMech) RegisterSource(ctx context.Context, src gc.Source) error {
	if err := g.e.check(ctx); err != nil {
		return err
	}
	if !src.IsSQL() {
		return fmt.Errorf("%w: postgres: Go-function liveness source %q refused: a sweep in another process could not consult it; register a SQL source (schema.table(column)) holding the keys you reference, or pin them", steaderr.ErrInvalidArgument, src.Name)
	}
	var kind, typ string
	err := g.e.pool.QueryRow(ctx, sqlSourceCheck, src.Schema, src.Table, src.Column).Scan(&kind, &typ)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: liveness source %s: no such table or column", steaderr.ErrInvalidArgument, src)
	} else if err != nil {
		return interpretError(err)
	}
	// A sweep selects from the source: only relations that can be read
	// (tables, partitioned tables, views, materialized views, foreign
	// tables), not an index, a composite type or a sequence.
	switch kind {
	case "r", "p", "v", "m", "f":
	default:
		return fmt.Errorf("%w: liveness source %s: %s.%s is not a table or view (pg_class.relkind %q)", steaderr.ErrInvalidArgument, src, src.Schema, src.Table, kind)
	}
	if typ != "text" && typ != "character varying" && !isVarchar(typ) {
		return fmt.Errorf("%w: liveness source %s: column type is %s, want text", steaderr.ErrInvalidArgument, src, typ)
	}
	_, err = g.e.pool.Exec(ctx, g.sql.sourceRegister, src.Schema, src.Table, src.Column)
	return interpretError(err)
}

// sourceError interprets the error of a statement reading the registered
// sources: a missing table or column there is a source dropped or altered
// after registration, not a database never migrated.
func sourceError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == sqlstateUndefinedTable || pgErr.Code == sqlstateUndefinedColumn) {
		return fmt.Errorf("%w: a registered liveness source no longer exists (%s): restore it, or unregister it (gc.Collector.UnregisterSource); nothing is deleted meanwhile: %w", steaderr.ErrSchema, pgErr.Message, err)
	}
	return err
}

func isVarchar(typ string) bool {
	var n int
	_, err := fmt.Sscanf(typ, "character varying(%d)", &n)
	return err == nil
}

func (g *gcMech) UnregisterSource(ctx context.Context, src gc.Source) error {
	if err := g.e.check(ctx); err != nil {
		return err
	}
	if !src.IsSQL() {
		return nil
	}
	_, err := g.e.pool.Exec(ctx, g.sql.sourceUnregister, src.Schema, src.Table, src.Column)
	return interpretError(err)
}

func (g *gcMech) Sources(ctx context.Context) ([]gc.Source, error) {
	if err := g.e.check(ctx); err != nil {
		return nil, err
	}
	rows, err := g.e.pool.Query(ctx, g.sql.sources)
	if err != nil {
		return nil, listError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (gc.Source, error) {
		var s gc.Source
		return s, r.Scan(&s.Schema, &s.Table, &s.Column)
	})
	return out, listError(err)
}

// Explain reads in one repeatable-read, read-only transaction: one
// snapshot for the whole answer.
func (g *gcMech) Explain(ctx context.Context, key blob.Key, now time.Time) (gc.Explanation, error) {
	x := gc.Explanation{Key: key}
	k := key.String()
	err := g.e.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlExplainTx); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, g.sql.explainNow, nowArg(now)).Scan(&x.Now); err != nil {
			return err
		}
		switch err := tx.QueryRow(ctx, g.sql.explainBlob, k).Scan(&x.Size); {
		case err == nil:
			x.Stored = true
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		rows, err := tx.Query(ctx, g.sql.explainPins, k)
		if err != nil {
			return err
		}
		if x.Pins, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (gc.PinInfo, error) {
			p := gc.PinInfo{Key: key}
			return p, r.Scan(&p.Owner, &p.Expiry)
		}); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, g.sql.explainSources, k)
		if err != nil {
			return sourceError(err)
		}
		if x.Sources, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return sourceError(err)
		}
		var after pgtype.Timestamptz
		switch err := tx.QueryRow(ctx, g.sql.explainWindow, k).Scan(&after); {
		case err == nil:
			x.Staged, x.VisibleAfter = true, after.Time
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		return nil
	})
	return x, err
}

const sqlExplainTx = `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY`

func (g *gcMech) Pins(ctx context.Context, yield func(gc.PinInfo) bool) error {
	return g.scan(ctx, g.sql.listPins, func(r pgx.Rows) (bool, error) {
		var p gc.PinInfo
		var k string
		if err := r.Scan(&k, &p.Owner, &p.Expiry); err != nil {
			return false, err
		}
		var err error
		if p.Key, err = blob.ParseKey(k); err != nil {
			return false, fmt.Errorf("stored pin key: %w", err)
		}
		return yield(p), nil
	})
}

func (g *gcMech) Window(ctx context.Context, yield func(gc.Candidate) bool) error {
	return g.scan(ctx, g.sql.listWindow, func(r pgx.Rows) (bool, error) {
		var c gc.Candidate
		var k string
		if err := r.Scan(&k, &c.VisibleAfter); err != nil {
			return false, err
		}
		var err error
		if c.Key, err = blob.ParseKey(k); err != nil {
			return false, fmt.Errorf("stored window key: %w", err)
		}
		return yield(c), nil
	})
}

// scan runs query and hands each row to row until it reports false.
func (g *gcMech) scan(ctx context.Context, query string, row func(pgx.Rows) (bool, error)) error {
	if err := g.e.check(ctx); err != nil {
		return err
	}
	rows, err := g.e.pool.Query(ctx, query)
	if err != nil {
		return listError(err)
	}
	defer rows.Close()
	for rows.Next() {
		more, err := row(rows)
		if err != nil || !more {
			return err
		}
	}
	return listError(rows.Err())
}
