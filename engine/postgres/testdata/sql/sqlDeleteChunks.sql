WITH d AS (DELETE FROM "St""ead. sch;ema-ñ".blob_chunks WHERE chunks = $1 RETURNING object)
SELECT object FROM d WHERE object IS NOT NULL
