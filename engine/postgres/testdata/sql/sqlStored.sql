SELECT a.n, a.bytes, p.n, p.bytes
FROM (SELECT count(*), coalesce(sum(size), 0)::bigint FROM "St""ead. sch;ema-ñ".blobs) AS a (n, bytes),
(SELECT count(s), coalesce(sum(s), 0)::bigint
 FROM (SELECT (SELECT b.size FROM "St""ead. sch;ema-ñ".blobs b WHERE b.key = w.key) FROM "St""ead. sch;ema-ñ".gc_window w OFFSET 0) AS ws (s)) AS p (n, bytes)
