package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/steaderr"
)

// The garbage-collection statements. Times are Unix microseconds. Every
// write runs on the single writer connection, so an arbitration (one write
// transaction: read the blobs, their pins, refs and edges, and the
// sources, then delete) never interleaves with a put or a pin. A batch of
// keys is bound as one JSON array, read with json_each.
const (
	// sqlArbRead reads, for each stored one of the keys ?1, its index in
	// the array, its rowid, size and object (or NULL), whether its value
	// is a chunk set, its pins' latest expiry (NULL: none), its refs'
	// greatest liveness at ?2 (NULL: none; 0: expired or weak only; 1: a
	// live strong ref), whether a parent references it, whether it
	// references a child and whether it is in the window: one probe of
	// each index per key answers both what keeps the key and whether a
	// delete must visit that table.
	sqlArbRead = `SELECT j.key, b.rowid, b.size, b.object, b.chunks IS NOT NULL,
	(SELECT max(expiry) FROM pins WHERE key = b.key),
	(SELECT max(NOT weak AND (expiry IS NULL OR expiry > ?2)) FROM refs WHERE key = b.key),
	EXISTS (SELECT 1 FROM blob_edges WHERE child = b.key),
	EXISTS (SELECT 1 FROM blob_edges WHERE parent = b.key),
	EXISTS (SELECT 1 FROM gc_window WHERE key = b.key)
FROM json_each(?1) AS j CROSS JOIN blobs AS b ON b.key = j.value`
	// sqlArbDeleteBlobs deletes the blobs of the rowids ?1: a rowid names
	// the row without a probe of the key index.
	sqlArbDeleteBlobs   = `DELETE FROM blobs WHERE rowid IN (SELECT value FROM json_each(?1))`
	sqlArbDeleteStage   = `DELETE FROM gc_window WHERE key IN (SELECT value FROM json_each(?1))`
	sqlArbDeletePins    = `DELETE FROM pins WHERE key IN (SELECT value FROM json_each(?1))`
	sqlArbDeleteRefs    = `DELETE FROM refs WHERE key IN (SELECT value FROM json_each(?1))` // expired or weak
	sqlArbDeleteEdges   = `DELETE FROM blob_edges WHERE parent IN (SELECT value FROM json_each(?1))`
	sqlReapPins         = `DELETE FROM pins WHERE expiry <= ?1`
	sqlCountExpired     = `SELECT count(*) FROM pins WHERE expiry <= ?1`
	sqlReapRefs         = `DELETE FROM refs WHERE expiry <= ?1`
	sqlCountExpiredRefs = `SELECT count(*) FROM refs WHERE expiry <= ?1`
	sqlDeclared         = `SELECT EXISTS (SELECT 1 FROM gc_declared)`
	sqlStage            = `INSERT INTO gc_window (key, visible_after) SELECT j.value, ?2 FROM json_each(?1) AS j
WHERE EXISTS (SELECT 1 FROM blobs b WHERE b.key = j.value)
ON CONFLICT (key) DO UPDATE SET visible_after = excluded.visible_after`
	// sqlStageRange reads the range of keys after ?1, each with whether it
	// is a candidate: no live pin at ?2 and not staged yet.
	sqlStageRange = `SELECT b.key,
	NOT EXISTS (SELECT 1 FROM pins p WHERE p.key = b.key AND p.expiry > ?2)
	AND NOT EXISTS (SELECT 1 FROM refs f WHERE f.key = b.key AND NOT f.weak AND (f.expiry IS NULL OR f.expiry > ?2))
	AND NOT EXISTS (SELECT 1 FROM blob_edges e WHERE e.child = b.key)
	AND NOT EXISTS (SELECT 1 FROM gc_window w WHERE w.key = b.key)
FROM blobs b WHERE b.key > ?1 ORDER BY b.key LIMIT ?3`
	sqlStageNew = `INSERT INTO gc_window (key, visible_after) SELECT value, ?2 FROM json_each(?1) WHERE true
ON CONFLICT (key) DO NOTHING`
	sqlPassRead  = `SELECT after, started FROM gc_pass WHERE id = 1`
	sqlPassWrite = `UPDATE gc_pass SET after = ?1, started = coalesce(?2, started) WHERE id = 1`
	// sqlTake takes the longest overdue first (the visible_after index);
	// the caller sorts them by key.
	sqlTake = `DELETE FROM gc_window WHERE key IN (
	SELECT key FROM gc_window WHERE visible_after <= ?1 ORDER BY visible_after LIMIT ?2)
RETURNING key`
	sqlPeek           = `SELECT key FROM gc_window WHERE visible_after <= ?1 ORDER BY visible_after LIMIT ?2`
	sqlExplainBlob    = `SELECT size, coalesce(object, '') FROM blobs WHERE key = ?1`
	sqlExplainPins    = `SELECT owner, expiry FROM pins WHERE key = ?1 ORDER BY owner`
	sqlExplainWindow  = `SELECT visible_after FROM gc_window WHERE key = ?1`
	sqlExplainRefs    = `SELECT name, expiry, weak FROM refs WHERE key = ?1 ORDER BY name`
	sqlExplainParents = `SELECT parent FROM blob_edges WHERE child = ?1 ORDER BY parent`
	sqlListPins       = `SELECT key, owner, expiry FROM pins ORDER BY key, owner`
	sqlListWindow     = `SELECT key, visible_after FROM gc_window ORDER BY key`
	// sqlStored reads the blobs' count and bytes and the window's, one
	// statement so one snapshot: one scan of the blobs, one probe a
	// window row.
	sqlStored = `SELECT a.n, a.bytes, w.n, w.bytes
FROM (SELECT count(*) AS n, coalesce(sum(size), 0) AS bytes FROM blobs) AS a,
(SELECT count(*) AS n, coalesce(sum(b.size), 0) AS bytes FROM gc_window w JOIN blobs b ON b.key = w.key) AS w`

	sqlFuncSourceMark   = `INSERT INTO gc_func_sources (name) VALUES (?1) ON CONFLICT (name) DO NOTHING`
	sqlFuncSourceUnmark = `DELETE FROM gc_func_sources WHERE name = ?1`
	sqlFuncSourceMarks  = `SELECT name FROM gc_func_sources ORDER BY name`
)

