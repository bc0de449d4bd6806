package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/internal/bytestier"
	"github.com/steadkit/stead/engine/internal/chunkid"
	"github.com/steadkit/stead/engine/internal/sqlengine"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/steaderr"
)

// The bytes tier (docs/decisions/0027-bytes-tier.md, 0045-durable-uploads.md):
// bytes past the inline limit are written to bucket objects, each an
// upload's object chunk, named by its chunk row before a byte is written,
// and by the blob row once an upload of that one chunk is published.
// Objects are deleted only after the deletion of the row naming them
// committed.
var (
	sqlTierRead    = declare("sqlTierRead", `SELECT store_id, bucket, claimed FROM {schema}.bytes_tier WHERE id = 1`)
	sqlTierAnyBlob = declare("sqlTierAnyBlob", `SELECT EXISTS (SELECT FROM {schema}.blobs)`)
	// sqlTierInsert records the tier; the lock on the blobs table makes
	// the "store holds no blob" check hold until the commit.
	sqlTierLockBlobs = declare("sqlTierLockBlobs", `LOCK TABLE {schema}.blobs IN SHARE MODE`)
	sqlTierInsert    = declare("sqlTierInsert", `INSERT INTO {schema}.bytes_tier (id, store_id, bucket) VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING`)
	sqlTierClaimed   = declare("sqlTierClaimed", `UPDATE {schema}.bytes_tier SET claimed = true WHERE id = 1`)

	// sqlNameChunk commits the object @object as the unfinished chunk at
	// @off of the upload @set when its size is @off, renewing its lease
	// to at least @lease_us microseconds from @now (NULL: now()):
	// sqlWriteChunk's shape
	// (engine/postgres/chunks.go), replacing an unfinished chunk left at
	// @off and answering its object, but without moving the size.
	sqlNameChunk = declare("sqlNameChunk", `WITH up AS (
    UPDATE {schema}.blob_uploads
    SET expires_at = greatest(expires_at, coalesce(@now::timestamptz, now()) + @lease_us::bigint * interval '1 microsecond')
    WHERE id = @set AND size = @off
    RETURNING id
), unfinished AS (
    DELETE FROM {schema}.blob_chunks
    WHERE chunks = (SELECT id FROM up) AND off = @off AND len IS NULL
    RETURNING object
), ins AS (
    INSERT INTO {schema}.blob_chunks (chunks, off, data, object)
    SELECT id, @off, '\x'::bytea, @object FROM up
    WHERE (SELECT count(*) FROM unfinished) >= 0
)
SELECT EXISTS (SELECT FROM up), (SELECT object FROM unfinished)`)

	// sqlRenewChunk renews the upload's lease, as sqlNameChunk does, while
	// its unfinished chunk at @off still names @object.
	sqlRenewChunk = declare("sqlRenewChunk", `UPDATE {schema}.blob_uploads
SET expires_at = greatest(expires_at, coalesce(@now::timestamptz, now()) + @lease_us::bigint * interval '1 microsecond')
WHERE id = @set
AND EXISTS (SELECT FROM {schema}.blob_chunks WHERE chunks = @set AND off = @off AND object = @object AND len IS NULL)`)

	// sqlChunkNamed answers whether the unfinished chunk at $2 of set $1
	// names the object $3.
	sqlChunkNamed = declare("sqlChunkNamed", `SELECT EXISTS (SELECT FROM {schema}.blob_chunks WHERE chunks = $1 AND off = $2 AND object = $3 AND len IS NULL)`)

	// sqlLockUpload locks an upload's row and answers its size, as of its
	// newest version.
	sqlLockUpload = declare("sqlLockUpload", `SELECT size FROM {schema}.blob_uploads WHERE id = $1 FOR NO KEY UPDATE`)

	// sqlFinishChunk, run after sqlLockUpload in the same transaction (so
	// its snapshot holds every chunk committed before the lock), commits
	// the object @object, written whole with @len bytes, as the chunk at
	// @off when the unfinished chunk there still names it: its size, the
	// upload's new size, its state @state and a lease of @lease_us
	// microseconds from @now (NULL: now()). An empty object makes no chunk: its row goes,
	// the upload's size stays. It answers whether the chunk still named
	// the object.
	sqlFinishChunk = declare("sqlFinishChunk", `WITH fin AS (
    UPDATE {schema}.blob_chunks SET len = @len::bigint
    WHERE chunks = @set AND off = @off AND object = @object AND len IS NULL AND @len::bigint > 0
    RETURNING 1
), empty AS (
    DELETE FROM {schema}.blob_chunks
    WHERE chunks = @set AND off = @off AND object = @object AND len IS NULL AND @len::bigint = 0
    RETURNING 1
), up AS (
    UPDATE {schema}.blob_uploads
    SET size = @off::bigint + @len::bigint, state = @state, expires_at = coalesce(@now::timestamptz, now()) + @lease_us::bigint * interval '1 microsecond'
    WHERE id = @set AND EXISTS (SELECT FROM fin UNION ALL SELECT FROM empty)
)
SELECT EXISTS (SELECT FROM fin UNION ALL SELECT FROM empty)`)

	// sqlPublishObject is sqlPublish for a value kept as one object, run
	// after sqlEndUpload: the chunk row naming the object goes, and the
	// blob row names the object, or, when the key was stored already, the
	// pin goes to pins and the statement answers false: the caller deletes
	// the object after the commit.
	sqlPublishObject = declare("sqlPublishObject", `WITH c AS (
	DELETE FROM {schema}.blob_chunks WHERE chunks = @chunks
), b AS (
	INSERT INTO {schema}.blobs AS t (key, size, value, object, pin_owner, pin_expiry)
	VALUES (@key, @size, '\x'::bytea, @object, @owner, coalesce(@now::timestamptz, now()) + @ttl_us * interval '1 microsecond')
	ON CONFLICT (key) DO UPDATE SET size = t.size WHERE false
	RETURNING 1
), p AS (
	INSERT INTO {schema}.pins AS p (key, owner, expiry)
	SELECT @key, @owner, coalesce(@now::timestamptz, now()) + @ttl_us * interval '1 microsecond'
	WHERE (SELECT count(*) FROM b) = 0
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
)
SELECT EXISTS (SELECT FROM b)`)
	sqlOrphanCursor    = declare("sqlOrphanCursor", `SELECT token FROM {schema}.gc_orphans WHERE id = 1`)
	sqlOrphanCursorSet = declare("sqlOrphanCursorSet", `UPDATE {schema}.gc_orphans SET token = $1 WHERE id = 1`)
	// sqlOrphanNames answers those of the names $1 that no blob row and no
	// chunk row names, in one snapshot: a publish moving a name from its
	// chunk row to its blob row commits both at once.
	sqlOrphanNames = declare("sqlOrphanNames", `SELECT n FROM unnest($1::text[]) AS n
WHERE NOT EXISTS (SELECT FROM {schema}.blobs b WHERE b.object = n)
AND NOT EXISTS (SELECT FROM {schema}.blob_chunks c WHERE c.object = n)`)
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
	// beforeFinish, set by tests, runs in WriteValue once the object is
	// written and before its chunk is finished.
	beforeFinish atomic.Pointer[func()]
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

// WriteValue implements blob.Streamer: the object's name is committed as
// an unfinished chunk before the write begins (sqlNameChunk), the object
// is written while the upload's lease is renewed (sqlRenewChunk), and the
// chunk is finished in a transaction of its own (finishChunk). A crash
// between the two leaves an unfinished chunk naming the object, which the
// next append at its offset, an abort or the reaper deletes with its
// object, never a chunk or blob row without its object.
func (b *blobs) WriteValue(ctx context.Context, p blob.WriteValueParams) (int64, error) {
	e := b.e
	if err := e.tierCheck(ctx); err != nil {
		return 0, err
	}
	if err := chunkid.CheckSpan(p.Off, 0); err != nil {
		return 0, err
	}
	name := bytestier.NewName()
	args := func() pgx.StrictNamedArgs {
		return pgx.StrictNamedArgs{"set": int64(p.Set), "off": p.Off, "object": name, "lease_us": p.Lease.Microseconds(), "now": valueNow(p)}
	}
	if err := b.appendRow(ctx, sqlNameChunk, p.Set, p.Off, args()); err != nil {
		return 0, err
	}
	renew := func(ctx context.Context) error {
		tag, err := e.pool.Exec(ctx, e.sql(sqlRenewChunk), args())
		switch {
		case err != nil:
			return interpretError(err)
		case tag.RowsAffected() == 1:
			return nil
		}
		return b.chunkGone(ctx, p.Set, p.Off)
	}
	size, err := e.tier.tier.Write(ctx, name, p.Value, p.Lease/3, renew)
	var src *bytestier.ErrSource
	switch {
	case errors.As(err, &src):
		return 0, src.Err
	case err != nil && ctx.Err() == nil:
		// A write that failed because another writer replaced the chunk
		// (and deleted its object) says so.
		var named bool
		if qerr := e.pool.QueryRow(ctx, e.sql(sqlChunkNamed), int64(p.Set), p.Off, name).Scan(&named); qerr == nil && !named {
			return 0, fmt.Errorf("%w (the object's write: %v)", b.chunkGone(ctx, p.Set, p.Off), err)
		}
		return 0, err
	case err != nil:
		return 0, err
	}
	if hook := e.tier.beforeFinish.Load(); hook != nil {
		(*hook)()
	}
	if p.Off > math.MaxInt64-size {
		e.dropObjects(ctx, []string{name})
		return 0, fmt.Errorf("%w: an object chunk of %d bytes at offset %d: its end does not fit in an int64", steaderr.ErrInvalidArgument, size, p.Off)
	}
	var state []byte
	if p.State != nil {
		state = p.State()
	}
	known, err := b.finishChunk(ctx, p, name, size, state)
	switch {
	case err != nil && known:
		// No row names the object: the upload ended, or another writer
		// replaced the chunk or appended first.
		e.dropObjects(ctx, []string{name})
		return 0, err
	case err != nil:
		// The outcome is unknown (the commit may have happened): the
		// object stays, named by its chunk row or an orphan.
		return 0, err
	case size == 0:
		e.dropObjects(ctx, []string{name})
	}
	return size, nil
}

// finishChunk commits the chunk at p.Off as the object name of size bytes
// (sqlLockUpload, then sqlFinishChunk). known reports, with an error, that
// the transaction found the upload gone or the chunk no longer the
// object's and so committed nothing.
func (b *blobs) finishChunk(ctx context.Context, p blob.WriteValueParams, name string, size int64, state []byte) (known bool, err error) {
	err = b.e.inTx(ctx, func(tx pgx.Tx) error {
		var current int64
		err := tx.QueryRow(ctx, b.e.sql(sqlLockUpload), int64(p.Set)).Scan(&current)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			known = true
			return errUploadLost
		case err != nil:
			return err
		case current != p.Off:
			known = true
			return fmt.Errorf("%w: upload %d holds %d bytes: another writer appended at %d first", steaderr.ErrConflict, p.Set, current, p.Off)
		}
		var named bool
		if err := tx.QueryRow(ctx, b.e.sql(sqlFinishChunk), pgx.StrictNamedArgs{
			"set": int64(p.Set), "off": p.Off, "object": name, "len": size, "state": state, "lease_us": p.Lease.Microseconds(), "now": valueNow(p),
		}).Scan(&named); err != nil {
			return err
		}
		if !named {
			known = true
			return errReplaced(p.Set, p.Off)
		}
		return nil
	})
	return known, err
}

