WITH up AS (
    UPDATE "St""ead. sch;ema-ñ".blob_uploads
    SET size = @off + octet_length(@data::bytea), state = @state,
        expires_at = coalesce(@now::timestamptz, now()) + @lease_us::bigint * interval '1 microsecond'
    WHERE id = @set AND size = @off
    RETURNING id
), unfinished AS (
    DELETE FROM "St""ead. sch;ema-ñ".blob_chunks
    WHERE chunks = (SELECT id FROM up) AND off = @off AND len IS NULL
    RETURNING object
), ins AS (
    INSERT INTO "St""ead. sch;ema-ñ".blob_chunks (chunks, off, data, len)
    SELECT id, @off, @data, octet_length(@data::bytea) FROM up
    WHERE (SELECT count(*) FROM unfinished) >= 0
)
SELECT EXISTS (SELECT FROM up), (SELECT object FROM unfinished)
