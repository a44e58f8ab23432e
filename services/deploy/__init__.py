"""Deployment: compose files for a placement and the planner's compose actuator (docs/architecture.md §10)."""
