SELECT s FROM "St""ead. sch;ema-ñ".gc_references($1) AS s
