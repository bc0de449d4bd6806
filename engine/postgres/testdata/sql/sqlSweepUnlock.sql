SELECT pg_advisory_unlock($1), (SELECT count(set_config(name, reset_val, false))
	FROM pg_catalog.pg_settings WHERE name IN ('idle_session_timeout', 'idle_in_transaction_session_timeout'))
