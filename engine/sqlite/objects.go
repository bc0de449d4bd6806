package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/internal/bytestier"
	"github.com/steadkit/stead/engine/internal/chunkid"
	"github.com/steadkit/stead/engine/internal/sqlengine"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/steaderr"
)

// The bytes tier (docs/decisions/0027-bytes-tier.md): values over the
// inline limit written to bucket objects, each the one chunk of an append
// (docs/decisions/0045-durable-uploads.md), named by its chunk row before a
// byte is written and, for a value of one object, by its blob row once
// published. Objects are deleted only after the deletion of the row naming
// them committed.
const (
	sqlTierRead    = `SELECT store_id, bucket, claimed FROM bytes_tier WHERE id = 1`
	sqlTierAnyBlob = `SELECT EXISTS (SELECT 1 FROM blobs)`
	sqlTierInsert  = `INSERT INTO bytes_tier (id, store_id, bucket) VALUES (1, ?1, ?2) ON CONFLICT (id) DO NOTHING`
	sqlTierClaimed = `UPDATE bytes_tier SET claimed = 1 WHERE id = 1`
	// sqlNameObject names the object of an unfinished chunk at (?1, ?2).
	sqlNameObject = `INSERT INTO blob_chunks (chunks, off, data, object) VALUES (?1, ?2, x'', ?3)`
	// sqlRenewObject extends the upload's lease while its chunk row at
	// (?2, ?3) still names the object ?4 being written.
	sqlRenewObject = `UPDATE blob_uploads SET expires_at = max(expires_at, ?1) WHERE id = ?2
AND EXISTS (SELECT 1 FROM blob_chunks WHERE chunks = ?2 AND off = ?3 AND object = ?4)`
	sqlObjectNamed = `SELECT EXISTS (SELECT 1 FROM blob_chunks WHERE chunks = ?1 AND off = ?2 AND object = ?3 AND len IS NULL)`
	sqlObjectLen   = `UPDATE blob_chunks SET len = ?1 WHERE chunks = ?2 AND off = ?3 AND object = ?4`
	sqlObjectDrop  = `DELETE FROM blob_chunks WHERE chunks = ?1 AND off = ?2 AND object = ?3`
	// sqlDoomedChunkObjects answers the objects of the chunks of the
	// blobs in the JSON array ?1 (a blob's own object is read with it).
	sqlDoomedChunkObjects = `SELECT c.object FROM blobs b JOIN blob_chunks c ON c.chunks = b.chunks
WHERE b.key IN (SELECT value FROM json_each(?1)) AND c.object IS NOT NULL`
	sqlOrphanCursor    = `SELECT token FROM gc_orphans WHERE id = 1`
	sqlOrphanCursorSet = `UPDATE gc_orphans SET token = ?1 WHERE id = 1`
	// sqlOrphanNames answers those of the names in the JSON array ?1 that
	// no blob row and no chunk row names.
	sqlOrphanNames = `SELECT j.value FROM json_each(?1) AS j
WHERE NOT EXISTS (SELECT 1 FROM blobs b WHERE b.object = j.value)
AND NOT EXISTS (SELECT 1 FROM blob_chunks c WHERE c.object = j.value)`
	// dropTimeout bounds the deletion of objects whose rows are gone,
	// which runs even when the caller's context has ended: an object left
	// is an orphan the sweep removes later.
	dropTimeout = 30 * time.Second
)

// errNoTier is the error of a bytes-tier call on an engine without one.
var errNoTier = fmt.Errorf("%w: sqlite: no bytes tier: open the store with bytes=<bucket URL>", errors.ErrUnsupported)

// Tiered implements blob.Streamer.
func (b *blobs) Tiered() bool { return b.e.tier != nil }

