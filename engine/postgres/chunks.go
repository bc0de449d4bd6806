package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/internal/chunkid"
	"github.com/steadkit/stead/steaderr"
)

// The chunked tier (docs/decisions/0011-large-blobs.md): each statement is
// one short autocommit transaction. An upload's row is locked by every
// statement that touches it, so a chunk write, the publish and the reaper
// serialize on it: a chunk write renews the lease the reaper re-checks, and
// a reaped upload accepts no chunk and publishes nothing.
var (
	// sqlBeginUpload starts an upload under the random id $1 with a lease
	// of $2 microseconds from $3 (NULL: now()), unless that id is taken: by a live upload, or by
	// a published set (which holds chunks and no upload). It answers the id
	// when it stored the upload.
	sqlBeginUpload = declare("sqlBeginUpload", `INSERT INTO {schema}.blob_uploads (id, expires_at)
SELECT $1, coalesce($3::timestamptz, now()) + $2::bigint * interval '1 microsecond'
WHERE NOT EXISTS (SELECT FROM {schema}.blob_chunks WHERE chunks = $1)
ON CONFLICT (id) DO NOTHING
RETURNING id`)

	// sqlWriteChunk renews the upload's lease and stores a chunk, only
	// while the upload's row exists (BeginUpload stored it; nothing but
	// BeginUpload creates one, so an ended upload takes no chunk), unless
	// it overlaps a chunk of the set: the one starting at or before
	// it, or one starting inside it. It answers whether it stored the
	// chunk and whether the upload was live. Its checks use the snapshot
	// taken before it waited on the upload's row, so a concurrent write of
	// the same upload can slip an overlap past them; the publish, which
	// checks again after locking that row, refuses it (sqlChunksTile).
	sqlWriteChunk = declare("sqlWriteChunk", `WITH up AS (
    UPDATE {schema}.blob_uploads SET expires_at = coalesce(@now::timestamptz, now()) + @lease_us::bigint * interval '1 microsecond'
    WHERE id = @set
    RETURNING id
), ins AS (
    INSERT INTO {schema}.blob_chunks (chunks, off, data)
    SELECT id, @off, @data FROM up
    WHERE NOT EXISTS (
        SELECT FROM (
            SELECT off, octet_length(data) AS len FROM {schema}.blob_chunks
            WHERE chunks = @set AND off <= @off
            ORDER BY off DESC
            LIMIT 1
        ) prev
        WHERE prev.off + prev.len > @off
    )
    AND NOT EXISTS (
        SELECT FROM {schema}.blob_chunks
        WHERE chunks = @set AND off > @off AND off < @off + octet_length(@data::bytea)
    )
    RETURNING 1
)
SELECT EXISTS (SELECT FROM ins), EXISTS (SELECT FROM up)`)

	// sqlChunksTile answers whether the chunks of set $1 cover [0, $2)
	// exactly, each byte once: the first starts at 0, each ends where the
	// next starts and the last at $2. The publish runs it after locking the
	// upload's row, so it sees every chunk written.
	sqlChunksTile = declare("sqlChunksTile", `SELECT coalesce(min(off) = 0 AND bool_and(len > 0 AND off + len = coalesce(next, $2)), false)
FROM (
    SELECT off, octet_length(data) AS len, lead(off) OVER (ORDER BY off) AS next
    FROM {schema}.blob_chunks
    WHERE chunks = $1
) c`)

	// sqlPublish is sqlPut (engine/postgres/blob.go) for one chunked
	// value, run after sqlEndUpload in the same transaction: the blob row
	// is inserted naming the chunk set, pinned in the row, with the same
	// row lock; when the key was already stored the staged chunks are
	// deleted and the pin goes to pins, after the blob row is locked. Its
	// snapshot is taken after the upload's row was locked, so the discard
	// sees every chunk written. It answers whether it inserted the row.
	sqlPublish = declare("sqlPublish", `WITH b AS (
	INSERT INTO {schema}.blobs AS t (key, size, value, chunks, pin_owner, pin_expiry)
	VALUES (@key, @size, '\x'::bytea, @chunks, @owner, coalesce(@now::timestamptz, now()) + @ttl_us * interval '1 microsecond')
	ON CONFLICT (key) DO UPDATE SET size = t.size WHERE false
	RETURNING 1
), discard AS (
	DELETE FROM {schema}.blob_chunks
	WHERE chunks = @chunks AND NOT EXISTS (SELECT FROM b)
), pinned AS (
	INSERT INTO {schema}.pins AS p (key, owner, expiry)
	SELECT @key, @owner, coalesce(@now::timestamptz, now()) + @ttl_us * interval '1 microsecond'
	WHERE (SELECT count(*) FROM b) = 0
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
)
SELECT EXISTS (SELECT FROM b)`)

	// sqlEndUpload ends an upload by deleting its row, which locks it: an
	// in-flight chunk write (which updates or inserts that row) commits
	// first, and a later one finds no upload. It answers, when the upload
	// was there, the object it names ('' for none: its value is chunks) and
	// that object's size once written whole (-1 before).
	sqlEndUpload = declare("sqlEndUpload", `DELETE FROM {schema}.blob_uploads WHERE id = $1 RETURNING coalesce(object, ''), coalesce(object_size, -1)`)

	// sqlDeleteChunks deletes a chunk set's chunks. It runs as a statement
	// of its own after sqlEndUpload, in the same transaction: under READ
	// COMMITTED it then takes a snapshot that holds every chunk committed
	// before the upload's row was locked (docs/decisions/0010-arbitration.md
	// has the same trap), where a statement that waited on the lock would
	// still use its older one and miss them.
	sqlDeleteChunks = declare("sqlDeleteChunks", `DELETE FROM {schema}.blob_chunks WHERE chunks = $1`)

	// sqlReapUploads ends every upload whose lease lapsed at $1 (NULL:
	// now()), answering
	// their ids; sqlReapChunks then deletes their chunks in a statement of
	// its own, in the same transaction, for the reason sqlDeleteChunks
	// gives: a chunk write holding an upload's row while the reaper waits
	// on it commits a chunk the reaper's older snapshot would miss.
	sqlReapUploads = declare("sqlReapUploads", `DELETE FROM {schema}.blob_uploads WHERE expires_at < coalesce($1::timestamptz, now()) RETURNING id`)
	sqlReapChunks  = declare("sqlReapChunks", `DELETE FROM {schema}.blob_chunks WHERE chunks = ANY($1::bigint[])`)

	// sqlLockKeys locks the stored ones of the sorted keys $1, in key
	// order, as a pin does, and answers them.
	sqlLockKeys = declare("sqlLockKeys", `SELECT key FROM {schema}.blobs WHERE key = ANY ($1::text[]) ORDER BY key FOR NO KEY UPDATE`)
	// sqlNewChildren answers the children $2 that stored $1 has no edge to.
	sqlNewChildren = declare("sqlNewChildren", `SELECT c FROM unnest($2::text[]) AS c
WHERE NOT EXISTS (SELECT FROM {schema}.blob_edges WHERE parent = $1 AND child = c)`)
	// sqlInsertEdges records that $1 references each of $2.
	sqlInsertEdges = declare("sqlInsertEdges", `INSERT INTO {schema}.blob_edges (parent, child) SELECT $1, c FROM unnest($2::text[]) AS c ON CONFLICT DO NOTHING`)

	sqlReadChunk = declare("sqlReadChunk", `SELECT off, data FROM {schema}.blob_chunks
WHERE chunks = $1 AND off <= $2
ORDER BY off DESC
LIMIT 1`)

	sqlGet = declare("sqlGet", `SELECT size, value, chunks, object FROM {schema}.blobs WHERE key = $1`)
)

