INSERT INTO "St""ead. sch;ema-ñ".schema_version (version, name) VALUES ($1, $2)
