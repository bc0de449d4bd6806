WITH i AS (
	UPDATE "St""ead. sch;ema-ñ".blobs SET pin_owner = NULL, pin_expiry = NULL
	WHERE key = $1 AND pin_owner = $2 AND pin_expiry > now()
	RETURNING 1
)
DELETE FROM "St""ead. sch;ema-ñ".pins WHERE key = $1 AND owner = $2 AND (SELECT count(*) FROM i) >= 0