func (b *blobs) Get(ctx context.Context, key blob.Key) (blob.Stored, error) {
	if err := b.e.check(ctx); err != nil {
		return blob.Stored{}, err
	}
	var st blob.Stored
	var chunks *int64
	var object *string
	err := readError(b.e.pool.QueryRow(ctx, b.e.sql(sqlGet), key.String()).Scan(&st.Size, &st.Value, &chunks, &object))
	switch {
	case err != nil:
		return blob.Stored{}, err
	case object != nil:
		st.Object, st.Value = *object, nil
	case chunks != nil:
		st.Chunks, st.Value = blob.ChunkSet(*chunks), nil
	}
	return st, nil
}

// BeginUpload draws random ids until one is free (chunkid.Draw).
func (b *blobs) BeginUpload(ctx context.Context, p blob.BeginUploadParams) (blob.ChunkSet, error) {
	if err := b.e.check(ctx); err != nil {
		return 0, err
	}
	id, err := chunkid.Draw(func(id int64) (bool, error) {
		err := b.e.pool.QueryRow(ctx, b.e.sql(sqlBeginUpload), id, p.Lease.Microseconds(), nowArg(p.Now)).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil // the id is taken
		}
		return err == nil, interpretError(err)
	})
	return blob.ChunkSet(id), err
}

