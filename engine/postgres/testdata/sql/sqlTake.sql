DELETE FROM "St""ead. sch;ema-ñ".gc_window WHERE key IN (
	SELECT key FROM "St""ead. sch;ema-ñ".gc_window WHERE visible_after <= coalesce($1::timestamptz, now())
	ORDER BY key LIMIT CASE WHEN $2 > 0 THEN $2 END FOR UPDATE SKIP LOCKED)
RETURNING key
