-- Values over the inline limit are stored in chunks
-- (docs/decisions/0011-large-blobs.md). A chunked value's blobs row has an
-- empty value and names its chunk set in chunks; NULL means inline.
ALTER TABLE blobs ADD COLUMN chunks INTEGER;

-- The last chunk set id drawn. A put draws one before it stores anything;
-- ids are never reused, so a reader of a deleted value cannot reach another
-- value's chunks.
CREATE TABLE blob_chunk_sets (last INTEGER NOT NULL);
INSERT INTO blob_chunk_sets (last) VALUES (0);

-- A chunk set being written, from its first chunk until it is published or
-- aborted. It is reaped once expires_at (Unix nanoseconds) passes without a
-- chunk write renewing it.
CREATE TABLE blob_uploads (
    id         INTEGER PRIMARY KEY,
    expires_at INTEGER NOT NULL
);
CREATE INDEX blob_uploads_expires_at ON blob_uploads (expires_at);

-- One chunk: the bytes of its set's value starting at off.
CREATE TABLE blob_chunks (
    chunks INTEGER NOT NULL,
    off    INTEGER NOT NULL,
    data   BLOB    NOT NULL,
    PRIMARY KEY (chunks, off)
);

-- Whatever deletes a chunked blob's row deletes its chunks in the same
-- transaction.
CREATE TRIGGER blobs_drop_chunks AFTER DELETE ON blobs
    WHEN OLD.chunks IS NOT NULL
BEGIN
    DELETE FROM blob_chunks WHERE chunks = OLD.chunks;
END;
