WITH named AS (
    UPDATE "St""ead. sch;ema-ñ".blob_uploads SET object = $1
    WHERE id = $2 AND object IS NULL AND NOT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blob_chunks WHERE chunks = $2)
    RETURNING 1
)
SELECT EXISTS (SELECT FROM named), EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blob_uploads WHERE id = $2)
