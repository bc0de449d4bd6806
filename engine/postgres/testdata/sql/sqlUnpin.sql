DELETE FROM "St""ead. sch;ema-ñ".pins WHERE key = $1 AND owner = $2
