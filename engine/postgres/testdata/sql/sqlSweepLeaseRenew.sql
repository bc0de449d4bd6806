UPDATE "St""ead. sch;ema-ñ".gc_lease SET expiry = now() + $2 * interval '1 microsecond'
WHERE name = 'sweep' AND holder = $1 AND expiry > now()
