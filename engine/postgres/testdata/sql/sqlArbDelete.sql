WITH w AS (DELETE FROM "St""ead. sch;ema-ñ".gc_window WHERE key = ANY ($1::text[])),
p AS (DELETE FROM "St""ead. sch;ema-ñ".pins WHERE key = ANY ($1::text[])),
r AS (DELETE FROM "St""ead. sch;ema-ñ".refs WHERE key = ANY ($1::text[])),
e AS (DELETE FROM "St""ead. sch;ema-ñ".blob_edges WHERE parent = ANY ($1::text[]))
DELETE FROM "St""ead. sch;ema-ñ".blobs WHERE key = ANY ($1::text[])
RETURNING coalesce(object, '')
