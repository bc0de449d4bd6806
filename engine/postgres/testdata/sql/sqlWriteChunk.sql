WITH up AS (
    UPDATE "St""ead. sch;ema-ñ".blob_uploads SET expires_at = coalesce(@now::timestamptz, now()) + @lease_us::bigint * interval '1 microsecond'
    WHERE id = @set
    RETURNING id
), ins AS (
    INSERT INTO "St""ead. sch;ema-ñ".blob_chunks (chunks, off, data)
    SELECT id, @off, @data FROM up
    WHERE NOT EXISTS (
        SELECT FROM (
            SELECT off, octet_length(data) AS len FROM "St""ead. sch;ema-ñ".blob_chunks
            WHERE chunks = @set AND off <= @off
            ORDER BY off DESC
            LIMIT 1
        ) prev
        WHERE prev.off + prev.len > @off
    )
    AND NOT EXISTS (
        SELECT FROM "St""ead. sch;ema-ñ".blob_chunks
        WHERE chunks = @set AND off > @off AND off < @off + octet_length(@data::bytea)
    )
    RETURNING 1
)
SELECT EXISTS (SELECT FROM ins), EXISTS (SELECT FROM up)
