SELECT size FROM "St""ead. sch;ema-ñ".blobs WHERE key = $1
