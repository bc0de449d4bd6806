SELECT set_config('plan_cache_mode', 'force_generic_plan', true)
