SELECT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blobs)
