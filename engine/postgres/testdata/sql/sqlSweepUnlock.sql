SELECT pg_advisory_unlock($1), (SELECT count(set_config(n, NULL, false))
	FROM unnest(ARRAY['idle_session_timeout', 'idle_in_transaction_session_timeout']) AS n WHERE current_setting(n, true) IS NOT NULL)
