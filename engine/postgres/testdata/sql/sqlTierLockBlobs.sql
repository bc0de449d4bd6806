LOCK TABLE "St""ead. sch;ema-ñ".blobs IN SHARE MODE
