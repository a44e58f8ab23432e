"""The planner with its Redis away: 503 with Retry-After (capacity missing for a while), never a 500."""

from __future__ import annotations

import redis
from fastapi.testclient import TestClient

from services.common.net import free_port
from services.planner.api import create_app
from services.planner.config import PlannerSettings


def test_the_planner_answers_503_while_its_redis_is_away() -> None:
    away = redis.Redis(port=free_port(), socket_connect_timeout=0.5, socket_timeout=0.5)  # nothing listens
    with TestClient(create_app(PlannerSettings(workers=1), away)) as api:
        for method, path, body in [("GET", "/v1/workload", None), ("POST", "/v1/replan", {"model": "opt-13b"}), ("GET", "/v1/plan", None)]:
            reply = api.request(method, path, json=body)
            assert reply.status_code == 503, (path, reply.status_code, reply.text)
            assert reply.headers["retry-after"] == "1" and "redis" in reply.json()["detail"]
        assert api.get("/healthz").status_code == 200
