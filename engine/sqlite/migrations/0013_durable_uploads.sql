-- Durable uploads (docs/decisions/0045-durable-uploads.md). An upload's row
-- holds who may continue it, its size (its committed chunks hold all of
-- [0, size)) and its state (the Store's running hash), committed with each
-- chunk.
ALTER TABLE blob_uploads ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE blob_uploads ADD COLUMN size INTEGER NOT NULL DEFAULT 0;
ALTER TABLE blob_uploads ADD COLUMN state BLOB;

-- A chunk's bytes are its data or, on the bytes tier, the object it names
-- (its data empty). len is an object chunk's size, NULL until the object is
-- written whole: such an unfinished chunk is no part of the value, and is
-- replaced by the next append at its offset. A data chunk's len is NULL and
-- its size length(data): SQLite reads a column stored after a large blob by
-- walking the blob's overflow pages, and a blob's length from the record's
-- header.
ALTER TABLE blob_chunks ADD COLUMN object TEXT;
ALTER TABLE blob_chunks ADD COLUMN len INTEGER;
CREATE UNIQUE INDEX blob_chunks_object ON blob_chunks (object) WHERE object IS NOT NULL;

-- An upload that named its whole object keeps it as its one chunk, at
-- offset 0 (unfinished unless object_size was set). No upload of an earlier
-- release has both chunk rows and an object; were there one, its object
-- would be left to the orphan sweep.
INSERT INTO blob_chunks (chunks, off, data, object, len)
SELECT u.id, 0, x'', u.object, u.object_size FROM blob_uploads u
WHERE u.object IS NOT NULL AND NOT EXISTS (SELECT 1 FROM blob_chunks c WHERE c.chunks = u.id);
-- An upload's size is where its committed chunks stop tiling [0, size)
-- (an earlier release took chunks at any offset); its chunks past a gap
-- go.
WITH RECURSIVE tiled (chunks, stop) AS (
    SELECT c.chunks, c.off + coalesce(c.len, length(c.data)) FROM blob_chunks c
    JOIN blob_uploads u ON u.id = c.chunks
    WHERE c.off = 0 AND (c.object IS NULL OR c.len IS NOT NULL)
    UNION ALL
    SELECT c.chunks, c.off + coalesce(c.len, length(c.data)) FROM blob_chunks c
    JOIN tiled t ON c.chunks = t.chunks AND c.off = t.stop
    WHERE c.object IS NULL OR c.len IS NOT NULL
)
UPDATE blob_uploads SET size = coalesce((SELECT max(stop) FROM tiled WHERE tiled.chunks = blob_uploads.id), 0);
DELETE FROM blob_chunks
WHERE chunks IN (SELECT id FROM blob_uploads)
AND off >= (SELECT size FROM blob_uploads WHERE id = blob_chunks.chunks)
AND (object IS NULL OR len IS NOT NULL);
DROP INDEX blob_uploads_object;
ALTER TABLE blob_uploads DROP COLUMN object;
ALTER TABLE blob_uploads DROP COLUMN object_size;
