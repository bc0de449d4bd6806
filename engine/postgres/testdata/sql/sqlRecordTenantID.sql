SELECT id FROM "St""ead. sch;ema-ñ".record_tenants WHERE grp = $1 AND name IS NOT DISTINCT FROM $2::text
