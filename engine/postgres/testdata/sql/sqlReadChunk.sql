SELECT off, len, data, object FROM "St""ead. sch;ema-ñ".blob_chunks
WHERE chunks = $1 AND off <= $2 AND len IS NOT NULL
ORDER BY off DESC
LIMIT 1