// gcMech is the engine's gc.Backend.
type gcMech struct{ b *blobs }

var _ gc.Backend = gcMech{}

// keyArray is keys as the JSON array the statements read with json_each.
func keyArray(keys []blob.Key) string {
	texts := make([]string, len(keys))
	for i, k := range keys {
		texts[i] = k.String()
	}
	b, _ := json.Marshal(texts) // strings always marshal
	return string(b)
}

// rowidArray is rowids as the JSON array sqlArbDeleteBlobs reads.
func rowidArray(ids []int64) string {
	b := make([]byte, 0, 2+len(ids)*8)
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, ']'))
}

// arbitrate decides keys in one write transaction: one statement reads
// what it needs of the keys (sqlArbRead), then one deletes the doomed
// blobs and one each deletes their rows in the window, the pins, the refs
// and the edges, skipped when none of the doomed keys has a row there.
func (b *blobs) arbitrate(ctx context.Context, keys []blob.Key, now time.Time, dry bool) ([]blob.Verdict, error) {
	if err := b.e.check(ctx); err != nil {
		return nil, err
	}
	at := clock.OrNow(now).UnixMicro()
	var verdicts []blob.Verdict
	var objects []string
	err := b.e.writeTx(ctx, func(tx *sql.Tx) error {
		objects = nil
		if err := b.checkFuncSources(ctx, tx); err != nil {
			return err
		}
		stored, err := arbRows(ctx, tx, keys, at)
		if err != nil {
			return err
		}
		var ask []blob.Key
		for i, k := range keys {
			if row := &stored[i]; row.stored && !row.kept {
				ask = append(ask, k)
			}
		}
		refs, err := b.sources.Referenced(ctx, ask)
		if err != nil {
			return err
		}
		verdicts = make([]blob.Verdict, len(keys))
		var gone []blob.Key
		var rowids []int64
		var chunked, staged, pinned, named, parent bool
		for i, k := range keys {
			row := &stored[i]
			switch {
			case !row.stored:
				verdicts[i] = blob.Verdict{Key: k, Outcome: blob.Absent}
			case row.kept || refs[k]:
				verdicts[i] = blob.Verdict{Key: k, Outcome: blob.Protected}
			default:
				verdicts[i] = blob.Verdict{Key: k, Outcome: blob.Deleted, Size: row.size}
				gone = append(gone, k)
				rowids = append(rowids, row.rowid)
				if row.object != "" {
					objects = append(objects, row.object)
				}
				chunked = chunked || row.chunked
				staged = staged || row.staged
				pinned = pinned || row.pins
				named = named || row.refs
				parent = parent || row.parent
			}
		}
		if dry || len(gone) == 0 {
			objects = nil
			return nil
		}
		var doomed string
		if chunked || staged || pinned || named || parent {
			doomed = keyArray(gone)
		}
		if chunked {
			chunkObjects, err := queryNames(ctx, tx, sqlDoomedChunkObjects, doomed)
			if err != nil {
				return err
			}
			objects = append(objects, chunkObjects...)
		}
		if _, err := tx.ExecContext(ctx, sqlArbDeleteBlobs, rowidArray(rowids)); err != nil {
			return err
		}
		for _, step := range []struct {
			q    string
			rows bool
		}{{sqlArbDeleteStage, staged}, {sqlArbDeletePins, pinned}, {sqlArbDeleteRefs, named}, {sqlArbDeleteEdges, parent}} {
			if !step.rows {
				continue
			}
			if _, err := tx.ExecContext(ctx, step.q, doomed); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		b.e.dropObjects(ctx, objects)
	}
	return verdicts, err
}

// arbRow is what an arbitration reads of one of its keys (sqlArbRead).
type arbRow struct {
	stored  bool
	rowid   int64
	size    int64
	object  string // "" when the value is not one object
	chunked bool   // the value is a chunk set
	kept    bool   // a live pin, a live strong ref or a parent keeps it
	pins    bool   // it has pins, live or not
	refs    bool   // refs name it, live or not, strong or weak
	parent  bool   // it references children
	staged  bool   // it is in the window
}

// arbRows reads keys' rows at now (Unix microseconds), one per key in
// keys' order: stored false for a key not stored.
func arbRows(ctx context.Context, q queryer, keys []blob.Key, now int64) ([]arbRow, error) {
	rows, err := q.QueryContext(ctx, sqlArbRead, keyArray(keys), now)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]arbRow, len(keys))
	for rows.Next() {
		var i int64
		var row arbRow
		var object sql.NullString
		var pin, ref sql.NullInt64
		var child bool
		if err := rows.Scan(&i, &row.rowid, &row.size, &object, &row.chunked, &pin, &ref, &child, &row.parent, &row.staged); err != nil {
			return nil, err
		}
		if i < 0 || i >= int64(len(out)) {
			return nil, fmt.Errorf("sqlite: arbitration read key index %d of %d keys", i, len(keys))
		}
		row.stored = true
		row.object = object.String
		row.pins, row.refs = pin.Valid, ref.Valid
		row.kept = (pin.Valid && pin.Int64 > now) || ref.Int64 == 1 || child
		out[i] = row
	}
	return out, rows.Err()
}

