DELETE FROM "St""ead. sch;ema-ñ".gc_lease WHERE name = 'sweep' AND holder = $1