// attachTier checks, once, that the store and its bucket belong together
// (docs/decisions/0027-bytes-tier.md): a store that recorded a tier must
// be opened with one; a store given one records it (refused when it holds
// blobs already, unless adopted) and claims the bucket's marker, which
// must name this store. Migrate calls it; so does every tier operation.
func (e *Engine) attachTier(ctx context.Context) error {
	if e.tierReady.Load() {
		return nil
	}
	e.tierMu.Lock()
	defer e.tierMu.Unlock()
	if e.tierReady.Load() {
		return nil
	}
	var storeID, bucket string
	var claimed bool
	err := e.reader.QueryRowContext(ctx, sqlTierRead).Scan(&storeID, &bucket, &claimed)
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		if err = interpretError(ctx, err); errors.Is(err, sqlengine.ErrNoSchema) {
			return nil // not migrated yet: Migrate attaches
		}
		return err
	}
	if e.tier == nil {
		if found {
			return fmt.Errorf("%w: sqlite: this store keeps large blob values in the bucket %s: open it with bytes=<that bucket's URL>", steaderr.ErrInvalidArgument, bucket)
		}
		return nil
	}
	if !found {
		var fresh [16]byte
		_, _ = rand.Read(fresh[:]) // crypto/rand.Read never fails
		err := e.writeTx(ctx, func(tx *sql.Tx) error {
			var any bool
			if err := tx.QueryRowContext(ctx, sqlTierAnyBlob).Scan(&any); err != nil {
				return err
			}
			if any && !e.tierAdopt {
				return fmt.Errorf("%w: sqlite: the store holds blobs and records no bytes tier: giving it the bucket %s would keep new large values there and the old ones in the database; to do that, adopt it (bytes_adopt=1)", steaderr.ErrConflict, e.tier)
			}
			_, err := tx.ExecContext(ctx, sqlTierInsert, hex.EncodeToString(fresh[:]), e.tier.String())
			return err
		})
		if err != nil {
			return err
		}
		if err := e.reader.QueryRowContext(ctx, sqlTierRead).Scan(&storeID, &bucket, &claimed); err != nil {
			return interpretError(ctx, err)
		}
	}
	if err := e.tier.Claim(ctx, storeID, claimed); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	if !claimed {
		if _, err := e.writer.ExecContext(ctx, sqlTierClaimed); err != nil {
			return interpretError(ctx, err)
		}
	}
	e.tierReady.Store(true)
	return nil
}

// tierCheck returns the error a tier operation must fail with before it
// starts.
func (b *blobs) tierCheck(ctx context.Context) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	if b.e.tier == nil {
		return errNoTier
	}
	return b.e.attachTier(ctx)
}

// WriteValue implements blob.Streamer: the object's name is committed in
// an unfinished chunk row before the write begins, so a crash mid-write
// leaves an object a chunk row names (deleted with its upload, or when the
// next append at its offset replaces the row) or an orphan, never a
// committed chunk without its object. A value of no bytes appends nothing
// (its object is deleted) and commits the state and lease.
func (b *blobs) WriteValue(ctx context.Context, p blob.WriteValueParams) (int64, error) {
	if err := b.tierCheck(ctx); err != nil {
		return 0, err
	}
	if err := chunkid.CheckSpan(p.Off, 0); err != nil {
		return 0, err
	}
	name := bytestier.NewName()
	var replaced string
	err := b.writeTx(ctx, func(tx *sql.Tx) (err error) {
		if err := appendAt(ctx, tx, p.Set, p.Off); err != nil {
			return err
		}
		if replaced, err = dropUnfinished(ctx, tx, p.Set, p.Off); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlNameObject, int64(p.Set), p.Off, name); err != nil {
			return err
		}
		// The lease runs from the append's start, not from its upload's
		// last step: the first renewal is a third of it away.
		_, err = tx.ExecContext(ctx, sqlRenewObject, leaseEnd(p), int64(p.Set), p.Off, name)
		return err
	})
	if err != nil {
		return 0, err
	}
	if replaced != "" {
		b.e.dropObjects(ctx, []string{replaced})
	}
	renew := func(ctx context.Context) error {
		n, err := b.e.execWrite(ctx, sqlRenewObject, leaseEnd(p), int64(p.Set), p.Off, name)
		if err == nil && n == 0 {
			err = b.unnamedError(ctx, p)
		}
		return err
	}
	size, err := b.e.tier.Write(ctx, name, p.Value, p.Lease/3, renew)
	if err != nil {
		var src *bytestier.ErrSource
		if errors.As(err, &src) {
			return 0, src.Err
		}
		var named bool
		if nerr := b.e.reader.QueryRowContext(ctx, sqlObjectNamed, int64(p.Set), p.Off, name).Scan(&named); nerr == nil && !named {
			// Replaced while it was written: the writer that replaced it
			// deleted the object under it, which is why the write failed.
			b.e.dropObjects(ctx, []string{name})
			return 0, b.unnamedError(ctx, p)
		}
		return 0, err
	}
	var state []byte
	if p.State != nil {
		state = p.State()
	}
	unnamed := false
	err = b.writeTx(ctx, func(tx *sql.Tx) error {
		var named bool
		if err := tx.QueryRowContext(ctx, sqlObjectNamed, int64(p.Set), p.Off, name).Scan(&named); err != nil {
			return err
		}
		if !named {
			unnamed = true
			return nil
		}
		if err := appendAt(ctx, tx, p.Set, p.Off); err != nil {
			return err
		}
		query, args := sqlObjectLen, []any{size, int64(p.Set), p.Off, name}
		if size == 0 {
			// An append of nothing: the chunk goes, the state and lease
			// commit.
			query, args = sqlObjectDrop, args[1:]
		}
		if _, err := tx.ExecContext(ctx, query, args...); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, sqlUploadAppended, p.Off+size, state, leaseEnd(p), int64(p.Set))
		return err
	})
	if err == nil && (unnamed || size == 0) {
		// Replaced, or ended, while it was written, or empty: no row names
		// the object, which is deleted here (or, failing that, swept).
		b.e.dropObjects(ctx, []string{name})
		if unnamed {
			err = b.unnamedError(ctx, p)
		}
	}
	if err != nil {
		return 0, err
	}
	return size, nil
}

