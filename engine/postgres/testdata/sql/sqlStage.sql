INSERT INTO "St""ead. sch;ema-ñ".gc_window AS w (key, visible_after) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET visible_after = excluded.visible_after
WHERE w.visible_after IS DISTINCT FROM excluded.visible_after
