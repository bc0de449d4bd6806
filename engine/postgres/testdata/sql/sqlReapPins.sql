DELETE FROM "St""ead. sch;ema-ñ".pins WHERE ctid IN (
	SELECT ctid FROM "St""ead. sch;ema-ñ".pins WHERE expiry <= coalesce($1::timestamptz, now()) FOR UPDATE SKIP LOCKED)
