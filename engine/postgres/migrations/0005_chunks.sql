-- Values over the inline limit are stored in chunks
-- (docs/decisions/0011-large-blobs.md). A chunked value's blobs row has an
-- empty value and names its chunk set in chunks; NULL means inline.
ALTER TABLE blobs ADD COLUMN chunks bigint;

-- Chunk set ids. A put draws one before it stores anything, so a put that
-- fails knows what to clean up. Ids are never reused, so a reader of a
-- deleted value cannot reach another value's chunks.
CREATE SEQUENCE blob_chunk_sets;

-- A chunk set being written, from its first chunk until it is published
-- (the statement that inserts the blob row deletes this one) or aborted.
-- It is reaped once expires_at passes without a chunk write renewing it.
CREATE TABLE blob_uploads (
    id         bigint PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
CREATE INDEX blob_uploads_expires_at ON blob_uploads (expires_at);

-- One chunk: the bytes of its set's value starting at off. A read finds the
-- chunk holding an offset as the last one starting at or before it.
CREATE TABLE blob_chunks (
    chunks bigint NOT NULL,
    off    bigint NOT NULL,
    data   bytea  NOT NULL,
    PRIMARY KEY (chunks, off)
);
-- As for inline values: out of line, never compressed.
ALTER TABLE blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

-- Whatever deletes a chunked blob's row (Delete, a GC sweep) deletes its
-- chunks in the same transaction.
CREATE FUNCTION blobs_drop_chunks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DELETE FROM %I.blob_chunks WHERE chunks = $1', TG_TABLE_SCHEMA) USING OLD.chunks;
    RETURN NULL;
END
$$;
CREATE TRIGGER blobs_drop_chunks AFTER DELETE ON blobs
    FOR EACH ROW WHEN (OLD.chunks IS NOT NULL) EXECUTE FUNCTION blobs_drop_chunks();
