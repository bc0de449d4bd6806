DELETE FROM "St""ead. sch;ema-ñ".blob_uploads WHERE id = $1 RETURNING size
