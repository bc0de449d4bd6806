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

// Uploads and chunk sets (docs/decisions/0011-large-blobs.md,
// 0045-durable-uploads.md). An upload's row holds its owner, its size (the
// bytes its committed chunks hold, [0, size)), its state and its lease.
// Every statement that writes a live upload's chunks first locks that row
// (an UPDATE of it, or its deletion), so appends, the publish, aborts and
// the reaper serialize on it; and a statement that must see every chunk
// committed before the lock was granted runs after it, as a statement of
// its own: under READ COMMITTED a statement's snapshot is taken before it
// waits, and only the rows it locks or updates are re-read at their
// newest (docs/decisions/0010-arbitration.md has the same trap). A chunk
// row is finished (len set: bytes in data, or a whole object) or
// unfinished (an object named before its first byte was written, len
// NULL); an unfinished chunk is only ever at its upload's size, and the
// next append there replaces it.
var (
	// sqlBeginUpload starts an upload under the random id @id, owned by
	// @owner with the state @state, leased @lease_us microseconds from
	// @now (NULL: now()), unless that id is taken: by a live upload, or
	// by a published set (which holds chunks and no upload). It answers
	// the id when it stored the upload.
	sqlBeginUpload = declare("sqlBeginUpload", `INSERT INTO {schema}.blob_uploads (id, expires_at, owner, state)
SELECT @id, coalesce(@now::timestamptz, now()) + @lease_us::bigint * interval '1 microsecond', @owner, @state
WHERE NOT EXISTS (SELECT FROM {schema}.blob_chunks WHERE chunks = @id)
ON CONFLICT (id) DO NOTHING
RETURNING id`)

	sqlUploadStatus = declare("sqlUploadStatus", `SELECT owner, size, state FROM {schema}.blob_uploads WHERE id = $1`)

	// sqlWriteChunk appends @data at @off to the upload @set when its size
	// is @off, in one statement: the upload's row is updated (size, state,
	// lease) only if it is there with that size, which the UPDATE checks on
	// the row's newest version once it holds its lock, so of two appends at
	// one offset the second finds the first's size; then an unfinished
	// chunk at @off is deleted (answered, for its object to be deleted
	// after the commit) and the chunk inserted. Those two run in the
	// snapshot taken before the lock was awaited: an unfinished chunk a
	// WriteValue committed meanwhile is not seen, and the insert fails on
	// the primary key, which rolls the statement back whole; run again, it
	// sees that chunk (WriteChunk retries). It answers whether the upload
	// took the chunk.
	sqlWriteChunk = declare("sqlWriteChunk", `WITH up AS (
    UPDATE {schema}.blob_uploads
    SET size = @off + octet_length(@data::bytea), state = @state,
        expires_at = coalesce(@now::timestamptz, now()) + @lease_us::bigint * interval '1 microsecond'
    WHERE id = @set AND size = @off
    RETURNING id
), unfinished AS (
    DELETE FROM {schema}.blob_chunks
    WHERE chunks = (SELECT id FROM up) AND off = @off AND len IS NULL
    RETURNING object
), ins AS (
    INSERT INTO {schema}.blob_chunks (chunks, off, data, len)
    SELECT id, @off, @data, octet_length(@data::bytea) FROM up
    WHERE (SELECT count(*) FROM unfinished) >= 0
)
SELECT EXISTS (SELECT FROM up), (SELECT object FROM unfinished)`)

	// sqlEndUpload ends an upload by deleting its row, which locks it: an
	// append in flight commits first, and a later one finds no upload. It
	// answers the upload's size, as of its newest version.
	sqlEndUpload = declare("sqlEndUpload", `DELETE FROM {schema}.blob_uploads WHERE id = $1 RETURNING size`)

	// sqlDeleteChunks deletes a chunk set's chunks and answers the objects
	// they named. It runs as a statement of its own after sqlEndUpload, in
	// the same transaction, so that its snapshot holds every chunk
	// committed before the upload's row was locked.
	sqlDeleteChunks = declare("sqlDeleteChunks", `WITH d AS (DELETE FROM {schema}.blob_chunks WHERE chunks = $1 RETURNING object)
SELECT object FROM d WHERE object IS NOT NULL`)

	// sqlDiscardUnfinished deletes a chunk set's unfinished chunks, after
	// sqlEndUpload, and answers their objects.
	sqlDiscardUnfinished = declare("sqlDiscardUnfinished", `DELETE FROM {schema}.blob_chunks WHERE chunks = $1 AND len IS NULL RETURNING object`)

	// sqlChunksTile answers whether the finished chunks of set $1 cover
	// [0, $2) exactly, each byte once (the first starts at 0, each ends
	// where the next starts and the last at $2), how many there are, and
	// the object of the first (the only one, when there is one). The
	// publish runs it after locking the upload's row, so it sees every
	// chunk written.
	sqlChunksTile = declare("sqlChunksTile", `SELECT coalesce(min(off) = 0 AND bool_and(len > 0 AND off + len = coalesce(next, $2)), false),
    count(*), coalesce(min(object), '')
FROM (
    SELECT off, len, object, lead(off) OVER (ORDER BY off) AS next
    FROM {schema}.blob_chunks
    WHERE chunks = $1 AND len IS NOT NULL
) c`)

	// sqlPublish is sqlPut (engine/postgres/blob.go) for one chunked
	// value, run after sqlEndUpload in the same transaction: the blob row
	// is inserted naming the chunk set, pinned in the row, with the same
	// row lock; when the key was already stored the staged chunks are
	// deleted (their objects answered, to be deleted after the commit) and
	// the pin goes to pins, after the blob row is locked. Its snapshot is
	// taken after the upload's row was locked, so the discard sees every
	// chunk written. It answers whether it inserted the row.
	sqlPublish = declare("sqlPublish", `WITH b AS (
	INSERT INTO {schema}.blobs AS t (key, size, value, chunks, pin_owner, pin_expiry)
	VALUES (@key, @size, '\x'::bytea, @chunks, @owner, coalesce(@now::timestamptz, now()) + @ttl_us * interval '1 microsecond')
	ON CONFLICT (key) DO UPDATE SET size = t.size WHERE false
	RETURNING 1
), discard AS (
	DELETE FROM {schema}.blob_chunks
	WHERE chunks = @chunks AND NOT EXISTS (SELECT FROM b)
	RETURNING object
), pinned AS (
	INSERT INTO {schema}.pins AS p (key, owner, expiry)
	SELECT @key, @owner, coalesce(@now::timestamptz, now()) + @ttl_us * interval '1 microsecond'
	WHERE (SELECT count(*) FROM b) = 0
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
)
SELECT EXISTS (SELECT FROM b), ARRAY(SELECT object FROM discard WHERE object IS NOT NULL)`)

	// sqlReapUploads ends every upload whose lease lapsed at $1 (NULL:
	// now()), from its expiry instant on, answering their ids; sqlReapChunks then deletes their chunks,
	// answering the objects they named, in a statement of its own, in the
	// same transaction, for the reason sqlDeleteChunks gives: an append
	// holding an upload's row while the reaper waits on it commits a chunk
	// the reaper's older snapshot would miss.
	sqlReapUploads = declare("sqlReapUploads", `DELETE FROM {schema}.blob_uploads WHERE expires_at <= coalesce($1::timestamptz, now()) RETURNING id`)
	sqlReapChunks  = declare("sqlReapChunks", `WITH d AS (DELETE FROM {schema}.blob_chunks WHERE chunks = ANY ($1::bigint[]) RETURNING object)
SELECT object FROM d WHERE object IS NOT NULL`)
	// sqlLapsedUploads reports whether any upload's lease lapsed at $1
	// (the expiry index), so a reap with none to end is one statement,
	// outside a transaction.
	sqlLapsedUploads = declare("sqlLapsedUploads", `SELECT EXISTS (SELECT FROM {schema}.blob_uploads WHERE expires_at <= coalesce($1::timestamptz, now()))`)

	// sqlLockKeys locks the stored ones of the sorted keys $1, in key
	// order, FOR KEY SHARE as a pin does, and answers them: one index
	// probe a key, as sqlPutEdges's lock pass.
	sqlLockKeys = declare("sqlLockKeys", `SELECT key FROM (
	SELECT (SELECT key FROM {schema}.blobs WHERE key = u.k FOR KEY SHARE) AS key FROM unnest($1::text[]) AS u(k) OFFSET 0
) AS l WHERE key IS NOT NULL`)
	// sqlNewChildren answers the children $2 that stored $1 has no edge
	// to, probing the edges' index a child (OFFSET 0, as in sqlPutEdges).
	sqlNewChildren = declare("sqlNewChildren", `SELECT c FROM unnest($2::text[]) AS c
WHERE NOT EXISTS (SELECT FROM {schema}.blob_edges WHERE parent = $1 AND child = c OFFSET 0)`)
	// sqlInsertEdges records that $1 references each of $2, and, once,
	// that the store declared liveness (gc_declared, as sqlPutEdges does).
	sqlInsertEdges = declare("sqlInsertEdges", `WITH edges AS (
	INSERT INTO {schema}.blob_edges (parent, child) SELECT $1, c FROM unnest($2::text[]) AS c ON CONFLICT DO NOTHING
	RETURNING 1
)
INSERT INTO {schema}.gc_declared (id) SELECT true
WHERE EXISTS (SELECT FROM edges) AND NOT EXISTS (SELECT FROM {schema}.gc_declared)
ON CONFLICT DO NOTHING`)

	// sqlReadChunk answers the finished chunk of set $1 holding byte $2:
	// the last one starting at or before it.
	sqlReadChunk = declare("sqlReadChunk", `SELECT off, len, data, object FROM {schema}.blob_chunks
WHERE chunks = $1 AND off <= $2 AND len IS NOT NULL
ORDER BY off DESC
LIMIT 1`)

	sqlGet = declare("sqlGet", `SELECT size, value, chunks, object FROM {schema}.blobs WHERE key = $1`)
)