func (b *blobs) WriteChunk(ctx context.Context, p blob.WriteChunkParams) error {
	set, off, data := p.Set, p.Off, p.Data
	if err := b.e.check(ctx); err != nil {
		return err
	}
	if err := chunkid.CheckSpan(off, len(data)); err != nil {
		return err
	}
	var stored, live bool
	err := b.e.pool.QueryRow(ctx, b.e.sql(sqlWriteChunk), pgx.StrictNamedArgs{
		"set": int64(set), "off": off, "data": data, "lease_us": p.Lease.Microseconds(), "now": nowArg(p.Now),
	}).Scan(&stored, &live)
	switch {
	case isUniqueViolation(err):
		return fmt.Errorf("%w: chunk set %d has a chunk at offset %d already: %w", steaderr.ErrConflict, set, off, interpretError(err))
	case err != nil:
		return interpretError(err)
	case stored:
		return nil
	case !live:
		return errUploadLost
	}
	return fmt.Errorf("%w: a chunk of %d bytes at offset %d overlaps a chunk of set %d", steaderr.ErrConflict, len(data), off, set)
}

// errUploadLost reports a chunk set with no live upload: never begun,
// published, aborted, or reaped once its lease lapsed.
var errUploadLost = fmt.Errorf("%w: the chunk set has no upload (never begun, published, aborted, or reaped once its lease lapsed)", steaderr.ErrLost)

// lockChildren locks the rows of a parent about to be published and of
// its children, in one pass in key order as a batch of puts does, and
// fails with an error wrapping steaderr.ErrNotFound naming the children
// not stored, or, when the parent is stored, steaderr.ErrChildrenFixed naming
// those it was stored without.
func (b *blobs) lockChildren(ctx context.Context, tx pgx.Tx, parent string, children []string) error {
	lock := append(slices.Clone(children), parent)
	slices.Sort(lock)
	rows, err := tx.Query(ctx, b.e.sql(sqlLockKeys), lock)
	if err != nil {
		return err
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	var missing []string
	for _, c := range children {
		if _, ok := slices.BinarySearch(stored, c); !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return missingChildren(missing)
	}
	if _, ok := slices.BinarySearch(stored, parent); !ok {
		return nil
	}
	return b.checkFixed(ctx, tx, parent, children)
}

// checkFixed fails with an error wrapping steaderr.ErrChildrenFixed when
// the stored parent has no edge to one of children. It is a statement of
// its own, after the parent's row is locked (or its insert met another's),
// so its snapshot holds the parent's edges.
func (b *blobs) checkFixed(ctx context.Context, tx pgx.Tx, parent string, children []string) error {
	rows, err := tx.Query(ctx, b.e.sql(sqlNewChildren), parent, children)
	if err != nil {
		return err
	}
	extra, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(extra) > 0 {
		return blob.ChildrenFixedError(parent, extra)
	}
	return nil
}

// publish stores the chunked value p names in one transaction: the
// upload ends (sqlEndUpload; none: reaped, nothing happens), its chunks
// are checked to cover p.Size bytes exactly (sqlChunksTile; not: nothing
// happens), then sqlPublish stores the blob row or discards the chunks,
// and pins the key.
func (b *blobs) publish(ctx context.Context, p blob.PutParams) error {
	now := pgtype.Timestamptz{Time: p.Now, Valid: !p.Now.IsZero()}
	var redundant string
	err := b.e.retryTransient(ctx, func() error {
		redundant = ""
		tx, err := b.e.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
		var object string
		var objectSize int64
		err = tx.QueryRow(ctx, b.e.sql(sqlEndUpload), int64(p.Chunks)).Scan(&object, &objectSize)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return errUploadLost
		case err != nil:
			return err
		case object != "":
			if redundant, err = b.publishObject(ctx, tx, p, now, object, objectSize); err != nil {
				return err
			}
			return commit(ctx, tx)
		}
		var tiled bool
		if err := tx.QueryRow(ctx, b.e.sql(sqlChunksTile), int64(p.Chunks), p.Size).Scan(&tiled); err != nil {
			return err
		}
		if !tiled {
			return fmt.Errorf("%w: the staged chunks of set %d do not cover %d bytes exactly, each once", steaderr.ErrInvalidArgument, p.Chunks, p.Size)
		}
		children := keyTexts(p.Children)
		if len(children) > 0 {
			if err := b.lockChildren(ctx, tx, p.Key.String(), children); err != nil {
				return err
			}
		}
		var inserted bool
		if err := tx.QueryRow(ctx, b.e.sql(sqlPublish), pgx.StrictNamedArgs{
			"key": p.Key.String(), "size": p.Size, "chunks": int64(p.Chunks), "owner": p.Owner, "ttl_us": p.TTL.Microseconds(), "now": now,
		}).Scan(&inserted); err != nil {
			return err
		}
		if len(children) > 0 && !inserted {
			// Stored by another writer since the lock pass (or before
			// it): this publish is a re-put.
			if err := b.checkFixed(ctx, tx, p.Key.String(), children); err != nil {
				return err
			}
		}
		if len(children) > 0 {
			if _, err := tx.Exec(ctx, b.e.sql(sqlInsertEdges), p.Key.String(), children); err != nil {
				return err
			}
		}
		return commit(ctx, tx)
	})
	if err == nil && redundant != "" {
		b.e.dropObjects(ctx, []string{redundant})
	}
	return err
}

