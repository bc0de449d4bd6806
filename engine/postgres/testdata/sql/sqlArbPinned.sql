SELECT key FROM (
	SELECT key, expiry FROM "St""ead. sch;ema-ñ".pins WHERE key = ANY ($1::text[]) ORDER BY key, owner FOR UPDATE
) p GROUP BY key HAVING bool_or(expiry > coalesce($2::timestamptz, now()))
