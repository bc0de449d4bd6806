UPDATE "St""ead. sch;ema-ñ".records SET lease_expiry = coalesce($1::timestamptz, now()) + $2::interval
WHERE id = $3 AND grp = $4 AND lease_owner = $5 AND lease_incarnation = $6
RETURNING lease_expiry
