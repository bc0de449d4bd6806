SELECT (SELECT count(*) FROM "St""ead. sch;ema-ñ".pins WHERE expiry <= coalesce($1::timestamptz, now())),
(SELECT count(*) FROM "St""ead. sch;ema-ñ".refs WHERE expiry <= coalesce($1::timestamptz, now()))
