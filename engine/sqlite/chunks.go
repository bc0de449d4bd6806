package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/internal/chunkid"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/steaderr"
)

// The chunked tier (docs/decisions/0011-large-blobs.md) and its durable
// uploads (docs/decisions/0045-durable-uploads.md). Writes run on the
// single writer connection, each in its own short transaction, so appends,
// publishing and reaping never interleave; reads use the reader pool, one
// statement each. A chunk is committed when it is a data chunk (object
// NULL) or an object chunk written whole (len set); an object chunk whose
// len is NULL is unfinished: no part of the value, replaced by the next
// append at its offset, deleted with its set.
const (
	// sqlBeginUpload starts an upload under the random id ?1, unless that
	// id is taken: by a live upload, or by a published set (which holds
	// chunks and no upload).
	sqlBeginUpload = `INSERT INTO blob_uploads (id, expires_at, owner, size, state) SELECT ?1, ?2, ?3, 0, ?4
WHERE NOT EXISTS (SELECT 1 FROM blob_chunks WHERE chunks = ?1) ON CONFLICT (id) DO NOTHING`
	sqlUploadStatus = `SELECT owner, size, state FROM blob_uploads WHERE id = ?`
	sqlUploadSize   = `SELECT size FROM blob_uploads WHERE id = ?`
	// sqlUploadAppended commits an append's size, state and lease;
	// sqlUploadAppendAt does so only when the upload's size is ?5, where
	// the append starts.
	sqlUploadAppended = `UPDATE blob_uploads SET size = ?1, state = ?2, expires_at = ?3 WHERE id = ?4`
	sqlUploadAppendAt = sqlUploadAppended + ` AND size = ?5`
	// sqlDropUnfinished deletes the unfinished object chunk at (?1, ?2),
	// if any, answering its object.
	sqlDropUnfinished = `DELETE FROM blob_chunks WHERE chunks = ?1 AND off = ?2 AND object IS NOT NULL AND len IS NULL RETURNING object`
	sqlInsertChunk    = `INSERT INTO blob_chunks (chunks, off, data) VALUES (?, ?, ?)`
	// sqlChunkSpans lists the chunks of a set in order, without their
	// bytes: length() of a column does not read a blob's content, and a
	// data chunk's object and len are NULL, known from the record's header
	// (where length() under a window function reads every chunk whole).
	sqlChunkSpans = `SELECT off, coalesce(len, length(data)), object, object IS NOT NULL AND len IS NULL FROM blob_chunks WHERE chunks = ? ORDER BY off`
	// sqlSetObjects answers the objects of set ?1's chunks, finished or
	// not.
	sqlSetObjects        = `SELECT object FROM blob_chunks WHERE chunks = ? AND object IS NOT NULL`
	sqlEndUpload         = `DELETE FROM blob_uploads WHERE id = ?`
	sqlPublishBlob       = `INSERT INTO blobs (key, size, value, chunks) VALUES (?, ?, x'', ?) ON CONFLICT (key) DO NOTHING`
	sqlPublishObject     = `INSERT INTO blobs (key, size, value, object) VALUES (?, ?, x'', ?) ON CONFLICT (key) DO NOTHING`
	sqlDeleteChunks      = `DELETE FROM blob_chunks WHERE chunks = ?`
	sqlDropAllUnfinished = `DELETE FROM blob_chunks WHERE chunks = ? AND object IS NOT NULL AND len IS NULL`
	sqlReapObjects       = `SELECT object FROM blob_chunks WHERE chunks IN (SELECT id FROM blob_uploads WHERE expires_at <= ?1) AND object IS NOT NULL`
	sqlReapChunks        = `DELETE FROM blob_chunks WHERE chunks IN (SELECT id FROM blob_uploads WHERE expires_at <= ?)`
	sqlReapUploads       = `DELETE FROM blob_uploads WHERE expires_at <= ?`
	// sqlReadChunk answers the committed chunk at or before ?2.
	sqlReadChunk = `SELECT off, data, object, len FROM blob_chunks WHERE chunks = ?1 AND off <= ?2 AND (object IS NULL OR len IS NOT NULL)
ORDER BY off DESC LIMIT 1`
	sqlGet = `SELECT size, value, chunks, object FROM blobs WHERE key = ?`
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
	var row blobRow
	if err := s.QueryRowContext(ctx, key.String()).Scan(row.dest()...); err != nil {
		return blob.Stored{}, readError(ctx, err)
	}
	return row.stored(), nil
}

// blobRow scans a blob row's size, value, chunks and object columns.
type blobRow struct {
	st     blob.Stored
	chunks sql.NullInt64
	object sql.NullString
}

// dest scans into *[]byte copies: the caller owns the bytes.
func (r *blobRow) dest() []any { return []any{&r.st.Size, &r.st.Value, &r.chunks, &r.object} }

