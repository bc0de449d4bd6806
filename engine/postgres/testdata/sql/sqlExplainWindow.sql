SELECT visible_after FROM "St""ead. sch;ema-ñ".gc_window WHERE key = $1
