WITH up AS (
    UPDATE "St""ead. sch;ema-ñ".blob_uploads SET expires_at = now() + $4::bigint * interval '1 microsecond'
    WHERE id = $1
    RETURNING id
), ins AS (
    INSERT INTO "St""ead. sch;ema-ñ".blob_chunks (chunks, off, data)
    SELECT id, $2, $3 FROM up
    WHERE NOT EXISTS (
        SELECT FROM (
            SELECT off, octet_length(data) AS len FROM "St""ead. sch;ema-ñ".blob_chunks
            WHERE chunks = $1 AND off <= $2
            ORDER BY off DESC
            LIMIT 1
        ) prev
        WHERE prev.off + prev.len > $2
    )
    AND NOT EXISTS (
        SELECT FROM "St""ead. sch;ema-ñ".blob_chunks
        WHERE chunks = $1 AND off > $2 AND off < $2 + octet_length($3::bytea)
    )
    RETURNING 1
)
SELECT EXISTS (SELECT FROM ins), EXISTS (SELECT FROM up)