func (r *blobRow) stored() blob.Stored {
	st := r.st
	switch {
	case r.object.Valid:
		st.Object, st.Value = r.object.String, nil
	case r.chunks.Valid:
		st.Chunks, st.Value = blob.ChunkSet(r.chunks.Int64), nil
	case st.Value == nil:
		st.Value = []byte{} // the driver reads an empty blob as nil
	}
	return st
}

// BeginUpload draws random ids until one is free (chunkid.Draw).
func (b *blobs) BeginUpload(ctx context.Context, p blob.BeginUploadParams) (blob.ChunkSet, error) {
	var id int64
	err := b.writeTx(ctx, func(tx *sql.Tx) (err error) {
		expires := clock.OrNow(p.Now).Add(p.Lease).UnixNano()
		id, err = chunkid.Draw(func(id int64) (bool, error) {
			return changed(ctx, tx, sqlBeginUpload, id, expires, p.Owner, p.State)
		})
		return err
	})
	return blob.ChunkSet(id), err
}

func (b *blobs) UploadStatus(ctx context.Context, set blob.ChunkSet) (blob.UploadStatus, error) {
	if err := b.e.check(ctx); err != nil {
		return blob.UploadStatus{}, err
	}
	var st blob.UploadStatus
	err := b.e.reader.QueryRowContext(ctx, sqlUploadStatus, int64(set)).Scan(&st.Owner, &st.Size, &st.State)
	if err = readError(ctx, err); errors.Is(err, steaderr.ErrNotFound) {
		return blob.UploadStatus{}, errUploadLost
	}
	return st, err
}

// appendAt checks, in tx, that the upload set is live (else
// errUploadLost) and holds off bytes, so that an append at off may
// commit; another size is an error wrapping steaderr.ErrConflict naming
// it.
func appendAt(ctx context.Context, tx *sql.Tx, set blob.ChunkSet, off int64) error {
	size, err := uploadSize(ctx, tx, set)
	if err == nil && size != off {
		err = fmt.Errorf("%w: upload %d holds %d bytes: an append starts there, not at %d (another writer appended first)", steaderr.ErrConflict, set, size, off)
	}
	return err
}

// uploadSize reads the live upload set's size in tx; errUploadLost when
// there is none.
func uploadSize(ctx context.Context, tx *sql.Tx, set blob.ChunkSet) (int64, error) {
	var size int64
	err := tx.QueryRowContext(ctx, sqlUploadSize, int64(set)).Scan(&size)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, errUploadLost
	}
	return size, err
}

// dropUnfinished deletes the unfinished object chunk at (set, off), in
// tx, and returns its object ("" for none), to delete once tx commits.
func dropUnfinished(ctx context.Context, tx *sql.Tx, set blob.ChunkSet, off int64) (string, error) {
	names, err := queryNames(ctx, tx, sqlDropUnfinished, int64(set), off)
	if err != nil || len(names) == 0 {
		return "", err
	}
	return names[0], nil
}

// WriteChunk appends a data chunk, with the upload's new size, state and
// lease, in one write transaction; an unfinished object chunk at its
// offset is replaced, its object deleted once the append commits.
func (b *blobs) WriteChunk(ctx context.Context, p blob.WriteChunkParams) error {
	if err := chunkid.CheckChunk(p.Off, p.Data); err != nil {
		return err
	}
	var replaced string
	err := b.writeTx(ctx, func(tx *sql.Tx) (err error) {
		expires := clock.OrNow(p.Now).Add(p.Lease).UnixNano()
		appended, err := changed(ctx, tx, sqlUploadAppendAt, p.Off+int64(len(p.Data)), p.State, expires, int64(p.Set), p.Off)
		switch {
		case err != nil:
			return err
		case !appended:
			if err := appendAt(ctx, tx, p.Set, p.Off); err != nil {
				return err // lost, or another writer appended first
			}
			return errUploadLost
		}
		if b.e.tier != nil {
			// Only a tier's uploads have object chunks, unfinished or not.
			if replaced, err = dropUnfinished(ctx, tx, p.Set, p.Off); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, sqlInsertChunk, int64(p.Set), p.Off, p.Data)
		return err
	})
	if err == nil && replaced != "" {
		b.e.dropObjects(ctx, []string{replaced})
	}
	return err
}

// span is one chunk of a set, as sqlChunkSpans lists it.
type span struct {
	off, size  int64
	object     string
	unfinished bool
}

// chunkSpans lists set's chunks in offset order, in tx.
func chunkSpans(ctx context.Context, tx *sql.Tx, set blob.ChunkSet) ([]span, error) {
	rows, err := tx.QueryContext(ctx, sqlChunkSpans, int64(set))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var spans []span
	for rows.Next() {
		var s span
		var size sql.NullInt64
		var object sql.NullString
		if err := rows.Scan(&s.off, &size, &object, &s.unfinished); err != nil {
			return nil, err
		}
		s.size, s.object = size.Int64, object.String
		spans = append(spans, s)
	}
	return spans, rows.Err()
}

