DELETE FROM "St""ead. sch;ema-ñ".gc_sources WHERE schema_name = $1 AND table_name = $2 AND column_name = $3
