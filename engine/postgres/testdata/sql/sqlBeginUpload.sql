INSERT INTO "St""ead. sch;ema-ñ".blob_uploads (id, expires_at)
SELECT $1, coalesce($3::timestamptz, now()) + $2::bigint * interval '1 microsecond'
WHERE NOT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blob_chunks WHERE chunks = $1)
ON CONFLICT (id) DO NOTHING
RETURNING id
