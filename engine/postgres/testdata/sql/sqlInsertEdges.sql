WITH edges AS (
	INSERT INTO "St""ead. sch;ema-ñ".blob_edges (parent, child) SELECT $1, c FROM unnest($2::text[]) AS c ON CONFLICT DO NOTHING
	RETURNING 1
)
INSERT INTO "St""ead. sch;ema-ñ".gc_declared (id) SELECT true
WHERE EXISTS (SELECT FROM edges) AND NOT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".gc_declared)
ON CONFLICT DO NOTHING
