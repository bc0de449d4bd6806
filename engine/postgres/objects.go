package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

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
var (
	sqlTierRead    = declare("sqlTierRead", `SELECT store_id, bucket, claimed FROM {schema}.bytes_tier WHERE id = 1`)
	sqlTierAnyBlob = declare("sqlTierAnyBlob", `SELECT EXISTS (SELECT FROM {schema}.blobs)`)
	// sqlTierInsert records the tier; the lock on the blobs table makes
	// the "store holds no blob" check hold until the commit.
	sqlTierLockBlobs = declare("sqlTierLockBlobs", `LOCK TABLE {schema}.blobs IN SHARE MODE`)
	sqlTierInsert    = declare("sqlTierInsert", `INSERT INTO {schema}.bytes_tier (id, store_id, bucket) VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING`)
	sqlTierClaimed   = declare("sqlTierClaimed", `UPDATE {schema}.bytes_tier SET claimed = true WHERE id = 1`)
	// sqlUploadNameObject names the upload's object, unless the upload has
	// a chunk or an object already; it answers whether the upload exists.
	sqlUploadNameObject = declare("sqlUploadNameObject", `WITH named AS (
    UPDATE {schema}.blob_uploads SET object = $1
    WHERE id = $2 AND object IS NULL AND NOT EXISTS (SELECT FROM {schema}.blob_chunks WHERE chunks = $2)
    RETURNING 1
)
SELECT EXISTS (SELECT FROM named), EXISTS (SELECT FROM {schema}.blob_uploads WHERE id = $2)`)
	sqlUploadRenewObject = declare("sqlUploadRenewObject", `UPDATE {schema}.blob_uploads SET expires_at = greatest(expires_at, now() + $1::bigint * interval '1 microsecond')
WHERE id = $2 AND object = $3`)
	sqlUploadObjectSize = declare("sqlUploadObjectSize", `UPDATE {schema}.blob_uploads SET object_size = $1 WHERE id = $2 AND object = $3`)
	// sqlPublishObject is sqlPublish for a value kept as an object: the
	// blob row names the object, or, when the key was stored already, the
	// pin goes to pins and the statement answers false: the caller deletes
	// the object after the commit.
	sqlPublishObject = declare("sqlPublishObject", `WITH b AS (
	INSERT INTO {schema}.blobs AS t (key, size, value, object, pin_owner, pin_expiry)
	VALUES ($1, $2, '\x'::bytea, $3, $4, coalesce($6::timestamptz, now()) + $5 * interval '1 microsecond')
	ON CONFLICT (key) DO UPDATE SET size = t.size WHERE false
	RETURNING 1
), p AS (
	INSERT INTO {schema}.pins AS p (key, owner, expiry)
	SELECT $1, $4, coalesce($6::timestamptz, now()) + $5 * interval '1 microsecond'
	WHERE (SELECT count(*) FROM b) = 0
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
)
SELECT EXISTS (SELECT FROM b)`)
	sqlReapObjects     = declare("sqlReapObjects", `SELECT object FROM {schema}.blob_uploads WHERE expires_at < coalesce($1::timestamptz, now()) AND object IS NOT NULL`)
	sqlOrphanCursor    = declare("sqlOrphanCursor", `SELECT token FROM {schema}.gc_orphans WHERE id = 1`)
	sqlOrphanCursorSet = declare("sqlOrphanCursorSet", `UPDATE {schema}.gc_orphans SET token = $1 WHERE id = 1`)
	// sqlOrphanNames answers those of the names $1 that no blob row and no
	// upload names.
	sqlOrphanNames = declare("sqlOrphanNames", `SELECT n FROM unnest($1::text[]) AS n
WHERE NOT EXISTS (SELECT FROM {schema}.blobs b WHERE b.object = n)
AND NOT EXISTS (SELECT FROM {schema}.blob_uploads u WHERE u.object = n)`)
)

// dropTimeout bounds the deletion of objects whose rows are gone, which
// runs even when the caller's context has ended: an object left is an
// orphan the sweep removes later.
const dropTimeout = 30 * time.Second

// tierState is the engine's bytes tier: nil tier for none.
type tierState struct {
	tier  *bytestier.Tier
	adopt bool
	mu    sync.Mutex
	ready atomic.Bool
	// dropCrash, set by tests, makes dropObjects do nothing, as a process
	// killed between a row deletion's commit and its object's deletion.
	dropCrash atomic.Pointer[bool]
}

// errNoTier is the error of a bytes-tier call on an engine without one.
var errNoTier = fmt.Errorf("%w: postgres: no bytes tier: open the store with bytes=<bucket URL>", errors.ErrUnsupported)

