SELECT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blob_chunks WHERE chunks = $1 AND off = $2 AND object = $3 AND len IS NULL)
