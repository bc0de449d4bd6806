SELECT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".gc_declared)
