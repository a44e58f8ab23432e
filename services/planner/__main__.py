"""`python -m services.planner`: serve the planner REST API (settings from DISTSERVE_PLANNER_* variables)."""

from __future__ import annotations

import uvicorn

from services.common.api_keys import ApiKeys, check_exposure
from services.common.logs import setup_logging
from services.planner.actuation import Actuator
from services.planner.api import create_app
from services.planner.config import PlannerSettings


def serve(settings: PlannerSettings, actuator: Actuator | None = None) -> None:
    check_exposure(settings.host, ApiKeys(settings.admin_key_file), settings.allow_unauthenticated, "planner")
    uvicorn.run(create_app(settings, actuator=actuator), host=settings.host, port=settings.port, log_config=None)


if __name__ == "__main__":
    setup_logging()
    serve(PlannerSettings())
