WITH up AS (
    INSERT INTO "St""ead. sch;ema-ñ".blob_uploads (id, expires_at)
    SELECT $1, now() + $4::bigint * interval '1 microsecond'
    WHERE NOT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blob_chunks WHERE chunks = $1)
    RETURNING id
), ins AS (
    INSERT INTO "St""ead. sch;ema-ñ".blob_chunks (chunks, off, data)
    SELECT id, $2, $3 FROM up
    RETURNING 1
)
SELECT EXISTS (SELECT FROM ins), EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blob_uploads WHERE id = $1)