// queryKeys runs a query whose one column is a stored key.
func queryKeys(ctx context.Context, q queryer, query string, args ...any) ([]blob.Key, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []blob.Key
	for rows.Next() {
		var text string
		if err := rows.Scan(&text); err != nil {
			return nil, err
		}
		key, err := blob.ParseKey(text)
		if err != nil {
			return nil, fmt.Errorf("sqlite: stored key: %w", err)
		}
		keys = append(keys, key)
	}
	return keys, rows.Err()
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

func (g gcMech) Arbitrate(ctx context.Context, p gc.ArbitrateParams) ([]blob.Verdict, error) {
	return g.b.arbitrate(ctx, p.Keys, p.Now, p.DryRun)
}

func (g gcMech) Reap(ctx context.Context, p gc.NowParams) (gc.Reaped, error) {
	e := g.b.e
	var r gc.Reaped
	if err := e.check(ctx); err != nil {
		return r, err
	}
	now := clock.OrNow(p.Now).UnixMicro()
	for _, step := range []struct {
		reap, count string
		n           *int64
	}{{sqlReapPins, sqlCountExpired, &r.Pins}, {sqlReapRefs, sqlCountExpiredRefs, &r.Refs}} {
		if p.DryRun {
			if err := listError(ctx, e.reader.QueryRowContext(ctx, step.count, now).Scan(step.n)); err != nil {
				return r, err
			}
			continue
		}
		// On a database never migrated there is nothing to reap: 0, as a
		// read.
		res, err := e.writer.ExecContext(ctx, step.reap, now)
		if err != nil {
			return r, listError(ctx, err)
		}
		if *step.n, err = res.RowsAffected(); err != nil {
			return r, interpretError(ctx, err)
		}
	}
	return r, nil
}

func (g gcMech) Declared(ctx context.Context) (bool, error) {
	e := g.b.e
	if err := e.check(ctx); err != nil {
		return false, err
	}
	var declared bool
	err := e.reader.QueryRowContext(ctx, sqlDeclared).Scan(&declared)
	return declared, listError(ctx, err)
}

// Stored scans the blobs table once and probes it per window row
// (sqlStored).
func (g gcMech) Stored(ctx context.Context) (gc.Stored, error) {
	e := g.b.e
	if err := e.check(ctx); err != nil {
		return gc.Stored{}, err
	}
	var st gc.Stored
	err := e.reader.QueryRowContext(ctx, sqlStored).Scan(&st.Blobs, &st.Bytes, &st.PendingBlobs, &st.PendingBytes)
	return st, listError(ctx, err)
}

func (g gcMech) Stage(ctx context.Context, p gc.StageParams) error {
	e := g.b.e
	if err := e.check(ctx); err != nil {
		return err
	}
	// A process lease released is lost: its Renew says so, without I/O.
	if p.Lease != nil {
		if err := p.Lease.Renew(ctx); err != nil {
			return err
		}
	}
	_, err := e.writer.ExecContext(ctx, sqlStage, keyArray(p.Keys), clock.OrNow(p.VisibleAfter).UnixMicro())
	return interpretError(ctx, err)
}

func (g gcMech) StagePass(ctx context.Context) (gc.Pass, error) {
	e := g.b.e
	if err := e.check(ctx); err != nil {
		return gc.Pass{}, err
	}
	var after string
	var started sql.NullInt64
	err := e.reader.QueryRowContext(ctx, sqlPassRead).Scan(&after, &started)
	if err != nil {
		if err = readError(ctx, err); errors.Is(err, steaderr.ErrNotFound) {
			return gc.Pass{}, nil // never migrated: no pass yet
		}
		return gc.Pass{}, err
	}
	var pass gc.Pass
	if started.Valid {
		pass.Started = time.UnixMicro(started.Int64).UTC()
	}
	if after != "" {
		if pass.After, err = blob.ParseKey(after); err != nil {
			return gc.Pass{}, fmt.Errorf("sqlite: stored staging cursor: %w", err)
		}
	}
	return pass, nil
}

// StageRange reads the range and its candidates (keys not pinned and not
// staged) on a reader, asks the Go-function sources about the candidates
// in process, and stages the rest and records the cursor in one write
// transaction.
func (g gcMech) StageRange(ctx context.Context, p gc.StageRangeParams) (gc.StagedRange, error) {
	b := g.b
	if err := b.e.check(ctx); err != nil {
		return gc.StagedRange{}, err
	}
	now := clock.OrNow(p.Now)
	var r gc.StagedRange
	var cands []blob.Key
	rows, err := b.e.reader.QueryContext(ctx, sqlStageRange, cursorText(p.After), now.UnixMicro(), p.Limit)
	if err != nil {
		return r, listError(ctx, err)
	}
	for rows.Next() {
		var text string
		var cand bool
		if err := rows.Scan(&text, &cand); err != nil {
			rows.Close()
			return r, interpretError(ctx, err)
		}
		key, err := blob.ParseKey(text)
		if err != nil {
			rows.Close()
			return r, fmt.Errorf("sqlite: stored key: %w", err)
		}
		r.Covered++
		r.Last = key
		if cand {
			cands = append(cands, key)
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return r, listError(ctx, err)
	}
	if r.Covered < int64(p.Limit) {
		r.Last = blob.Key{} // the last stored key: the pass is complete
	}
	refs, err := b.sources.Referenced(ctx, cands)
	if err != nil {
		return r, err
	}
	stage := slices.DeleteFunc(cands, func(k blob.Key) bool { return refs[k] })
	if p.DryRun {
		r.Staged = int64(len(stage))
		return r, nil
	}
	var started any
	if p.After.IsZero() {
		started = now.UnixMicro()
	}
	err = b.e.writeTx(ctx, func(tx *sql.Tx) error {
		if len(stage) > 0 {
			res, err := tx.ExecContext(ctx, sqlStageNew, keyArray(stage), now.Add(p.Grace).UnixMicro())
			if err != nil {
				return err
			}
			if r.Staged, err = res.RowsAffected(); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, sqlPassWrite, cursorText(r.Last), started)
		return err
	})
	return r, err
}

// cursorText is a staging cursor as stored: ” for the zero Key, which
// every key sorts after.
func cursorText(k blob.Key) string {
	if k.IsZero() {
		return ""
	}
	return k.String()
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
	keys, err := queryKeys(ctx, db, query, clock.OrNow(p.Now).UnixMicro(), p.Limit)
	if err != nil {
		return nil, listError(ctx, err)
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
		return listError(ctx, err) // never migrated: no marks
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
func (g gcMech) Explain(ctx context.Context, p gc.ExplainParams) (gc.Explanation, error) {
	key, now := p.Key, p.Now
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
	switch err := tx.QueryRowContext(ctx, sqlExplainBlob, k).Scan(&x.Size, &x.Object); {
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
	rows, err = tx.QueryContext(ctx, sqlExplainRefs, k)
	if err != nil {
		return x, listError(ctx, err)
	}
	for rows.Next() {
		var r gc.RefInfo
		var expiry sql.NullInt64
		if err := rows.Scan(&r.Name, &expiry, &r.Weak); err != nil {
			rows.Close()
			return x, interpretError(ctx, err)
		}
		if expiry.Valid {
			r.Expiry = time.UnixMicro(expiry.Int64).UTC()
		}
		x.Refs = append(x.Refs, r)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return x, interpretError(ctx, err)
	}
	if x.Parents, err = queryKeys(ctx, tx, sqlExplainParents, k); err != nil {
		return x, listError(ctx, err)
	}
	if x.Sources, err = b.sources.References(ctx, key, false); err != nil {
		return x, err
	}
	return x, nil
}

func (g gcMech) Pins(ctx context.Context, _ gc.PinsParams, yield func(gc.PinInfo) bool) error {
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
