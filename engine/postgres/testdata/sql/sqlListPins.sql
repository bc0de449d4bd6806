SELECT key, owner, max(expiry) FROM (
	SELECT key, owner, expiry FROM "St""ead. sch;ema-ñ".pins
	UNION ALL
	SELECT key, pin_owner, pin_expiry FROM "St""ead. sch;ema-ñ".blobs WHERE pin_expiry > coalesce($1::timestamptz, now())
) p GROUP BY key, owner ORDER BY key, owner