// publish stores the chunked value p names and its pin in one write
// transaction: the upload must be live and hold p.Size bytes, its
// committed chunks must cover them exactly (else nothing happens), the
// upload ends, and the blob row names its one object chunk's object (the
// chunk row goes) or else the chunk set, unless the key was already
// stored, in which case the chunks are deleted. Unfinished chunks are
// deleted in any case; every object of a chunk row deleted is deleted
// once the transaction commits.
func (b *blobs) publish(ctx context.Context, p blob.PutParams) (bool, error) {
	putPin, err := b.putPin.get(ctx)
	if err != nil {
		return false, interpretError(ctx, err)
	}
	var doomed []string
	var inserted bool
	err = b.writeTx(ctx, func(tx *sql.Tx) error {
		doomed = nil
		size, err := uploadSize(ctx, tx, p.Chunks)
		if err != nil {
			return err
		}
		if size != p.Size {
			return fmt.Errorf("%w: upload %d holds %d bytes, not the %d to publish (another writer appended since)", steaderr.ErrConflict, p.Chunks, size, p.Size)
		}
		spans, err := chunkSpans(ctx, tx, p.Chunks)
		if err != nil {
			return err
		}
		var t chunkid.Tiling
		var committed []span
		var unfinished []string
		for _, s := range spans {
			if s.unfinished {
				unfinished = append(unfinished, s.object)
				continue
			}
			t.Add(s.off, s.size)
			committed = append(committed, s)
		}
		if !t.Covers(p.Size) {
			return fmt.Errorf("%w: the committed chunks of set %d do not cover %d bytes exactly, each once", steaderr.ErrInvalidArgument, p.Chunks, p.Size)
		}
		if _, err := tx.ExecContext(ctx, sqlEndUpload, int64(p.Chunks)); err != nil {
			return err
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
		whole := len(committed) == 1 && committed[0].object != ""
		if whole {
			inserted, err = changed(ctx, tx, sqlPublishObject, p.Key.String(), p.Size, committed[0].object)
		} else {
			inserted, err = changed(ctx, tx, sqlPublishBlob, p.Key.String(), p.Size, int64(p.Chunks))
		}
		if err != nil {
			return err
		}
		doomed = unfinished
		switch {
		case whole && inserted:
			_, err = tx.ExecContext(ctx, sqlDeleteChunks, int64(p.Chunks))
		case inserted:
			if len(unfinished) > 0 {
				_, err = tx.ExecContext(ctx, sqlDropAllUnfinished, int64(p.Chunks))
			}
		default: // the key was stored: its chunks are redundant
			for _, s := range committed {
				if s.object != "" {
					doomed = append(doomed, s.object)
				}
			}
			_, err = tx.ExecContext(ctx, sqlDeleteChunks, int64(p.Chunks))
		}
		if err != nil {
			return err
		}
		expiry := clock.OrNow(p.Now).Add(p.TTL).UnixMicro()
		_, err = tx.StmtContext(ctx, putPin).ExecContext(ctx, p.Key.String(), p.Owner, expiry)
		return err
	})
	if err != nil {
		return false, err
	}
	b.e.dropObjects(ctx, doomed)
	return inserted, nil
}

func (b *blobs) AbortUpload(ctx context.Context, set blob.ChunkSet) error {
	var objects []string
	err := b.writeTx(ctx, func(tx *sql.Tx) (err error) {
		objects = nil
		// An upload already published has no row and keeps its chunks.
		found, err := changed(ctx, tx, sqlEndUpload, int64(set))
		if err != nil || !found {
			return err
		}
		if objects, err = queryNames(ctx, tx, sqlSetObjects, int64(set)); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, sqlDeleteChunks, int64(set))
		return err
	})
	if err == nil {
		b.e.dropObjects(ctx, objects)
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

func (b *blobs) ReadChunk(ctx context.Context, set blob.ChunkSet, off int64) (blob.Chunk, error) {
	if err := b.e.check(ctx); err != nil {
		return blob.Chunk{}, err
	}
	s, err := b.readChunk.get(ctx)
	if err != nil {
		return blob.Chunk{}, readError(ctx, err)
	}
	var c blob.Chunk
	var object sql.NullString
	var size sql.NullInt64
	if err := s.QueryRowContext(ctx, int64(set), off).Scan(&c.Start, &c.Data, &object, &size); err != nil {
		return blob.Chunk{}, readError(ctx, err)
	}
	if object.Valid {
		c.Object, c.Size, c.Data = object.String, size.Int64, nil
	} else {
		c.Size = int64(len(c.Data))
	}
	return c, nil
}
