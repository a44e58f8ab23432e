"""The planner REST API through FastAPI's in-process TestClient (the app's routes, no socket) with a real Redis."""

import json
import time

import pytest

from services.common.registry import PLAN_KEY

PLAN = {"model": "opt-13b", "hardware": "a100-80gb", "cluster": {"nodes": 1, "gpus_per_node": 4},
        "workload": {"name": "chatbot"}, "slo": {"ttft": 0.2, "tpot": 0.1, "attainment": 0.9},
        "algorithm": "high-affinity", "num_requests": 300}


def test_plan_answers_the_placement_and_stores_it(api, rds):
    plan = api.post("/v1/plan", json=PLAN).json()
    assert (plan["prefill"]["tp"], plan["prefill"]["pp"], plan["decode"]["tp"]) == (2, 1, 1)
    assert plan["num_gpus"] <= 4 and plan["goodput_per_gpu"] > 1.0 and plan["search_seconds"] > 0
    assert plan["prefill"]["goodput"] > 0 and plan["decode"]["goodput"] > 0
    gpus = [(i["node"], g) for i in plan["instances"] for g in i["gpus"]]
    assert len(gpus) == len(set(gpus)) == plan["num_gpus"]
    assert api.get("/v1/plan").json() == plan
    assert json.loads(rds.get(PLAN_KEY)) == plan
    metrics = api.get("/metrics").text
    assert 'distserve_planner_plans_total{source="plan"} 1.0' in metrics
    assert api.get("/healthz").json() == {"status": "ok"}


def test_plan_for_a_rate_replicates(api):
    plan = api.post("/v1/plan", json={**PLAN, "cluster": {"nodes": 2, "gpus_per_node": 4}, "rate": 8}).json()
    assert plan["meets_rate"] is True
    assert plan["prefill"]["replicas"] * plan["prefill"]["goodput"] >= 8
    assert plan["decode"]["replicas"] * plan["decode"]["goodput"] >= 8


def test_simulate_reports_attainment_and_latency_percentiles(api):
    body = {"model": "opt-13b", "hardware": "a100-80gb", "cluster": {"nodes": 1, "gpus_per_node": 4},
            "placement": {"prefill": {"tp": 2, "pp": 1, "replicas": 1}, "decode": {"tp": 1, "pp": 1, "replicas": 1}},
            "workload": {"name": "chatbot"}, "num_requests": 500, "seed": 1, "slo": {"ttft": 0.2, "tpot": 0.1}}
    light = api.post("/v1/simulate", json={**body, "rate": 2}).json()
    heavy = api.post("/v1/simulate", json={**body, "rate": 12}).json()
    assert light["attainment"] > 0.9 > heavy["attainment"]
    for key in ("ttft", "tpot"):
        s = light[key]
        assert 0 < s["p50"] <= s["p90"] <= s["p99"] and s["mean"] > 0
    assert heavy["ttft"]["mean"] > light["ttft"]["mean"]


@pytest.mark.parametrize("change, status, names", [
    ({"model": None}, 422, "model"),
    ({"slo": {"ttft": -1}}, 422, "ttft"),
    ({"algorithm": "sideways"}, 422, "algorithm"),
    ({"workload": {"name": "chatbot", "input_len": 5, "output_len": 5}}, 422, "workload"),
    ({"cluster": {"nodes": 0}}, 422, "nodes"),
    ({"model": "gpt-9"}, 400, "model"),
    ({"hardware": "tpu-v9"}, 400, "hardware"),
    ({"workload": {"input_len": 3000, "output_len": 100}}, 400, "workload"),
    ({"rate": 500}, 400, "rate"),
])
def test_bad_plan_bodies_name_the_field(api, change, status, names):
    body = {k: v for k, v in {**PLAN, **change}.items() if v is not None}
    answer = api.post("/v1/plan", json=body)
    assert answer.status_code == status
    assert names in json.dumps(answer.json()["detail"])