// errReplaced is the error of an object chunk whose row another writer
// replaced while the object was written.
func errReplaced(set blob.ChunkSet, off int64) error {
	return fmt.Errorf("%w: upload %d: another writer replaced the chunk at offset %d while it was written", steaderr.ErrConflict, set, off)
}

// chunkGone is the error of an object chunk at off whose row no longer
// names its object: ErrLost when the upload is gone, else errReplaced.
func (b *blobs) chunkGone(ctx context.Context, set blob.ChunkSet, off int64) error {
	if _, err := b.UploadStatus(ctx, set); err != nil {
		return err
	}
	return errReplaced(set, off)
}

// valueNow is the "now" argument of p's statements: p.Now's instant, or
// NULL (the database's clock).
func valueNow(p blob.WriteValueParams) any {
	if p.Now == nil {
		return nil
	}
	return nowArg(p.Now())
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

// publishObject publishes the upload's one chunk, the object, as p.Key's
// value in tx (the upload already ended in it), pinned, with its
// children's edges. It reports whether it stored the key, and returns
// the objects to delete once tx commits: the upload's, when the key was
// stored already.
func (b *blobs) publishObject(ctx context.Context, tx pgx.Tx, p blob.PutParams, now pgtype.Timestamptz, object string) (inserted bool, redundant []string, err error) {
	children := keyTexts(p.Children)
	if len(children) > 0 {
		if err := b.lockChildren(ctx, tx, p.Key.String(), children); err != nil {
			return false, nil, err
		}
	}
	if err := tx.QueryRow(ctx, b.e.sql(sqlPublishObject), pgx.StrictNamedArgs{
		"chunks": int64(p.Chunks), "key": p.Key.String(), "size": p.Size, "object": object, "owner": p.Owner, "ttl_us": p.TTL.Microseconds(), "now": now,
	}).Scan(&inserted); err != nil {
		return false, nil, err
	}
	if len(children) > 0 && !inserted {
		// Stored by another writer since the lock pass (or before it):
		// this publish is a re-put.
		if err := b.checkFixed(ctx, tx, p.Key.String(), children); err != nil {
			return false, nil, err
		}
	}
	if len(children) > 0 {
		if _, err := tx.Exec(ctx, b.e.sql(sqlInsertEdges), p.Key.String(), children); err != nil {
			return false, nil, err
		}
	}
	if inserted {
		return true, nil, nil
	}
	return false, []string{object}, nil
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
