INSERT INTO "St""ead. sch;ema-ñ".record_groups (name) VALUES ($1) ON CONFLICT DO NOTHING
