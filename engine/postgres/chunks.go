package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/steaderr"
)

// The chunked tier (docs/decisions/0011-large-blobs.md): each statement is
// one short autocommit transaction. An upload's row is locked by every
// statement that touches it, so a chunk write, the publish and the reaper
// serialize on it: a chunk write renews the lease the reaper re-checks, and
// a reaped upload accepts no chunk and publishes nothing.
const (
	// sqlBeginUpload takes the sequence's name as a parameter
	// ({schema}.blob_chunk_sets), so no quoting is spliced into a literal.
	sqlBeginUpload = `SELECT nextval($1::regclass)`

	sqlStartUpload = `WITH up AS (
    INSERT INTO {schema}.blob_uploads (id, expires_at)
    VALUES ($1, now() + $4::bigint * interval '1 microsecond')
    RETURNING id
)
INSERT INTO {schema}.blob_chunks (chunks, off, data)
SELECT id, $2, $3 FROM up`

	sqlWriteChunk = `WITH up AS (
    UPDATE {schema}.blob_uploads SET expires_at = now() + $4::bigint * interval '1 microsecond'
    WHERE id = $1
    RETURNING id
)
INSERT INTO {schema}.blob_chunks (chunks, off, data)
SELECT id, $2, $3 FROM up`

	// sqlPublish ends an upload and inserts its blob row in one statement.
	// The row takes the same lock as an inline put's (ON CONFLICT DO
	// UPDATE … WHERE false locks an existing row without writing it);
	// when the key is already stored, the staged chunks are deleted
	// instead. It answers whether the upload was still there.
	sqlPublish = `WITH up AS (
    DELETE FROM {schema}.blob_uploads WHERE id = $3 RETURNING id
), ins AS (
    INSERT INTO {schema}.blobs (key, size, value, chunks)
    SELECT $1, $2, '\x'::bytea, id FROM up
    ON CONFLICT (key) DO UPDATE SET size = excluded.size WHERE false
    RETURNING chunks
), discard AS (
    DELETE FROM {schema}.blob_chunks
    WHERE chunks = (SELECT id FROM up) AND NOT EXISTS (SELECT FROM ins)
)
SELECT EXISTS (SELECT FROM up)`

	// sqlAbortUpload deletes an upload and its chunks; an upload already
	// published has no row and keeps its chunks.
	sqlAbortUpload = `WITH up AS (
    DELETE FROM {schema}.blob_uploads WHERE id = $1 RETURNING id
)
DELETE FROM {schema}.blob_chunks WHERE chunks IN (SELECT id FROM up)`

	sqlReapUploads = `WITH up AS (
    DELETE FROM {schema}.blob_uploads WHERE expires_at < now() RETURNING id
), gone AS (
    DELETE FROM {schema}.blob_chunks WHERE chunks IN (SELECT id FROM up)
)
SELECT count(*) FROM up`

	sqlReadChunk = `SELECT off, data FROM {schema}.blob_chunks
WHERE chunks = $1 AND off <= $2
ORDER BY off DESC
LIMIT 1`

	sqlGet = `SELECT size, value, chunks FROM {schema}.blobs WHERE key = $1`
)

// chunkSQL holds the chunked tier's statements, rendered for the schema.
type chunkSQL struct {
	begin, start, write, publish, abort, reap, read, get string
	// sequence is the chunk set sequence's name, sqlBeginUpload's argument.
	sequence string
}

func (c *chunkSQL) init(e *Engine) {
	c.begin = e.render(sqlBeginUpload)
	c.start = e.render(sqlStartUpload)
	c.sequence = e.ident + ".blob_chunk_sets"
	c.write = e.render(sqlWriteChunk)
	c.publish = e.render(sqlPublish)
	c.abort = e.render(sqlAbortUpload)
	c.reap = e.render(sqlReapUploads)
	c.read = e.render(sqlReadChunk)
	c.get = e.render(sqlGet)
}

func (b *blobs) Get(ctx context.Context, key blob.Key) (blob.Stored, error) {
	if err := b.e.check(ctx); err != nil {
		return blob.Stored{}, err
	}
	var st blob.Stored
	var chunks *int64
	err := interpretError(b.e.pool.QueryRow(ctx, b.chunkSQL.get, key.String()).Scan(&st.Size, &st.Value, &chunks))
	switch {
	case errors.Is(err, errNoSchema):
		return blob.Stored{}, steaderr.ErrNotFound
	case err != nil:
		return blob.Stored{}, err
	case chunks != nil:
		st.Chunks, st.Value = blob.ChunkSet(*chunks), nil
	}
	return st, nil
}

func (b *blobs) BeginUpload(ctx context.Context) (blob.ChunkSet, error) {
	if err := b.e.check(ctx); err != nil {
		return 0, err
	}
	var id int64
	if err := b.e.pool.QueryRow(ctx, b.chunkSQL.begin, b.chunkSQL.sequence).Scan(&id); err != nil {
		return 0, interpretError(err)
	}
	return blob.ChunkSet(id), nil
}

func (b *blobs) WriteChunk(ctx context.Context, set blob.ChunkSet, off int64, data []byte, lease time.Duration) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	query := b.chunkSQL.write
	if off == 0 {
		query = b.chunkSQL.start
	}
	tag, err := b.e.pool.Exec(ctx, query, int64(set), off, data, lease.Microseconds())
	if err != nil {
		return interpretError(err)
	}
	if tag.RowsAffected() == 0 {
		return errUploadLost
	}
	return nil
}

// errUploadLost reports an upload whose lease lapsed and which was reaped.
var errUploadLost = fmt.Errorf("%w: the upload's lease lapsed and its staged chunks were reaped", steaderr.ErrLost)

func (b *blobs) Publish(ctx context.Context, set blob.ChunkSet, key blob.Key, size int64) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	var found bool
	if err := b.e.pool.QueryRow(ctx, b.chunkSQL.publish, key.String(), size, int64(set)).Scan(&found); err != nil {
		return interpretError(err)
	}
	if !found {
		return errUploadLost
	}
	return nil
}

func (b *blobs) AbortUpload(ctx context.Context, set blob.ChunkSet) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	_, err := b.e.pool.Exec(ctx, b.chunkSQL.abort, int64(set))
	return interpretError(err)
}

func (b *blobs) ReapUploads(ctx context.Context) (int, error) {
	if err := b.e.check(ctx); err != nil {
		return 0, err
	}
	var n int
	err := interpretError(b.e.pool.QueryRow(ctx, b.chunkSQL.reap).Scan(&n))
	if errors.Is(err, errNoSchema) {
		return 0, nil
	}
	return n, err
}

func (b *blobs) ReadChunk(ctx context.Context, set blob.ChunkSet, off int64) (int64, []byte, error) {
	if err := b.e.check(ctx); err != nil {
		return 0, nil, err
	}
	var start int64
	var data []byte
	err := interpretError(b.e.pool.QueryRow(ctx, b.chunkSQL.read, int64(set), off).Scan(&start, &data))
	if errors.Is(err, errNoSchema) {
		return 0, nil, steaderr.ErrNotFound
	}
	return start, data, err
}
