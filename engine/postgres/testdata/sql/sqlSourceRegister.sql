INSERT INTO "St""ead. sch;ema-ñ".gc_sources (schema_name, table_name, column_name) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING
