INSERT INTO "St""ead. sch;ema-ñ".blob_edges (parent, child) SELECT $1, c FROM unnest($2::text[]) AS c ON CONFLICT DO NOTHING
