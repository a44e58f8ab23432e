"""Deployment: compose files for a placement and the planner's compose actuator (DESIGN §10)."""
