SELECT l, (SELECT set_config(name, CASE WHEN l THEN $2 ELSE '0' END, false)
	FROM pg_catalog.pg_settings WHERE name = 'idle_session_timeout')
FROM pg_try_advisory_lock($1) AS l
