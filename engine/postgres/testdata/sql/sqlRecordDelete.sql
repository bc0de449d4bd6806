DELETE FROM "St""ead. sch;ema-ñ".records WHERE id = $1
