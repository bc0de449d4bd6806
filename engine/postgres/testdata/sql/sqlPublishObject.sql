WITH b AS (
	INSERT INTO "St""ead. sch;ema-ñ".blobs AS t (key, size, value, object, pin_owner, pin_expiry)
	VALUES ($1, $2, '\x'::bytea, $3, $4, coalesce($6::timestamptz, now()) + $5 * interval '1 microsecond')
	ON CONFLICT (key) DO UPDATE SET size = t.size WHERE false
	RETURNING 1
), p AS (
	INSERT INTO "St""ead. sch;ema-ñ".pins AS p (key, owner, expiry)
	SELECT $1, $4, coalesce($6::timestamptz, now()) + $5 * interval '1 microsecond'
	WHERE (SELECT count(*) FROM b) = 0
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
)
SELECT EXISTS (SELECT FROM b)
