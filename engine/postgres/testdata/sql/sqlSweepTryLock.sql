SELECT l, (SELECT count(set_config(n, CASE WHEN l THEN $2::text END, false))
	FROM unnest(ARRAY['idle_session_timeout', 'idle_in_transaction_session_timeout']) AS n WHERE current_setting(n, true) IS NOT NULL)
FROM pg_try_advisory_lock($1) AS l
