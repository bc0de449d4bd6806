SELECT token FROM "St""ead. sch;ema-ñ".gc_orphans WHERE id = 1
