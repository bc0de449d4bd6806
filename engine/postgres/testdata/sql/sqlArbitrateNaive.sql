WITH pause AS (SELECT pg_advisory_xact_lock_shared($3::bigint))
DELETE FROM "St""ead. sch;ema-ñ".blobs b WHERE key = ANY ($1::text[])
AND EXISTS (SELECT FROM pause)
AND coalesce(b.pin_expiry <= coalesce($2::timestamptz, now()), true)
AND NOT EXISTS (SELECT 1 FROM "St""ead. sch;ema-ñ".pins p WHERE p.key = b.key AND p.expiry > coalesce($2::timestamptz, now()))
AND NOT EXISTS (SELECT 1 FROM "St""ead. sch;ema-ñ".refs r WHERE r.key = b.key AND NOT r.weak AND (r.expiry IS NULL OR r.expiry > coalesce($2::timestamptz, now())))
AND NOT EXISTS (SELECT 1 FROM "St""ead. sch;ema-ñ".blob_edges e WHERE e.child = b.key)
AND NOT EXISTS (SELECT 1 FROM "St""ead. sch;ema-ñ".gc_referenced(ARRAY[b.key]))
RETURNING key, size
