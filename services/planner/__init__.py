"""The planner: latency model, simulator, placement search (DistServe Alg. 1/2), REST API and replanning."""
