"""SLO-aware admission on a whole stack: the planner fits the model to the steps the instances serve, the router
reads it and refuses, before any prefill, a request whose SLO no instance can meet; ordinary requests are served."""

from __future__ import annotations

import asyncio
import time

import grpc
import httpx
import pytest

from distserve.v1 import router_pb2, router_pb2_grpc
from services.common.net import free_port
from tests.e2e.helpers import generate, instance_stats, running_stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
IMPOSSIBLE = (("x-slo-ttft-ms", "0.001"),)  # a microsecond: less than any prefill step's fixed cost


@pytest.fixture(scope="module")
def stack(tiny_llama_dir: str, redis_url: str):
    env = {"DISTSERVE_ROUTER_ADMISSION": "refuse", "DISTSERVE_ROUTER_MODEL_REFRESH_S": "0.2",
           "DISTSERVE_PLANNER_FIT_INTERVAL": "0.3"}
    with running_stack(tiny_llama_dir, redis_url, mode="disagg", planner_port=free_port(), extra_env=env) as stack:
        yield stack


def _prefill_steps(stack) -> int:
    return sum(s.steps for s, p in zip(instance_stats(stack), [p for p in stack.procs if p.role]) if p.role == "prefill")


async def _fitted(stack) -> dict:
    """Serves prompts of several lengths one at a time until the planner has fitted the prefill instances."""
    url = f"http://{stack.config.host}:{stack.config.planner_port}/v1/model"
    deadline = time.monotonic() + 120
    async with httpx.AsyncClient(timeout=10) as http:
        while time.monotonic() < deadline:
            for words in (4, 12, 30, 50):
                await generate(stack.router_address, "slo " * words, max_tokens=3, temperature=0.0)
            try:
                model = (await http.get(url)).json()
            except httpx.HTTPError:
                continue
            if any(k["prefill"] for k in model.get("kinds", {}).values()):
                return model
    raise AssertionError("the planner fitted no prefill model")


async def test_a_request_no_instance_can_serve_in_time_is_refused_before_prefill(stack) -> None:
    model = await _fitted(stack)
    kind = next(k for k in model["kinds"].values() if k["prefill"])
    assert kind["role"] == "prefill" and kind["window"]["prefill_steps"] >= 3 and "prefill" in kind["residuals"]
    assert model["ttft_hops_s"] > 0  # from the router's records of the requests just served
    await asyncio.sleep(1.0)  # the router re-reads ds:model every 0.2 s
    before = await asyncio.to_thread(_prefill_steps, stack)
    async with grpc.aio.insecure_channel(stack.router_address) as channel:
        call = router_pb2_grpc.RouterStub(channel).Generate(
            router_pb2.GenerateRequest(prompt="never " * 20, max_tokens=4), metadata=IMPOSSIBLE, timeout=60)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            [r async for r in call]
        trailing = dict(await call.trailing_metadata())
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "predicted TTFT" in err.value.details() and "> SLO 0.001 ms" in err.value.details()
    assert int(trailing["retry-after"]) >= 1

    url = f"http://{stack.config.host}:{stack.config.http_port}/v1/completions"
    body = {"prompt": "never " * 20, "max_tokens": 4}
    async with httpx.AsyncClient(timeout=60) as http:
        refused = await http.post(url, json=body, headers=dict(IMPOSSIBLE))
        bad = await http.post(url, json=body, headers={"x-slo-tpot-ms": "soon"})
        served = await http.post(url, json=body, headers={"x-slo-ttft-ms": "600000", "x-slo-tpot-ms": "600000"})
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["type"] == "rate_limit_error" and "predicted TTFT" in refused.json()["error"]["message"]
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "x-slo-tpot-ms"
    assert served.status_code == 200 and served.json()["usage"]["completion_tokens"] == 4
    after = await asyncio.to_thread(_prefill_steps, stack)
    assert after == before + 1  # the served request's step alone: no prefill ran for the refused ones

    router = next(p for p in stack.procs if p.name == "router")
    async with httpx.AsyncClient(timeout=10) as http:
        metrics = (await http.get(f"http://{stack.config.host}:{router.metrics_port}/metrics")).text
    assert 'distserve_admission_total{decision="refused"} 2.0' in metrics
    assert "distserve_slo_ttft_error_seconds_count" in metrics
    assert 'distserve_slo_attainment{phase="ttft",source="predicted"}' in metrics
