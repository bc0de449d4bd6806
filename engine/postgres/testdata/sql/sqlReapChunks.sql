DELETE FROM "St""ead. sch;ema-ñ".blob_chunks WHERE chunks = ANY($1::bigint[])
