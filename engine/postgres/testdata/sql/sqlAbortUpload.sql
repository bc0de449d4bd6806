WITH up AS (
    DELETE FROM "St""ead. sch;ema-ñ".blob_uploads WHERE id = $1 RETURNING id
)
DELETE FROM "St""ead. sch;ema-ñ".blob_chunks WHERE chunks IN (SELECT id FROM up)
