SELECT EXISTS (SELECT 1 FROM "St""ead. sch;ema-ñ".blobs WHERE key = $1)
