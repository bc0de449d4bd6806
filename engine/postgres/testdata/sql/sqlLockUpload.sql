SELECT size FROM "St""ead. sch;ema-ñ".blob_uploads WHERE id = $1 FOR NO KEY UPDATE
