package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/internal/chunkid"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/steaderr"
)

// The chunked tier (docs/decisions/0011-large-blobs.md). Writes run on the
// single writer connection, each in its own short transaction, so chunk
// writes, publishing and reaping never interleave; reads use the reader
// pool, one statement each.
const (
	// sqlBeginUpload starts an upload under the random id ?1, unless that
	// id is taken: by a live upload, or by a published set (which holds
	// chunks and no upload).
	sqlBeginUpload = `INSERT INTO blob_uploads (id, expires_at) SELECT ?1, ?2 WHERE NOT EXISTS (SELECT 1 FROM blob_chunks WHERE chunks = ?1) ON CONFLICT (id) DO NOTHING`
	sqlUploadLive  = `SELECT EXISTS (SELECT 1 FROM blob_uploads WHERE id = ?)`
	// sqlRenewUpload extends a lease only once a third of it has passed, so
	// most chunk writes change no upload row.
	sqlRenewUpload = `UPDATE blob_uploads SET expires_at = ?1 WHERE id = ?2 AND expires_at < ?3`
	// sqlInsertChunk stores a chunk only while its upload exists (a
	// reaped upload takes no chunk) and only if it overlaps no chunk of
	// the set: neither the one starting at or before it nor one starting
	// inside it.
	sqlInsertChunk = `INSERT INTO blob_chunks (chunks, off, data) SELECT ?1, ?2, ?3
WHERE EXISTS (SELECT 1 FROM blob_uploads WHERE id = ?1)
AND NOT EXISTS (
	SELECT 1 FROM (SELECT off, length(data) AS len FROM blob_chunks WHERE chunks = ?1 AND off <= ?2 ORDER BY off DESC LIMIT 1)
	WHERE off + len > ?2
)
AND NOT EXISTS (SELECT 1 FROM blob_chunks WHERE chunks = ?1 AND off > ?2 AND off < ?2 + length(?3))`
	// sqlChunkSpans lists the chunks of a set in order, without their
	// bytes: length() of a column does not read a blob's content, where
	// length() under a window function reads every chunk whole.
	sqlChunkSpans   = `SELECT off, length(data) FROM blob_chunks WHERE chunks = ? ORDER BY off`
	sqlEndUpload    = `DELETE FROM blob_uploads WHERE id = ?`
	sqlPublishBlob  = `INSERT INTO blobs (key, size, value, chunks) VALUES (?, ?, x'', ?) ON CONFLICT (key) DO NOTHING`
	sqlDeleteChunks = `DELETE FROM blob_chunks WHERE chunks = ?`
	sqlReapChunks   = `DELETE FROM blob_chunks WHERE chunks IN (SELECT id FROM blob_uploads WHERE expires_at <= ?)`
	sqlReapUploads  = `DELETE FROM blob_uploads WHERE expires_at <= ?`
	sqlReadChunk    = `SELECT off, data FROM blob_chunks WHERE chunks = ? AND off <= ? ORDER BY off DESC LIMIT 1`
	sqlGet          = `SELECT size, value, chunks, object FROM blobs WHERE key = ?`
)

// errUploadLost reports a chunk set with no live upload: never begun,
// published, aborted, or reaped once its lease lapsed.
var errUploadLost = fmt.Errorf("%w: the chunk set has no upload (never begun, published, aborted, or reaped once its lease lapsed)", steaderr.ErrLost)

// writeTx runs fn in a write transaction on the writer connection, once
// the engine is checked open.
func (b *blobs) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	return b.e.writeTx(ctx, fn)
}

