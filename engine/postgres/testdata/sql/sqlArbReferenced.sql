SELECT DISTINCT k FROM "St""ead. sch;ema-ñ".gc_referenced($1::text[])