func (b *blobs) Get(ctx context.Context, key blob.Key) (blob.Stored, error) {
	if err := b.e.check(ctx); err != nil {
		return blob.Stored{}, err
	}
	var row blobRow
	if err := readError(b.e.pool.QueryRow(ctx, b.e.sql(sqlGet), key.String()).Scan(row.dest()...)); err != nil {
		return blob.Stored{}, err
	}
	return row.stored(), nil
}

// blobRow scans a blob row's size, value, chunks and object columns.
type blobRow struct {
	st     blob.Stored
	chunks *int64
	object *string
}

func (r *blobRow) dest() []any { return []any{&r.st.Size, &r.st.Value, &r.chunks, &r.object} }

func (r *blobRow) stored() blob.Stored {
	st := r.st
	switch {
	case r.object != nil:
		st.Object, st.Value = *r.object, nil
	case r.chunks != nil:
		st.Chunks, st.Value = blob.ChunkSet(*r.chunks), nil
	}
	return st
}

// BeginUpload draws random ids until one is free (chunkid.Draw).
func (b *blobs) BeginUpload(ctx context.Context, p blob.BeginUploadParams) (blob.ChunkSet, error) {
	if err := b.e.check(ctx); err != nil {
		return 0, err
	}
	id, err := chunkid.Draw(func(id int64) (bool, error) {
		err := b.e.pool.QueryRow(ctx, b.e.sql(sqlBeginUpload), pgx.StrictNamedArgs{
			"id": id, "lease_us": p.Lease.Microseconds(), "now": nowArg(p.Now), "owner": p.Owner, "state": p.State,
		}).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil // the id is taken
		}
		return err == nil, interpretError(err)
	})
	return blob.ChunkSet(id), err
}

