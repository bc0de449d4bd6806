SELECT key, size FROM "St""ead. sch;ema-ñ".blobs WHERE key > $1 ORDER BY key LIMIT $2
