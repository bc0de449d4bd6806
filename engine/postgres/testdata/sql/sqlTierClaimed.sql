UPDATE "St""ead. sch;ema-ñ".bytes_tier SET claimed = true WHERE id = 1