// UploadStatus reads the upload's row.
func (b *blobs) UploadStatus(ctx context.Context, set blob.ChunkSet) (blob.UploadStatus, error) {
	if err := b.e.check(ctx); err != nil {
		return blob.UploadStatus{}, err
	}
	var st blob.UploadStatus
	err := b.e.pool.QueryRow(ctx, b.e.sql(sqlUploadStatus), int64(set)).Scan(&st.Owner, &st.Size, &st.State)
	if errors.Is(err, pgx.ErrNoRows) {
		return blob.UploadStatus{}, errUploadLost
	}
	return st, interpretError(err)
}

// WriteChunk is sqlWriteChunk, run again when it met an unfinished chunk
// committed after its snapshot.
func (b *blobs) WriteChunk(ctx context.Context, p blob.WriteChunkParams) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	if err := chunkid.CheckChunk(p.Off, p.Data); err != nil {
		return err
	}
	args := pgx.StrictNamedArgs{
		"set": int64(p.Set), "off": p.Off, "data": p.Data, "state": p.State, "lease_us": p.Lease.Microseconds(), "now": nowArg(p.Now),
	}
	return b.appendRow(ctx, sqlWriteChunk, p.Set, p.Off, args)
}

// maxReplaceRetries bounds how often an append runs again because a
// writer at the same offset committed an unfinished chunk after the
// append's snapshot was taken.
const maxReplaceRetries = 8

