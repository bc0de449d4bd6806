INSERT INTO "St""ead. sch;ema-ñ".record_tenants (grp, name) VALUES ($1, $2) ON CONFLICT DO NOTHING
