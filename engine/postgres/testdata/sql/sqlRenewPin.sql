WITH p AS (
	UPDATE "St""ead. sch;ema-ñ".pins
	SET expiry = greatest(expiry, coalesce($4::timestamptz, now()) + $3 * interval '1 microsecond')
	WHERE key = $1 AND owner = $2 AND expiry > coalesce($4::timestamptz, clock_timestamp())
	RETURNING 1
), i AS (
	UPDATE "St""ead. sch;ema-ñ".blobs
	SET pin_expiry = greatest(pin_expiry, coalesce($4::timestamptz, now()) + $3 * interval '1 microsecond')
	WHERE key = $1 AND pin_owner = $2 AND pin_expiry > coalesce($4::timestamptz, clock_timestamp())
	AND NOT EXISTS (SELECT FROM p)
	RETURNING 1
)
SELECT (SELECT count(*) FROM p) + (SELECT count(*) FROM i)
