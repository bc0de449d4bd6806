SELECT EXISTS (SELECT 1 FROM "St""ead. sch;ema-ñ".gc_references($1))
