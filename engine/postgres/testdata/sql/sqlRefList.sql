SELECT name, key, version, annotation, expiry FROM "St""ead. sch;ema-ñ".refs
WHERE name >= $1 AND ($2::text IS NULL OR name < $2) AND name > $3
AND (expiry IS NULL OR expiry > coalesce($4::timestamptz, now()))
ORDER BY name LIMIT $5
