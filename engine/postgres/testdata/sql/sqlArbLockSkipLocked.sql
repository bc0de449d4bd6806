SELECT key, size, coalesce(pin_expiry > coalesce($2::timestamptz, now()), false)
FROM "St""ead. sch;ema-ñ".blobs WHERE key = ANY ($1::text[]) ORDER BY key FOR UPDATE SKIP LOCKED
