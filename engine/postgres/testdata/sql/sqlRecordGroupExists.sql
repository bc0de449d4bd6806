SELECT EXISTS (SELECT 1 FROM "St""ead. sch;ema-ñ".record_groups WHERE name = $1)