// AbortUpload ends the upload and then deletes its chunks, two statements
// in one transaction (see sqlDeleteChunks); an upload already ended keeps
// its chunks (a published one's are its blob's).
func (b *blobs) AbortUpload(ctx context.Context, set blob.ChunkSet) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	tx, err := b.e.pool.Begin(ctx)
	if err != nil {
		return interpretError(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	var object string
	var objectSize int64
	err = tx.QueryRow(ctx, b.e.sql(sqlEndUpload), int64(set)).Scan(&object, &objectSize)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil // ended already
	case err == nil && object == "":
		_, err = tx.Exec(ctx, b.e.sql(sqlDeleteChunks), int64(set))
	}
	if err == nil {
		err = commit(ctx, tx)
	}
	if err == nil {
		b.e.dropObjects(ctx, nonEmpty([]string{object}))
	}
	return interpretError(err)
}

// ReapUploads ends the lapsed uploads and then deletes their chunks, two
// statements in one transaction (see sqlReapUploads).
func (b *blobs) ReapUploads(ctx context.Context, p blob.ReapUploadsParams) (int, error) {
	if err := b.e.check(ctx); err != nil {
		return 0, err
	}
	tx, err := b.e.pool.Begin(ctx)
	if err != nil {
		return 0, listError(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	rows, err := tx.Query(ctx, b.e.sql(sqlReapObjects), nowArg(p.Now))
	if err != nil {
		return 0, listError(err)
	}
	objects, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, listError(err)
	}
	rows, err = tx.Query(ctx, b.e.sql(sqlReapUploads), nowArg(p.Now))
	if err != nil {
		return 0, listError(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err == nil && len(ids) > 0 {
		_, err = tx.Exec(ctx, b.e.sql(sqlReapChunks), ids)
	}
	if err == nil {
		err = commit(ctx, tx)
	}
	if err != nil {
		return 0, listError(err)
	}
	b.e.dropObjects(ctx, objects)
	return len(ids), nil
}

func (b *blobs) ReadChunk(ctx context.Context, set blob.ChunkSet, off int64) (int64, []byte, error) {
	if err := b.e.check(ctx); err != nil {
		return 0, nil, err
	}
	var start int64
	var data []byte
	err := readError(b.e.pool.QueryRow(ctx, b.e.sql(sqlReadChunk), int64(set), off).Scan(&start, &data))
	return start, data, err
}
