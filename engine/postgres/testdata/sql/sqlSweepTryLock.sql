SELECT l, (SELECT count(set_config(name, CASE WHEN l THEN $2 ELSE reset_val END, false))
	FROM pg_catalog.pg_settings WHERE name IN ('idle_session_timeout', 'idle_in_transaction_session_timeout'))
FROM pg_try_advisory_lock($1) AS l
