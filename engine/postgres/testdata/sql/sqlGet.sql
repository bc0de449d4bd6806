SELECT size, value, chunks, object FROM "St""ead. sch;ema-ñ".blobs WHERE key = $1
