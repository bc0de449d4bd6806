UPDATE "St""ead. sch;ema-ñ".gc_lease SET expiry = now() + $3 * interval '1 microsecond'
WHERE name = $1 AND holder = $2 AND expiry > now()
