WITH p AS (DELETE FROM "St""ead. sch;ema-ñ".pins WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM "St""ead. sch;ema-ñ".pins WHERE expiry <= coalesce($1::timestamptz, now()) LIMIT $2 FOR UPDATE SKIP LOCKED)) RETURNING 1),
r AS (DELETE FROM "St""ead. sch;ema-ñ".refs WHERE name = ANY (ARRAY(
	SELECT name FROM "St""ead. sch;ema-ñ".refs WHERE expiry <= coalesce($1::timestamptz, now()) LIMIT $2 FOR UPDATE SKIP LOCKED)) RETURNING 1)
SELECT (SELECT count(*) FROM p), (SELECT count(*) FROM r)
