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
	"github.com/steadkit/stead/engine/internal/sqlengine"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/steaderr"
)

// The bytes tier (docs/decisions/0027-bytes-tier.md): values over the
// inline limit written to one bucket object each, named by their upload
// before a byte is written and by their blob row once published. Objects
// are deleted only after the deletion of the row naming them committed.
const (
	sqlTierRead    = `SELECT store_id, bucket, claimed FROM bytes_tier WHERE id = 1`
	sqlTierAnyBlob = `SELECT EXISTS (SELECT 1 FROM blobs)`
	sqlTierInsert  = `INSERT INTO bytes_tier (id, store_id, bucket) VALUES (1, ?1, ?2) ON CONFLICT (id) DO NOTHING`
	sqlTierClaimed = `UPDATE bytes_tier SET claimed = 1 WHERE id = 1`
	// sqlUploadNameObject names the upload's object, unless the upload has
	// a chunk or an object already.
	sqlUploadNameObject = `UPDATE blob_uploads SET object = ?1 WHERE id = ?2 AND object IS NULL
AND NOT EXISTS (SELECT 1 FROM blob_chunks WHERE chunks = ?2)`
	sqlUploadRenewObject = `UPDATE blob_uploads SET expires_at = max(expires_at, ?1) WHERE id = ?2 AND object = ?3`
	sqlUploadObjectSize  = `UPDATE blob_uploads SET object_size = ?1 WHERE id = ?2 AND object = ?3`
	sqlUploadObject      = `SELECT object, object_size FROM blob_uploads WHERE id = ?`
	sqlPublishObject     = `INSERT INTO blobs (key, size, value, object) VALUES (?, ?, x'', ?) ON CONFLICT (key) DO NOTHING`
	sqlReapObjects       = `SELECT object FROM blob_uploads WHERE expires_at <= ? AND object IS NOT NULL`
	sqlDoomedObjects     = `SELECT object FROM blobs WHERE key IN (SELECT value FROM json_each(?1)) AND object IS NOT NULL`
	sqlOrphanCursor      = `SELECT token FROM gc_orphans WHERE id = 1`
	sqlOrphanCursorSet   = `UPDATE gc_orphans SET token = ?1 WHERE id = 1`
	// sqlOrphanNames answers those of the names in the JSON array ?1 that
	// no blob row and no upload names.
	sqlOrphanNames = `SELECT j.value FROM json_each(?1) AS j
WHERE NOT EXISTS (SELECT 1 FROM blobs b WHERE b.object = j.value)
AND NOT EXISTS (SELECT 1 FROM blob_uploads u WHERE u.object = j.value)`
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
// the upload's row before the write begins, so a crash mid-write leaves an
// object an upload names (reaped with it) or an orphan, never a blob row
// without its object.
func (b *blobs) WriteValue(ctx context.Context, p blob.WriteValueParams) (int64, error) {
	if err := b.tierCheck(ctx); err != nil {
		return 0, err
	}
	name := bytestier.NewName()
	err := b.writeTx(ctx, func(tx *sql.Tx) error {
		named, err := changed(ctx, tx, sqlUploadNameObject, name, int64(p.Set))
		if err != nil || named {
			return err
		}
		var live bool
		if err := tx.QueryRowContext(ctx, sqlUploadLive, int64(p.Set)).Scan(&live); err != nil {
			return err
		}
		if !live {
			return errUploadLost
		}
		return fmt.Errorf("%w: upload %d has chunks or an object already", steaderr.ErrConflict, p.Set)
	})
	if err != nil {
		return 0, err
	}
	renew := func(ctx context.Context) error {
		n, err := b.e.execWrite(ctx, sqlUploadRenewObject, time.Now().Add(p.Lease).UnixNano(), int64(p.Set), name)
		if err == nil && n == 0 {
			err = errUploadLost
		}
		return err
	}
	size, err := b.e.tier.Write(ctx, name, p.Value, p.Lease/3, renew)
	if err != nil {
		var src *bytestier.ErrSource
		if errors.As(err, &src) {
			return 0, src.Err
		}
		return 0, err
	}
	n, err := b.e.execWrite(ctx, sqlUploadObjectSize, size, int64(p.Set), name)
	if err == nil && n == 0 {
		// Reaped while it was written: the upload no longer names the
		// object, which is deleted here (or, failing that, swept).
		b.e.dropObjects(ctx, []string{name})
		err = errUploadLost
	}
	return size, err
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

// uploadObject reads the object an upload names, in tx: "" for none, and
// its size once it was written whole (-1 before).
func uploadObject(ctx context.Context, tx *sql.Tx, set blob.ChunkSet) (string, int64, error) {
	var name sql.NullString
	var size sql.NullInt64
	err := tx.QueryRowContext(ctx, sqlUploadObject, int64(set)).Scan(&name, &size)
	if errors.Is(err, sql.ErrNoRows) {
		return "", -1, nil
	}
	if !size.Valid {
		size.Int64 = -1
	}
	return name.String, size.Int64, err
}

// publishObject publishes the upload's object as p.Key's value in tx (the
// upload already ended in it). It reports the object to delete once tx
// commits: the upload's, when the key was stored already.
func publishObject(ctx context.Context, tx *sql.Tx, p blob.PutParams, object string, size int64) (redundant string, err error) {
	if size != p.Size {
		if size < 0 {
			return "", fmt.Errorf("%w: the object of upload %d is not written whole yet", steaderr.ErrInvalidArgument, p.Chunks)
		}
		return "", fmt.Errorf("%w: the object of upload %d holds %d bytes, not %d", steaderr.ErrInvalidArgument, p.Chunks, size, p.Size)
	}
	inserted, err := changed(ctx, tx, sqlPublishObject, p.Key.String(), p.Size, object)
	if err != nil || inserted {
		return "", err
	}
	return object, nil
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
