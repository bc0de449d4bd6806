SELECT schema_name, table_name, column_name FROM "St""ead. sch;ema-ñ".gc_sources ORDER BY 1, 2, 3
