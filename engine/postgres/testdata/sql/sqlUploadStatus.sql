SELECT owner, size, state FROM "St""ead. sch;ema-ñ".blob_uploads WHERE id = $1
