SELECT coalesce(max(version), 0) FROM "St""ead. sch;ema-ñ".schema_version
