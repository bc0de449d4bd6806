SELECT key FROM (
	SELECT (SELECT key FROM "St""ead. sch;ema-ñ".blobs WHERE key = u.k FOR KEY SHARE) AS key FROM unnest($1::text[]) AS u(k) OFFSET 0
) AS l WHERE key IS NOT NULL
