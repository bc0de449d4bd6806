WITH d AS (DELETE FROM "St""ead. sch;ema-ñ".blob_chunks WHERE chunks = ANY ($1::bigint[]) RETURNING object)
SELECT object FROM d WHERE object IS NOT NULL
