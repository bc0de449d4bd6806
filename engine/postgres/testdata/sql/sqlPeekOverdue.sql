SELECT key FROM "St""ead. sch;ema-ñ".gc_window WHERE visible_after <= coalesce($1::timestamptz, now())
ORDER BY visible_after LIMIT $2
