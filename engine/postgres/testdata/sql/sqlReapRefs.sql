DELETE FROM "St""ead. sch;ema-ñ".refs WHERE name = ANY (ARRAY(
	SELECT name FROM "St""ead. sch;ema-ñ".refs WHERE expiry <= coalesce($1::timestamptz, now()) LIMIT $2 FOR UPDATE SKIP LOCKED))
