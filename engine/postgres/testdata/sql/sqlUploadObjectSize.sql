UPDATE "St""ead. sch;ema-ñ".blob_uploads SET object_size = $1 WHERE id = $2 AND object = $3