// appendRow runs stmt, sqlWriteChunk or sqlNameChunk, which answer
// whether the upload took the row and the object of the unfinished chunk
// it replaced, deleted here once the statement committed. It runs it
// again (a fresh snapshot) when the insert met an unfinished chunk the
// statement could not see, and tells a lost upload from one of another
// size (uploadMismatch).
func (b *blobs) appendRow(ctx context.Context, stmt *statement, set blob.ChunkSet, off int64, args pgx.StrictNamedArgs) error {
	for attempt := 1; ; attempt++ {
		var took bool
		var replaced *string
		err := b.e.pool.QueryRow(ctx, b.e.sql(stmt), args).Scan(&took, &replaced)
		switch {
		case isChunkKeyViolation(err) && attempt < maxReplaceRetries:
			continue
		case isChunkKeyViolation(err):
			return fmt.Errorf("%w: upload %d: writers at offset %d keep replacing each other's chunk: %w", steaderr.ErrConflict, set, off, interpretError(err))
		case err != nil:
			return interpretError(err)
		case !took:
			return b.uploadMismatch(ctx, set, off)
		}
		if replaced != nil {
			b.e.dropObjects(ctx, []string{*replaced})
		}
		return nil
	}
}

// uploadMismatch is the error of an append at off that the upload set did
// not take: ErrLost when it is gone, else ErrConflict naming its size,
// read in a statement of its own (the append's snapshot may predate the
// writer that moved it).
func (b *blobs) uploadMismatch(ctx context.Context, set blob.ChunkSet, off int64) error {
	st, err := b.UploadStatus(ctx, set)
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: upload %d holds %d bytes: an append at %d must start there (another writer appended first, or the append is out of order)", steaderr.ErrConflict, set, st.Size, off)
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
// upload ends (sqlEndUpload; none: reaped, nothing happens; another size
// than p.Size: nothing happens), its unfinished chunks go, its finished
// ones are checked to cover p.Size bytes exactly (sqlChunksTile; not:
// nothing happens), then the blob row names the one object chunk's object
// (publishObject) or the chunk set (sqlPublish), or, when the key is
// stored already, the chunks are discarded; the key is pinned. Objects no
// row names any more are deleted after the commit.
func (b *blobs) publish(ctx context.Context, p blob.PutParams) (bool, error) {
	now := pgtype.Timestamptz{Time: p.Now, Valid: !p.Now.IsZero()}
	var drop []string
	var inserted bool
	err := b.e.retryTransient(ctx, func() error {
		drop, inserted = nil, false
		tx, err := b.e.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
		var size int64
		err = tx.QueryRow(ctx, b.e.sql(sqlEndUpload), int64(p.Chunks)).Scan(&size)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return errUploadLost
		case err != nil:
			return err
		case size != p.Size:
			return fmt.Errorf("%w: upload %d holds %d bytes, not %d (another writer appended since)", steaderr.ErrConflict, p.Chunks, size, p.Size)
		}
		rows, err := tx.Query(ctx, b.e.sql(sqlDiscardUnfinished), int64(p.Chunks))
		if err != nil {
			return err
		}
		if drop, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		var tiled bool
		var n int64
		var object string
		if err := tx.QueryRow(ctx, b.e.sql(sqlChunksTile), int64(p.Chunks), p.Size).Scan(&tiled, &n, &object); err != nil {
			return err
		}
		if !tiled {
			return fmt.Errorf("%w: the staged chunks of set %d do not cover %d bytes exactly, each once", steaderr.ErrInvalidArgument, p.Chunks, p.Size)
		}
		if n == 1 && object != "" {
			ins, redundant, err := b.publishObject(ctx, tx, p, now, object)
			if err != nil {
				return err
			}
			drop = append(drop, redundant...)
			if err := commit(ctx, tx); err != nil {
				return err
			}
			inserted = ins
			return nil
		}
		children := keyTexts(p.Children)
		if len(children) > 0 {
			if err := b.lockChildren(ctx, tx, p.Key.String(), children); err != nil {
				return err
			}
		}
		var ins bool
		var discarded []string
		if err := tx.QueryRow(ctx, b.e.sql(sqlPublish), pgx.StrictNamedArgs{
			"key": p.Key.String(), "size": p.Size, "chunks": int64(p.Chunks), "owner": p.Owner, "ttl_us": p.TTL.Microseconds(), "now": now,
		}).Scan(&ins, &discarded); err != nil {
			return err
		}
		drop = append(drop, discarded...)
		if len(children) > 0 && !ins {
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
		if err := commit(ctx, tx); err != nil {
			return err
		}
		inserted = ins
		return nil
	})
	if err != nil {
		return false, err
	}
	b.e.dropObjects(ctx, drop)
	return inserted, nil
}

// AbortUpload ends the upload and then deletes its chunks, two statements
// in one transaction (see sqlDeleteChunks), and their objects once it
// committed; an upload already ended keeps its chunks (a published one's
// are its blob's).
func (b *blobs) AbortUpload(ctx context.Context, set blob.ChunkSet) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	var objects []string
	err := b.e.inTx(ctx, func(tx pgx.Tx) error {
		objects = nil
		var size int64
		err := tx.QueryRow(ctx, b.e.sql(sqlEndUpload), int64(set)).Scan(&size)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // ended already
		} else if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, b.e.sql(sqlDeleteChunks), int64(set))
		if err != nil {
			return err
		}
		objects, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return err
	}
	b.e.dropObjects(ctx, objects)
	return nil
}

