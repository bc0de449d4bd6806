WITH up AS (
    UPDATE "St""ead. sch;ema-ñ".blob_uploads SET expires_at = now() + $4::bigint * interval '1 microsecond'
    WHERE id = $1
    RETURNING id
)
INSERT INTO "St""ead. sch;ema-ñ".blob_chunks (chunks, off, data)
SELECT id, $2, $3 FROM up
