WITH up AS (
    DELETE FROM "St""ead. sch;ema-ñ".blob_uploads WHERE expires_at < now() RETURNING id
), gone AS (
    DELETE FROM "St""ead. sch;ema-ñ".blob_chunks WHERE chunks IN (SELECT id FROM up)
)
SELECT count(*) FROM up
