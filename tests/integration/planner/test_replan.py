"""The replanning loop over a real Redis: a steady workload keeps the plan, a shifted one replaces and applies it."""

import asyncio
import json
import time

from fastapi.testclient import TestClient

from services.common.registry import PLAN_KEY
from services.planner.actuation import InstanceSpec, RunningInstance
from services.planner.api import create_app
from services.planner.config import PlannerSettings
from services.planner.replan import Replanner, shift
from services.planner.schemas import ClusterBody, ReplanRequest


class Recorder:
    """An actuator that runs instances in memory."""

    def __init__(self) -> None:
        self.instances: dict[str, InstanceSpec] = {}

    def running(self) -> list[RunningInstance]:
        return [RunningInstance(i, spec) for i, spec in self.instances.items()]

    def start(self, spec: InstanceSpec) -> str:
        name = f"i{len(self.instances)}-{time.monotonic_ns()}"
        self.instances[name] = spec
        return name

    def drain(self, instance_id: str) -> None:
        pass

    def stop(self, instance_id: str) -> None:
        del self.instances[instance_id]


def _replanner(rds, actuator=None) -> Replanner:
    request = ReplanRequest(model="opt-13b", cluster=ClusterBody(nodes=2, gpus_per_node=4), num_requests=300)
    return Replanner(rds, request, actuator, threshold=0.25, min_records=50, workers=1)


def test_shift_names_what_moved():
    before = {"rate": 2.0, "prompt_mean": 800, "output_mean": 100, "arrival_cv": 1.0}
    assert shift(before, {**before, "rate": 2.2}, 0.25) == []
    assert shift(before, {**before, "rate": 4.0, "output_mean": 300}, 0.25) == ["rate", "output_mean"]


def test_loop_replans_only_on_a_significant_shift_and_applies_the_plan(rds, record):
    actuator = Recorder()
    replanner = _replanner(rds, actuator)
    assert replanner.check() is None  # no records yet
    later = record(rds, 200, rate=1.0, prompt=200, output=50, start=time.time() - 400)
    first, actuation = replanner.check()
    assert json.loads(rds.get(PLAN_KEY)) == first
    assert len(actuation.started) == first["num_gpus"] and len(actuator.instances) == len(first["instances"])
    later = record(rds, 40, rate=1.0, prompt=200, output=50, start=later)
    assert replanner.check() is None  # more of the same workload: the plan stands
    record(rds, 600, rate=6.0, prompt=1500, output=50, start=later)
    second, actuation = replanner.check()
    assert second["workload"]["rate"] > 2 * first["workload"]["rate"]
    assert second["goodput"] >= second["workload"]["rate"] * 0.9
    assert len(actuator.instances) == len(second["instances"])
    assert json.loads(rds.get(PLAN_KEY)) == second


async def test_background_loop_stores_a_plan_and_stops(rds, record):
    record(rds, 100, rate=1.0, prompt=300, output=30, start=time.time() - 100)
    stop = asyncio.Event()
    task = asyncio.create_task(_replanner(rds).run(0.05, stop))
    for _ in range(400):
        if rds.get(PLAN_KEY):
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 30)
    assert json.loads(rds.get(PLAN_KEY))["workload"]["count"] == 100


def test_replan_endpoint_applies_the_plan_through_the_actuator(rds, record):
    actuator = Recorder()
    record(rds, 200, rate=2.0, prompt=400, output=60, start=time.time() - 100)
    with TestClient(create_app(PlannerSettings(workers=1), rds, actuator)) as api:
        body = {"model": "opt-13b", "cluster": {"nodes": 1, "gpus_per_node": 4}, "num_requests": 300}
        plan = api.post("/v1/replan", json=body).json()
    assert len(plan["actuation"]["started"]) == len(plan["instances"]) == len(actuator.instances)
    assert {spec.role for spec in actuator.instances.values()} == {"prefill", "decode"}


def test_replanning_plans_with_the_stacks_fitted_model_and_records_it(rds, record):
    from services.common.registry import MODEL_KEY
    from services.planner.hardware import shipped_model
    from services.planner.shapes import load_shape

    record(rds, 200, rate=1.0, prompt=200, output=50, start=time.time() - 400)
    seeded, _ = _replanner(rds).check()
    assert seeded["latency_model"]["source"] == "shipped:a100-80gb"
    slow = shipped_model("a100-80gb", load_shape("opt-13b")).at(1).prefill  # served prefills 4x the profile's
    fitted = {"c0": slow.c0 * 4, "per_token": slow.per_token * 4, "per_sq": slow.per_sq * 4}
    rds.set(MODEL_KEY, json.dumps({"fitted_at": 1.0, "kinds": {"prefill@cuda:0": {
        "role": "prefill", "device": "cuda:0", "prefill": fitted, "decode": None,
        "window": {"prefill_steps": 50, "decode_steps": 0}}}}))
    plan, _ = _replanner(rds).check()
    assert plan["latency_model"]["source"].startswith("fitted at 1: prefill from prefill@cuda:0 (50 steps)")
    assert plan["latency_model"]["coefficients"]["1"]["prefill"] == fitted
    assert json.loads(rds.get(PLAN_KEY))["latency_model"] == plan["latency_model"]
    assert plan["goodput_per_gpu"] < seeded["goodput_per_gpu"]


def test_a_replanner_that_launches_plans_only_launchable_layouts(rds, record, monkeypatch):
    """With an actuator, what is planned is launched: the search keeps a mixture-of-experts model's experts within
    each instance's TP ranks (the engine has no DP attention); without one, every layout is planned."""
    asked = []

    def run_plan(req, workers, fit):
        asked.append(req.launchable)
        raise ValueError("stop here")

    monkeypatch.setattr("services.planner.replan.run_plan", run_plan)
    record(rds, 100, rate=1.0, prompt=300, output=30, start=time.time() - 100)
    for actuator in (Recorder(), None):
        try:
            _replanner(rds, actuator).check()
        except ValueError:
            pass
    assert asked[0] is True and asked[-1] is False
