UPDATE "St""ead. sch;ema-ñ".pins
SET expiry = greatest(expiry, coalesce($4::timestamptz, now()) + $3 * interval '1 microsecond')
WHERE key = $1 AND owner = $2 AND expiry > coalesce($4::timestamptz, clock_timestamp())