// changed runs one statement in tx and reports whether it changed a row.
func changed(ctx context.Context, tx *sql.Tx, query string, args ...any) (bool, error) {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

func (b *blobs) Get(ctx context.Context, key blob.Key) (blob.Stored, error) {
	if err := b.e.check(ctx); err != nil {
		return blob.Stored{}, err
	}
	s, err := b.get.get(ctx)
	if err != nil {
		return blob.Stored{}, readError(ctx, err)
	}
	var st blob.Stored
	var chunks sql.NullInt64
	var object sql.NullString
	// Scan into *[]byte copies: the caller owns the bytes.
	if err := s.QueryRowContext(ctx, key.String()).Scan(&st.Size, &st.Value, &chunks, &object); err != nil {
		return blob.Stored{}, readError(ctx, err)
	}
	switch {
	case object.Valid:
		st.Object, st.Value = object.String, nil
	case chunks.Valid:
		st.Chunks, st.Value = blob.ChunkSet(chunks.Int64), nil
	case st.Value == nil:
		st.Value = []byte{} // the driver reads an empty blob as nil
	}
	return st, nil
}

// BeginUpload draws random ids until one is free (chunkid.Draw).
func (b *blobs) BeginUpload(ctx context.Context, p blob.BeginUploadParams) (blob.ChunkSet, error) {
	var id int64
	err := b.writeTx(ctx, func(tx *sql.Tx) (err error) {
		expires := clock.OrNow(p.Now).Add(p.Lease).UnixNano()
		id, err = chunkid.Draw(func(id int64) (bool, error) {
			return changed(ctx, tx, sqlBeginUpload, id, expires)
		})
		return err
	})
	return blob.ChunkSet(id), err
}

// WriteChunk stores a chunk only while its upload's row exists, which
// only BeginUpload creates: an ended upload takes no chunk.
func (b *blobs) WriteChunk(ctx context.Context, p blob.WriteChunkParams) error {
	set, off, data, lease := p.Set, p.Off, p.Data, p.Lease
	if err := chunkid.CheckSpan(off, len(data)); err != nil {
		return err
	}
	return b.writeTx(ctx, func(tx *sql.Tx) error {
		now := clock.OrNow(p.Now)
		if _, err := tx.ExecContext(ctx, sqlRenewUpload, now.Add(lease).UnixNano(), int64(set), now.Add(lease*2/3).UnixNano()); err != nil {
			return err
		}
		stored, err := changed(ctx, tx, sqlInsertChunk, int64(set), off, data)
		if err != nil || stored {
			return err
		}
		var live bool
		if err := tx.QueryRowContext(ctx, sqlUploadLive, int64(set)).Scan(&live); err != nil {
			return err
		}
		if !live {
			return errUploadLost
		}
		return fmt.Errorf("%w: a chunk of %d bytes at offset %d overlaps a chunk of set %d", steaderr.ErrConflict, len(data), off, set)
	})
}

// publish stores the chunked value p names and its pin in one write
// transaction: the upload ends (none: reaped, nothing happens), its chunks
// must cover p.Size bytes exactly (not: nothing happens), the blob
// row names the chunk set unless the key was already stored, in which case
// the staged chunks are deleted, and the pin is upserted as a put's is.
func (b *blobs) publish(ctx context.Context, p blob.PutParams) error {
	putPin, err := b.putPin.get(ctx)
	if err != nil {
		return interpretError(ctx, err)
	}
	var redundant string
	err = b.writeTx(ctx, func(tx *sql.Tx) error {
		object, objectSize, err := uploadObject(ctx, tx, p.Chunks)
		if err != nil {
			return err
		}
		found, err := changed(ctx, tx, sqlEndUpload, int64(p.Chunks))
		if err != nil {
			return err
		}
		if !found {
			return errUploadLost
		}
		tiled := false
		if object == "" {
			if tiled, err = chunksTile(ctx, tx, p.Chunks, p.Size); err != nil {
				return err
			}
		}
		if object == "" && !tiled {
			return fmt.Errorf("%w: the staged chunks of set %d do not cover %d bytes exactly, each once", steaderr.ErrInvalidArgument, p.Chunks, p.Size)
		}
		if len(p.Children) > 0 {
			refused, err := addEdges(ctx, tx, p.Key.String(), keyTexts(p.Children))
			if err == nil {
				err = refused
			}
			if err != nil {
				return err
			}
		}
		inserted := false
		if object != "" {
			redundant, err = publishObject(ctx, tx, p, object, objectSize)
		} else {
			inserted, err = changed(ctx, tx, sqlPublishBlob, p.Key.String(), p.Size, int64(p.Chunks))
		}
		if err != nil {
			return err
		}
		if object == "" && !inserted {
			if _, err := tx.ExecContext(ctx, sqlDeleteChunks, int64(p.Chunks)); err != nil {
				return err
			}
		}
		expiry := clock.OrNow(p.Now).Add(p.TTL).UnixMicro()
		_, err = tx.StmtContext(ctx, putPin).ExecContext(ctx, p.Key.String(), p.Owner, expiry)
		return err
	})
	if err == nil && redundant != "" {
		b.e.dropObjects(ctx, []string{redundant})
	}
	return err
}

func (b *blobs) AbortUpload(ctx context.Context, set blob.ChunkSet) error {
	var object string
	err := b.writeTx(ctx, func(tx *sql.Tx) (err error) {
		if object, _, err = uploadObject(ctx, tx, set); err != nil {
			return err
		}
		// An upload already published has no row and keeps its chunks.
		found, err := changed(ctx, tx, sqlEndUpload, int64(set))
		if err != nil || !found {
			return err
		}
		_, err = tx.ExecContext(ctx, sqlDeleteChunks, int64(set))
		return err
	})
	if err == nil && object != "" {
		b.e.dropObjects(ctx, []string{object})
	}
	return err
}

func (b *blobs) ReapUploads(ctx context.Context, p blob.ReapUploadsParams) (int, error) {
	var n int64
	var objects []string
	err := b.writeTx(ctx, func(tx *sql.Tx) (err error) {
		now := clock.OrNow(p.Now).UnixNano()
		if objects, err = queryNames(ctx, tx, sqlReapObjects, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlReapChunks, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, sqlReapUploads, now)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err == nil {
		b.e.dropObjects(ctx, objects)
	}
	return int(n), listError(ctx, err)
}

func (b *blobs) ReadChunk(ctx context.Context, set blob.ChunkSet, off int64) (int64, []byte, error) {
	if err := b.e.check(ctx); err != nil {
		return 0, nil, err
	}
	s, err := b.readChunk.get(ctx)
	if err != nil {
		return 0, nil, readError(ctx, err)
	}
	var start int64
	var data []byte
	if err := s.QueryRowContext(ctx, int64(set), off).Scan(&start, &data); err != nil {
		return 0, nil, readError(ctx, err)
	}
	return start, data, nil
}

// chunksTile reports whether the chunks of set cover [0, size) exactly,
// each byte once (chunkid.Tiling).
func chunksTile(ctx context.Context, tx *sql.Tx, set blob.ChunkSet, size int64) (bool, error) {
	rows, err := tx.QueryContext(ctx, sqlChunkSpans, int64(set))
	if err != nil {
		return false, err
	}
	defer rows.Close()
	var t chunkid.Tiling
	for rows.Next() {
		var off, n int64
		if err := rows.Scan(&off, &n); err != nil {
			return false, err
		}
		t.Add(off, n)
	}
	return t.Covers(size), rows.Err()
}
