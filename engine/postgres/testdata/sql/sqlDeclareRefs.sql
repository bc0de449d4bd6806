INSERT INTO "St""ead. sch;ema-ñ".gc_declared (id)
SELECT true WHERE NOT EXISTS (SELECT FROM "St""ead. sch;ema-ñ".gc_declared) AND EXISTS (SELECT FROM "St""ead. sch;ema-ñ".refs WHERE name = ANY ($1::text[]))
ON CONFLICT DO NOTHING
