SELECT src FROM "St""ead. sch;ema-ñ".gc_referenced(ARRAY[$1]) ORDER BY src
