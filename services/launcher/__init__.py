"""`distserve up`: the whole stack as local processes (Redis, kvxfer, instances, router, planner)."""
