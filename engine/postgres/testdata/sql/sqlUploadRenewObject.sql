UPDATE "St""ead. sch;ema-ñ".blob_uploads SET expires_at = greatest(expires_at, now() + $1::bigint * interval '1 microsecond')
WHERE id = $2 AND object = $3
