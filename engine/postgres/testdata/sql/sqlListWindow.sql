SELECT key, visible_after FROM "St""ead. sch;ema-ñ".gc_window ORDER BY key
