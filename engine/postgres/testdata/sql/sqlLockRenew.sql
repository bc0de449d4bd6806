UPDATE "St""ead. sch;ema-ñ".locks SET expiry = coalesce($4::timestamptz, now()) + $5::interval
WHERE name = $1 AND owner = $2 AND token = $3
RETURNING expiry