// Tiered implements blob.Streamer.
func (b *blobs) Tiered() bool { return b.e.tier.tier != nil }

// attachTier checks, once, that the store and its bucket belong together
// (docs/decisions/0027-bytes-tier.md): a store that recorded a tier must
// be opened with one; a store given one records it (refused when it holds
// blobs already, unless adopted) and claims the bucket's marker, which
// must name this store. Migrate calls it; so does every tier operation.
func (e *Engine) attachTier(ctx context.Context) error {
	t := &e.tier
	if t.ready.Load() {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ready.Load() {
		return nil
	}
	var storeID, bucket string
	var claimed bool
	err := e.pool.QueryRow(ctx, e.sql(sqlTierRead)).Scan(&storeID, &bucket, &claimed)
	found := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		if err = interpretError(err); errors.Is(err, sqlengine.ErrNoSchema) {
			return nil // not migrated yet: Migrate attaches
		}
		return err
	}
	if t.tier == nil {
		if found {
			return fmt.Errorf("%w: postgres: this store keeps large blob values in the bucket %s: open it with bytes=<that bucket's URL>", steaderr.ErrInvalidArgument, bucket)
		}
		return nil
	}
	if !found {
		var fresh [16]byte
		_, _ = rand.Read(fresh[:]) // crypto/rand.Read never fails
		err := e.inTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, e.sql(sqlTierLockBlobs)); err != nil {
				return err
			}
			var any bool
			if err := tx.QueryRow(ctx, e.sql(sqlTierAnyBlob)).Scan(&any); err != nil {
				return err
			}
			if any && !t.adopt {
				return fmt.Errorf("%w: postgres: the store holds blobs and records no bytes tier: giving it the bucket %s would keep new large values there and the old ones in the database; to do that, adopt it (bytes_adopt=1)", steaderr.ErrConflict, t.tier)
			}
			_, err := tx.Exec(ctx, e.sql(sqlTierInsert), hex.EncodeToString(fresh[:]), t.tier.String())
			return err
		})
		if err != nil {
			return err
		}
		if err := e.pool.QueryRow(ctx, e.sql(sqlTierRead)).Scan(&storeID, &bucket, &claimed); err != nil {
			return interpretError(err)
		}
	}
	if err := t.tier.Claim(ctx, storeID, claimed); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if !claimed {
		if _, err := e.pool.Exec(ctx, e.sql(sqlTierClaimed)); err != nil {
			return interpretError(err)
		}
	}
	t.ready.Store(true)
	return nil
}

// tierCheck returns the error a tier operation must fail with before it
// starts.
func (e *Engine) tierCheck(ctx context.Context) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	if e.tier.tier == nil {
		return errNoTier
	}
	return e.attachTier(ctx)
}

// WriteValue implements blob.Streamer: the object's name is committed in
// the upload's row before the write begins, so a crash mid-write leaves an
// object an upload names (reaped with it) or an orphan, never a blob row
// without its object.
func (b *blobs) WriteValue(ctx context.Context, p blob.WriteValueParams) (int64, error) {
	e := b.e
	if err := e.tierCheck(ctx); err != nil {
		return 0, err
	}
	t := &e.tier
	name := bytestier.NewName()
	var named, live bool
	if err := e.pool.QueryRow(ctx, e.sql(sqlUploadNameObject), name, int64(p.Set)).Scan(&named, &live); err != nil {
		return 0, interpretError(err)
	}
	switch {
	case !live:
		return 0, errUploadLost
	case !named:
		return 0, fmt.Errorf("%w: upload %d has chunks or an object already", steaderr.ErrConflict, p.Set)
	}
	renew := func(ctx context.Context) error {
		tag, err := e.pool.Exec(ctx, e.sql(sqlUploadRenewObject), p.Lease.Microseconds(), int64(p.Set), name)
		if err != nil {
			return interpretError(err)
		}
		if tag.RowsAffected() == 0 {
			return errUploadLost
		}
		return nil
	}
	size, err := t.tier.Write(ctx, name, p.Value, p.Lease/3, renew)
	if err != nil {
		var src *bytestier.ErrSource
		if errors.As(err, &src) {
			return 0, src.Err
		}
		return 0, err
	}
	tag, err := e.pool.Exec(ctx, e.sql(sqlUploadObjectSize), size, int64(p.Set), name)
	if err != nil {
		return 0, interpretError(err)
	}
	if tag.RowsAffected() == 0 {
		// Reaped while it was written: the upload no longer names the
		// object, which is deleted here (or, failing that, swept).
		e.dropObjects(ctx, []string{name})
		return 0, errUploadLost
	}
	return size, nil
}

