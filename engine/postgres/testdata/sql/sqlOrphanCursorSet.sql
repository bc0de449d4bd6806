UPDATE "St""ead. sch;ema-ñ".gc_orphans SET token = $1 WHERE id = 1
