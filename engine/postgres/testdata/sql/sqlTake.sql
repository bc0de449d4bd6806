DELETE FROM "St""ead. sch;ema-ñ".gc_window WHERE key = ANY (ARRAY(
	SELECT key FROM "St""ead. sch;ema-ñ".gc_window WHERE visible_after <= coalesce($1::timestamptz, now())
	ORDER BY visible_after LIMIT $2 FOR UPDATE SKIP LOCKED))
RETURNING key
