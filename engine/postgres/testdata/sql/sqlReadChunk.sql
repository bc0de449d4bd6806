SELECT off, data FROM "St""ead. sch;ema-ñ".blob_chunks
WHERE chunks = $1 AND off <= $2
ORDER BY off DESC
LIMIT 1