// leaseEnd is when the lease of an upload p appends to ends if renewed
// now, on p.Now's clock (nil: the engine's), in Unix nanoseconds.
func leaseEnd(p blob.WriteValueParams) int64 {
	var now time.Time
	if p.Now != nil {
		now = p.Now()
	}
	return clock.OrNow(now).Add(p.Lease).UnixNano()
}

// unnamedError is the error of a WriteValue whose chunk row no longer
// names its object: errUploadLost when the upload is gone, else an error
// wrapping steaderr.ErrConflict (another writer's append replaced it).
func (b *blobs) unnamedError(ctx context.Context, p blob.WriteValueParams) error {
	_, err := b.UploadStatus(ctx, p.Set)
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: the append at offset %d of upload %d was replaced by another writer's", steaderr.ErrConflict, p.Off, p.Set)
}

// execWrite runs one write statement on the writer and reports how many
// rows it changed.
func (e *Engine) execWrite(ctx context.Context, query string, args ...any) (int64, error) {
	if err := e.check(ctx); err != nil {
		return 0, err
	}
	res, err := e.writer.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, interpretError(ctx, err)
	}
	n, err := res.RowsAffected()
	return n, interpretError(ctx, err)
}

// ReadValue implements blob.Streamer.
func (b *blobs) ReadValue(ctx context.Context, p blob.ReadValueParams) (io.ReadCloser, error) {
	if err := b.tierCheck(ctx); err != nil {
		return nil, err
	}
	return b.e.tier.NewRangeReader(ctx, p.Object, p.Size, p.Off, p.N)
}

// dropObjects deletes objects whose rows are gone, after the deletion
// committed; one not deleted is an orphan the sweep's orphan step finds.
func (e *Engine) dropObjects(ctx context.Context, names []string) {
	if e.tier == nil || len(names) == 0 {
		return
	}
	if crash := e.dropCrash.Load(); crash != nil && *crash {
		return // a test's crash between the commit and the delete
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropTimeout)
	defer cancel()
	_ = e.tier.Delete(dctx, names) // an object left is an orphan: swept
}

// queryNames runs a query whose one column is an object name.
func queryNames(ctx context.Context, q queryer, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	return names, rows.Err()
}

// SweepOrphans implements gc.OrphanSweeper.
func (g gcMech) SweepOrphans(ctx context.Context, p gc.OrphanParams) (gc.Orphans, error) {
	b := g.b
	var out gc.Orphans
	if err := b.e.check(ctx); err != nil {
		return out, err
	}
	if b.e.tier == nil {
		return gc.Orphans{Wrapped: true}, nil
	}
	if err := b.e.attachTier(ctx); err != nil {
		return out, err
	}
	var token []byte
	if err := b.e.reader.QueryRowContext(ctx, sqlOrphanCursor).Scan(&token); err != nil {
		return out, interpretError(ctx, err)
	}
	var renew func(context.Context) error
	if p.Lease != nil {
		renew = p.Lease.Renew
	}
	listed, deleted, next, err := b.e.tier.SweepPage(ctx, token, p.Limit, p.Grace, p.DryRun, func(ctx context.Context, names []string) ([]string, error) {
		all, _ := json.Marshal(names) // strings always marshal
		orphan, err := queryNames(ctx, b.e.reader, sqlOrphanNames, string(all))
		return orphan, interpretError(ctx, err)
	}, renew)
	if err != nil {
		return gc.Orphans{}, err
	}
	out = gc.Orphans{Listed: listed, Deleted: deleted, Wrapped: next == nil}
	if p.DryRun {
		return out, nil
	}
	if _, err := b.e.execWrite(ctx, sqlOrphanCursorSet, next); err != nil {
		return out, err
	}
	return out, nil
}

var _ gc.OrphanSweeper = gcMech{}

// CheckBytesTier checks that the store and its bucket belong together (a
// store that recorded a tier must be opened with it, a bucket must carry
// this store's marker) and probes the bucket: it writes, reads back, lists
// and deletes a small object. bucket is "" when the store has no tier.
func (e *Engine) CheckBytesTier(ctx context.Context) (bucket string, err error) {
	if err := e.check(ctx); err != nil {
		return "", err
	}
	if err := e.attachTier(ctx); err != nil {
		return "", err
	}
	if e.tier == nil {
		return "", nil
	}
	if err := e.tier.Check(ctx); err != nil {
		return e.tier.String(), fmt.Errorf("bucket %s: %w", e.tier, err)
	}
	return e.tier.String(), nil
}
