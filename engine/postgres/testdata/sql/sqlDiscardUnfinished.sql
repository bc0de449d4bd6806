DELETE FROM "St""ead. sch;ema-ñ".blob_chunks WHERE chunks = $1 AND len IS NULL RETURNING object
