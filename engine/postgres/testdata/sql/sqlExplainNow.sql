SELECT coalesce($1::timestamptz, now())
