WITH w AS (DELETE FROM "St""ead. sch;ema-ñ".gc_window WHERE key = ANY ($1::text[])),
p AS (DELETE FROM "St""ead. sch;ema-ñ".pins WHERE key = ANY ($1::text[])),
r AS (DELETE FROM "St""ead. sch;ema-ñ".refs WHERE key = ANY ($1::text[]) AND name = ANY (ARRAY(
	SELECT name FROM "St""ead. sch;ema-ñ".refs WHERE key = ANY ($1::text[]) ORDER BY name FOR UPDATE))),
e AS (DELETE FROM "St""ead. sch;ema-ñ".blob_edges WHERE parent = ANY ($1::text[]))
DELETE FROM "St""ead. sch;ema-ñ".blobs AS b WHERE key = ANY ($1::text[])
RETURNING CASE
    WHEN b.object IS NOT NULL THEN ARRAY[b.object]
    WHEN b.chunks IS NOT NULL THEN ARRAY(SELECT c.object FROM "St""ead. sch;ema-ñ".blob_chunks c WHERE c.chunks = b.chunks AND c.object IS NOT NULL)
    ELSE '{}'::text[]
END
