-- Durable uploads (docs/decisions/0045-durable-uploads.md): an upload's
-- row holds its owner, its size (the bytes its committed chunks hold) and
-- its state (the running hash), committed with each chunk; a chunk is
-- bytes in its row or, on a bytes tier, an object the row names. len is a
-- chunk's size, NULL only for an object chunk whose object is not known
-- to be written whole yet (its writer may still be at it, or dead): such
-- a chunk holds no committed byte and is replaced by the next append at
-- its offset. The new columns of blob_uploads have constant defaults and
-- those of blob_chunks none, so adding them rewrites nothing.
ALTER TABLE blob_uploads
    ADD COLUMN owner text NOT NULL DEFAULT '',
    ADD COLUMN size bigint NOT NULL DEFAULT 0,
    ADD COLUMN state bytea;
ALTER TABLE blob_chunks ADD COLUMN object text, ADD COLUMN len bigint;

-- Every chunk so far is bytes in its row. The update rewrites each chunk's
-- row, not its bytes: they are out of line (TOAST) and unchanged.
UPDATE blob_chunks SET len = octet_length(data);

-- An upload in flight that named an object (one per upload, before this
-- migration) keeps it as its chunk at offset 0, whole once its size was
-- recorded. One that somehow has a row at offset 0 as well leaves its
-- object to the orphan sweep.
INSERT INTO blob_chunks (chunks, off, data, object, len)
SELECT id, 0, '\x'::bytea, object, object_size FROM blob_uploads WHERE object IS NOT NULL
ON CONFLICT (chunks, off) DO NOTHING;

-- An upload's size is where its committed chunks stop tiling it from 0
-- (the chunks of an upload written out of order before this migration
-- may leave a gap), and the chunk rows past it go: an upload's finished
-- chunks are [0, size). Uploads begun before this migration record no
-- state: they can be aborted or reaped, not continued.
UPDATE blob_uploads u SET size = s.size
FROM (
    SELECT chunks, max(off + len) AS size
    FROM (
        SELECT chunks, off, len,
               coalesce(sum(len) OVER (PARTITION BY chunks ORDER BY off ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
        FROM blob_chunks
        WHERE chunks IN (SELECT id FROM blob_uploads) AND len IS NOT NULL
    ) c
    WHERE off = before
    GROUP BY chunks
) s
WHERE u.id = s.chunks;
DELETE FROM blob_chunks c USING blob_uploads u
WHERE c.chunks = u.id AND c.off >= u.size AND c.len IS NOT NULL;

-- Dropping the columns drops their index (blob_uploads_object).
ALTER TABLE blob_uploads DROP COLUMN object, DROP COLUMN object_size;

-- The orphan sweep looks chunk objects up by name; the index holds only
-- the rows that name one.
CREATE UNIQUE INDEX blob_chunks_object ON blob_chunks (object) WHERE object IS NOT NULL;
ALTER TABLE blob_chunks ADD CONSTRAINT blob_chunks_len_check CHECK (len IS NOT NULL OR object IS NOT NULL);
