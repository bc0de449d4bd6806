SELECT coalesce(bool_or(p.expiry > coalesce($2::timestamptz, now())), false)
FROM (SELECT expiry FROM "St""ead. sch;ema-ñ".pins WHERE key = $1 FOR UPDATE) p
