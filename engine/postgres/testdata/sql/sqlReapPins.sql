DELETE FROM "St""ead. sch;ema-ñ".pins WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM "St""ead. sch;ema-ñ".pins WHERE expiry <= coalesce($1::timestamptz, now()) LIMIT $2 FOR UPDATE SKIP LOCKED))
