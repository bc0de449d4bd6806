SELECT pg_advisory_unlock($1), (SELECT set_config(name, '0', false)
	FROM pg_catalog.pg_settings WHERE name = 'idle_session_timeout')
