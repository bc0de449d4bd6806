SELECT size, value, chunks FROM "St""ead. sch;ema-ñ".blobs WHERE key = $1