// ReapUploads ends the lapsed uploads and then deletes their chunks, two
// statements in one transaction (see sqlReapUploads), and their objects
// once it committed. When none has lapsed it sends one read only.
func (b *blobs) ReapUploads(ctx context.Context, p blob.ReapUploadsParams) (int, error) {
	if err := b.e.check(ctx); err != nil {
		return 0, err
	}
	var lapsed bool
	if err := b.e.pool.QueryRow(ctx, b.e.sql(sqlLapsedUploads), nowArg(p.Now)).Scan(&lapsed); err != nil {
		return 0, listError(err)
	}
	if !lapsed {
		return 0, nil
	}
	var ids []int64
	var objects []string
	err := b.e.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, b.e.sql(sqlReapUploads), nowArg(p.Now))
		if err != nil {
			return err
		}
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil || len(ids) == 0 {
			return err
		}
		rows, err = tx.Query(ctx, b.e.sql(sqlReapChunks), ids)
		if err != nil {
			return err
		}
		objects, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return 0, listError(err)
	}
	b.e.dropObjects(ctx, objects)
	return len(ids), nil
}

// ReadChunk reads the finished chunk holding off.
func (b *blobs) ReadChunk(ctx context.Context, set blob.ChunkSet, off int64) (blob.Chunk, error) {
	if err := b.e.check(ctx); err != nil {
		return blob.Chunk{}, err
	}
	var c blob.Chunk
	var data []byte
	var object *string
	err := readError(b.e.pool.QueryRow(ctx, b.e.sql(sqlReadChunk), int64(set), off).Scan(&c.Start, &c.Size, &data, &object))
	if err != nil {
		return blob.Chunk{}, err
	}
	if object != nil {
		c.Object = *object
	} else {
		c.Data = data
	}
	return c, nil
}
