SELECT store_id, bucket, claimed FROM "St""ead. sch;ema-ñ".bytes_tier WHERE id = 1
