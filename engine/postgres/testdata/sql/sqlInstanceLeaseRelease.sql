DELETE FROM "St""ead. sch;ema-ñ".gc_lease WHERE name = $1 AND holder = $2
