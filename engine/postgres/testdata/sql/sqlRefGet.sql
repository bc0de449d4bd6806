SELECT name, key, version, annotation, expiry, weak FROM "St""ead. sch;ema-ñ".refs
WHERE name = $1 AND (expiry IS NULL OR expiry > coalesce($2::timestamptz, now()))
