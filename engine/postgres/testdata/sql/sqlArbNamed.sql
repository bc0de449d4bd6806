SELECT key FROM "St""ead. sch;ema-ñ".refs WHERE key = ANY ($1::text[]) AND NOT weak AND (expiry IS NULL OR expiry > coalesce($2::timestamptz, now()))
UNION SELECT child FROM "St""ead. sch;ema-ñ".blob_edges WHERE child = ANY ($1::text[])
