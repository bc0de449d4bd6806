WITH b AS (
	SELECT key FROM "St""ead. sch;ema-ñ".blobs WHERE key = $1 FOR KEY SHARE
), p AS (
	INSERT INTO "St""ead. sch;ema-ñ".pins AS p (key, owner, expiry)
	SELECT key, $2, coalesce($4::timestamptz, now()) + $3 * interval '1 microsecond' FROM b
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
	RETURNING 1
)
SELECT count(*) FROM b