// ReadValue implements blob.Streamer.
func (b *blobs) ReadValue(ctx context.Context, p blob.ReadValueParams) (io.ReadCloser, error) {
	if err := b.e.tierCheck(ctx); err != nil {
		return nil, err
	}
	return b.e.tier.tier.NewRangeReader(ctx, p.Object, p.Size, p.Off, p.N)
}

// dropObjects deletes objects whose rows are gone, after the deletion
// committed; one not deleted is an orphan the sweep's orphan step finds.
func (e *Engine) dropObjects(ctx context.Context, names []string) {
	if e.tier.tier == nil || len(names) == 0 {
		return
	}
	if crash := e.tier.dropCrash.Load(); crash != nil && *crash {
		return // a test's crash between the commit and the delete
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropTimeout)
	defer cancel()
	_ = e.tier.tier.Delete(dctx, names) // an object left is an orphan: swept
}

// nonEmpty returns names without the empty ones.
func nonEmpty(names []string) []string {
	out := names[:0:0]
	for _, n := range names {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

// SweepOrphans implements gc.OrphanSweeper.
func (g *gcMech) SweepOrphans(ctx context.Context, p gc.OrphanParams) (gc.Orphans, error) {
	e := g.e
	var out gc.Orphans
	if err := e.check(ctx); err != nil {
		return out, err
	}
	t := &e.tier
	if t.tier == nil {
		return gc.Orphans{Wrapped: true}, nil
	}
	if err := e.attachTier(ctx); err != nil {
		return out, err
	}
	var token []byte
	if err := e.pool.QueryRow(ctx, e.sql(sqlOrphanCursor)).Scan(&token); err != nil {
		return out, interpretError(err)
	}
	var renew func(context.Context) error
	if p.Lease != nil {
		renew = p.Lease.Renew
	}
	listed, deleted, next, err := t.tier.SweepPage(ctx, token, p.Limit, p.Grace, p.DryRun, func(ctx context.Context, names []string) ([]string, error) {
		rows, err := e.pool.Query(ctx, e.sql(sqlOrphanNames), names)
		if err != nil {
			return nil, interpretError(err)
		}
		orphan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		return orphan, interpretError(err)
	}, renew)
	if err != nil {
		return gc.Orphans{}, err
	}
	out = gc.Orphans{Listed: listed, Deleted: deleted, Wrapped: next == nil}
	if p.DryRun {
		return out, nil
	}
	if _, err := e.pool.Exec(ctx, e.sql(sqlOrphanCursorSet), next); err != nil {
		return out, interpretError(err)
	}
	return out, nil
}

var _ gc.OrphanSweeper = (*gcMech)(nil)

// publishObject publishes the upload's object as p.Key's value in tx (the
// upload already ended in it), pinned, with its children's edges. It
// reports the object to delete once tx commits: the upload's, when the
// key was stored already.
func (b *blobs) publishObject(ctx context.Context, tx pgx.Tx, p blob.PutParams, now pgtype.Timestamptz, object string, size int64) (redundant string, err error) {
	if size != p.Size {
		if size < 0 {
			return "", fmt.Errorf("%w: the object of upload %d is not written whole yet", steaderr.ErrInvalidArgument, p.Chunks)
		}
		return "", fmt.Errorf("%w: the object of upload %d holds %d bytes, not %d", steaderr.ErrInvalidArgument, p.Chunks, size, p.Size)
	}
	children := keyTexts(p.Children)
	if len(children) > 0 {
		if err := b.lockChildren(ctx, tx, p.Key.String(), children); err != nil {
			return "", err
		}
	}
	var inserted bool
	if err := tx.QueryRow(ctx, b.e.sql(sqlPublishObject), p.Key.String(), p.Size, object, p.Owner, p.TTL.Microseconds(), now).Scan(&inserted); err != nil {
		return "", err
	}
	if len(children) > 0 && !inserted {
		// Stored by another writer since the lock pass (or before it):
		// this publish is a re-put.
		if err := b.checkFixed(ctx, tx, p.Key.String(), children); err != nil {
			return "", err
		}
	}
	if len(children) > 0 {
		if _, err := tx.Exec(ctx, b.e.sql(sqlInsertEdges), p.Key.String(), children); err != nil {
			return "", err
		}
	}
	if inserted {
		return "", nil
	}
	return object, nil
}

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
	t := e.tier.tier
	if t == nil {
		return "", nil
	}
	if err := t.Check(ctx); err != nil {
		return t.String(), fmt.Errorf("bucket %s: %w", t, err)
	}
	return t.String(), nil
}
