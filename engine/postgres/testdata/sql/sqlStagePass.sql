SELECT last_key, started FROM "St""ead. sch;ema-ñ".gc_pass
