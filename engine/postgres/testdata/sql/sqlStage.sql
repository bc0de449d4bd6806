INSERT INTO "St""ead. sch;ema-ñ".gc_window AS w (key, visible_after)
SELECT k, coalesce($2::timestamptz, now()) FROM unnest($1::text[]) AS k
WHERE EXISTS (SELECT FROM "St""ead. sch;ema-ñ".blobs b WHERE b.key = k)
ON CONFLICT (key) DO UPDATE SET visible_after = excluded.visible_after
WHERE w.visible_after IS DISTINCT FROM excluded.visible_after