def test_simulate_refuses_a_placement_the_model_cannot_use(api):
    body = {"model": "opt-13b", "placement": {"prefill": {"tp": 3}, "decode": {"tp": 1}},
            "workload": {"name": "code"}, "rate": 1}
    answer = api.post("/v1/simulate", json=body)
    assert answer.status_code == 400 and "placement.prefill" in answer.json()["detail"]


def test_simulate_takes_an_expert_parallel_placement_and_refuses_an_ep_that_is_not_one(api):
    body = {"model": "deepseek-v3", "cluster": {"nodes": 4, "gpus_per_node": 8}, "workload": {"name": "chatbot"},
            "placement": {"prefill": {"tp": 4, "ep": 16}, "decode": {"tp": 1, "ep": 16}}, "rate": 2, "num_requests": 200}
    served = api.post("/v1/simulate", json=body).json()
    assert served["attainment"] > 0.9 and {len({s["node"] for s in i["stages"]}) for i in served["instances"]} == {2}
    for decode, field in (({"tp": 8, "ep": 12}, "placement.decode.ep"), ({"tp": 8}, "placement.decode")):
        answer = api.post("/v1/simulate", json={**body, "placement": {**body["placement"], "decode": decode}})
        assert answer.status_code == 400 and answer.json()["detail"].startswith(field)


def test_openapi_lists_the_endpoints(api):
    assert api.get("/docs").status_code == 200
    paths = api.get("/openapi.json").json()["paths"]
    assert {"/v1/plan", "/v1/simulate", "/v1/replan", "/v1/workload"} <= set(paths)


def test_workload_and_replan_from_recorded_requests(api, rds, record):
    assert api.get("/v1/plan").status_code == 404
    record(rds, 300, rate=2.0, prompt=300, output=40, start=time.time() - 200)
    stats = api.get("/v1/workload").json()
    assert stats["count"] == 300
    assert stats["rate"] == pytest.approx(2.0, rel=0.2)
    assert stats["prompt_mean"] == pytest.approx(303, abs=1) and stats["output_mean"] == 40
    body = {k: PLAN[k] for k in ("model", "hardware", "cluster", "slo", "num_requests")}
    plan = api.post("/v1/replan", json=body).json()
    assert plan["rate"] == stats["rate"] and plan["meets_rate"] is True
    assert plan["workload"]["count"] == 300
    assert api.get("/v1/plan").json()["workload"]["count"] == 300


def test_recorded_prefix_hits_are_served_and_planned_with(api, rds, record):
    record(rds, 300, rate=2.0, prompt=600, output=40, start=time.time() - 200, cached=0.75)
    stats = api.get("/v1/workload").json()
    assert stats["hit_rate"] == pytest.approx(0.75, abs=0.01)
    assert stats["prefix_hits"]["quantiles"][0][10] == pytest.approx(0.75, abs=0.01)
    workload = {"input_len": 600, "output_len": 40}
    cold = api.post("/v1/plan", json={**PLAN, "workload": workload}).json()
    warm = api.post("/v1/plan", json={**PLAN, "workload": {**workload, "prefix_hits": stats["prefix_hits"]}}).json()
    assert cold["hit_rate"] == 0 and warm["hit_rate"] == pytest.approx(0.75, abs=0.01)
    assert warm["request"]["workload"]["prefix_hits"] == stats["prefix_hits"]
    per_gpu = [plan["prefill"]["goodput"] / (plan["prefill"]["tp"] * plan["prefill"]["pp"]) for plan in (cold, warm)]
    assert per_gpu[1] > 2 * per_gpu[0] and warm["goodput_per_gpu"] > cold["goodput_per_gpu"]


def test_replan_without_records_is_a_clear_400(api):
    body = {k: PLAN[k] for k in ("model", "cluster")}
    answer = api.post("/v1/replan", json=body)
    assert answer.status_code == 400 and "workload" in answer.json()["detail"]
