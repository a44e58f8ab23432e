"""`distserve planner --compose-out DIR`: a replan for the recorded workload rewrites the compose files in DIR."""

import time
from pathlib import Path

import yaml
from fastapi.testclient import TestClient

from services.cli import build_parser
from services.deploy.cli import compose_actuator
from services.planner.api import create_app
from services.planner.config import PlannerSettings


def test_replan_writes_the_compose_files_of_the_new_plan(rds, record, tmp_path: Path) -> None:
    args = build_parser().parse_args(["planner", "--compose-out", str(tmp_path)])
    record(rds, 200, rate=2.0, prompt=300, output=40, start=time.time() - 200)
    with TestClient(create_app(PlannerSettings(workers=1), rds, actuator=compose_actuator(args))) as api:
        reply = api.post("/v1/replan", json={"model": "opt-13b", "num_requests": 300,
                                             "cluster": {"nodes": 1, "gpus_per_node": 8}})
    assert reply.status_code == 200, reply.text
    plan = reply.json()
    services = yaml.safe_load((tmp_path / "docker-compose.node0.yml").read_text())["services"]
    workers = sorted(name for name in services if name.startswith(("prefill-", "decode-")))
    assert len(workers) == len(plan["instances"]) == len(plan["actuation"]["started"])
    assert sorted(plan["actuation"]["started"]) == workers
