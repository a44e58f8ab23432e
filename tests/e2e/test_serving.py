"""The whole stack as processes on loopback: outputs equal in-process generation, errors are clean,
and every KV block comes back."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time

import grpc
import pytest

from services.common.sampling import SamplingParams
from services.common.tokenizer import load_tokenizer
from services.engine.engine import EngineConfig, LLMEngine
from tests.e2e.helpers import generate, recorded_requests, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WORDS = "the prefill phase is compute bound while decoding is bound by memory bandwidth".split()


def _workload(n: int, seed: int = 0) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [(" ".join(rng.choices(WORDS, k=rng.randint(1, 40))), rng.randint(1, 24)) for _ in range(n)]


def _reference(model: str, workload: list[tuple[str, int]]) -> list[list[int]]:
    tokenizer = load_tokenizer(model)
    engine = LLMEngine(EngineConfig(model, policy="colocated", num_blocks=512))
    try:
        return engine.generate([tokenizer.encode(p) for p, _ in workload],
                               [SamplingParams(max_tokens=m, temperature=0.0) for _, m in workload])
    finally:
        engine.close()


# The local outputs below do not depend on the stack: made once for the three modes (whose tests pytest groups
# by mode, across the modules sharing conftest's stacks).
@pytest.fixture(scope="session")
def workload32(tiny_llama_dir: str) -> tuple[list[tuple[str, int]], list[list[int]]]:
    """32 requests and their greedy tokens from a local engine."""
    workload = _workload(32)
    return workload, _reference(tiny_llama_dir, workload)


async def test_concurrent_requests_equal_local_generation(stack, workload32) -> None:
    workload, expected = workload32
    results = await asyncio.gather(*(generate(stack.router_address, prompt, max_tokens=m, temperature=0.0)
                                     for prompt, m in workload))
    for responses, want, (_, max_tokens) in zip(results, expected, workload):
        got = [t for r in responses for t in r.token_ids]
        assert got == want
        assert responses[-1].finish_reason in ("stop", "length")
        assert responses[-1].completion_tokens == len(got) <= max_tokens
    stats = await wait_idle(stack)
    assert [s.blocks_used for s in stats] == [0] * len(stats)
    records = [r for r in recorded_requests(stack.redis_url) if r["mode"] == stack.config.mode]
    assert len(records) >= 32
    for r in records:
        assert float(r["arrival"]) <= float(r["first_token"]) <= float(r["finish"])
    if stack.config.mode == "disagg":  # requests that ended at their first token never reach decode
        decoded = [r for r in records if float(r["xfer_start"]) > 0]
        assert len(decoded) >= 16
        for r in decoded:
            assert (float(r["prefill_queued"]) <= float(r["prefill_start"]) <= float(r["prefill_end"])
                    <= float(r["xfer_start"]) <= float(r["xfer_end"]) <= float(r["decode_start"]) <= float(r["finish"]))


SEEDED_PROMPT, SEEDED_N = "the decode phase", 3


@pytest.fixture(scope="session")
def seeded_want(tiny_llama_dir: str) -> list[list[int]]:
    """The local engine's choices of SEEDED_PROMPT, each seeded as the router seeds choice i of seed 5."""
    from services.common.sampling import choice_seed

    engine = LLMEngine(EngineConfig(tiny_llama_dir, num_blocks=64))
    try:
        return engine.generate([load_tokenizer(tiny_llama_dir).encode(SEEDED_PROMPT)] * SEEDED_N, [
            SamplingParams(max_tokens=8, temperature=1.0, seed=choice_seed(5, i), ignore_eos=True, presence_penalty=0.7,
                           frequency_penalty=0.4, repetition_penalty=1.3, logit_bias=((65, 3.0),))
            for i in range(SEEDED_N)])
    finally:
        engine.close()


async def test_seeded_choices_with_penalties_equal_local_sampling(stack, seeded_want: list[list[int]]) -> None:
    prompt, n = SEEDED_PROMPT, SEEDED_N
    penalties = {"presence_penalty": 0.7, "frequency_penalty": 0.4, "repetition_penalty": 1.3, "logit_bias": {65: 3.0}}
    responses = await generate(stack.router_address, prompt, max_tokens=8, temperature=1.0, seed=5, n=n, ignore_eos=True,
                               **penalties)
    got = [[t for r in responses if r.index == i for t in r.token_ids] for i in range(n)]
    assert got == seeded_want
    assert sorted((r.index, r.completion_tokens) for r in responses if r.finish_reason) == [(i, 8) for i in range(n)]
    stats = await wait_idle(stack)
    assert all(s.blocks_used == 0 for s in stats)


def _cli_generate(*extra: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "services", "generate", "--json", "--max-tokens", "12", *extra,
                          "the decode phase streams tokens"], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


@pytest.fixture(scope="session")
def cli_local(tiny_llama_dir: str) -> dict:
    """`distserve generate --local`'s answer."""
    return _cli_generate("--local", "--model", tiny_llama_dir)


def test_cli_generate_matches_local(stack, cli_local: dict) -> None:
    remote, local = _cli_generate("--router", stack.router_address), cli_local
    assert remote["token_ids"] == local["token_ids"] and len(local["token_ids"]) > 0
    assert remote["text"] == local["text"]


@pytest.mark.parametrize("fields, field_name", [
    ({"prompt": ""}, "prompt"),
    ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": 5000}, "max_tokens"),
    ({"prompt": "hi", "temperature": -1.0}, "temperature"),
    ({"prompt": "hi", "top_p": 0.0}, "top_p"),
    ({"prompt": "hi", "top_p": 1.5}, "top_p"),
    ({"prompt": "hi", "top_k": -2}, "top_k"),
    ({"prompt": "hi", "model": "gpt-9"}, "model"),
    ({"prompt_ids": [1, 10**6]}, "prompt_token_ids"),
    ({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
])
async def test_bad_requests_are_refused_and_serving_goes_on(stack, fields: dict, field_name: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(stack.router_address, **fields)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_name in err.value.details()
    ok = await generate(stack.router_address, "still serving", max_tokens=3, temperature=0.0)
    assert sum(len(r.token_ids) for r in ok) == 3


async def test_cancelled_requests_free_every_block(stack) -> None:
    async def cancel_midway() -> None:
        async with grpc.aio.insecure_channel(stack.router_address) as channel:
            from distserve.v1 import router_pb2, router_pb2_grpc

            call = router_pb2_grpc.RouterStub(channel).Generate(
                router_pb2.GenerateRequest(prompt="cancel me " * 20, max_tokens=200, ignore_eos=True, temperature=0.0))
            async for _ in call:
                call.cancel()
                break

    await asyncio.gather(*(cancel_midway() for _ in range(6)))
    stats = await wait_idle(stack)
    assert [s.blocks_used for s in stats] == [0] * len(stats)
    assert all(s.running == 0 and s.waiting == 0 and s.held == 0 for s in stats)


def test_the_router_runs_on_the_prefill_core_when_disaggregated(stack) -> None:
    anywhere = os.sched_getaffinity(0)
    router = next(p for p in stack.procs if p.name == "router")
    want = {0} if stack.config.mode == "disagg" else anywhere  # the prefill instance is on cpu:0
    assert os.sched_getaffinity(router.process.pid) == want
    for proc in stack.procs:
        if proc.name == "kvxfer":  # its copies run where a core is free
            assert os.sched_getaffinity(proc.process.pid) == anywhere
    for proc in stack.procs:
        if proc.role:
            assert os.sched_getaffinity(proc.process.pid) == {int(proc.device.split(":")[1])}, proc.name


def test_router_serves_reflection_and_health(stack) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    with grpc.insecure_channel(stack.router_address) as channel:
        services = ProtoReflectionDescriptorDatabase(channel).get_services()
        assert "distserve.v1.Router" in services
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="distserve.v1.Router"))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def _scrape(stack) -> dict[str, dict[tuple[str, tuple], float]]:
    """Each process's metric samples: {process: {(sample name, sorted labels): value}}."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for p in stack.procs:
        if p.metrics_port:
            text = httpx.get(f"http://{stack.config.host}:{p.metrics_port}/metrics", timeout=10).text
            out[p.name] = {(s.name, tuple(sorted(s.labels.items()))): s.value
                           for family in text_string_to_metric_families(text) for s in family.samples}
    return out


def test_metrics_count_the_traffic_served(stack) -> None:
    """Known traffic moves every service's metrics by known amounts (a metric left unrecorded stays put)."""
    n, tokens = 3, 5
    before = _scrape(stack)
    for i in range(n):
        responses = asyncio.run(generate(stack.router_address, f"metrics please {i}", max_tokens=tokens,
                                         ignore_eos=True, temperature=0.0))
        assert sum(len(r.token_ids) for r in responses) == tokens
    asyncio.run(wait_idle(stack))
    instances = [p for p in stack.procs if p.role]
    gauges = ("distserve_kv_blocks_used", "distserve_kv_blocks_reserved", "distserve_queue_length")

    def idle_gauges(scraped: dict) -> bool:
        return all(scraped[p.name][(g, (("instance", p.name),))] == 0 for p in instances for g in gauges)

    deadline = time.monotonic() + 5 * 1.0  # the gauges follow the pool at each heartbeat (1 s)
    after = _scrape(stack)
    while not idle_gauges(after) and time.monotonic() < deadline:
        time.sleep(0.2)
        after = _scrape(stack)

    def delta(process: str, name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after[process].get(key, 0.0) - before[process].get(key, 0.0)

    assert delta("router", "distserve_requests_total", outcome="ok") == n
    for name in ("distserve_ttft_seconds", "distserve_tpot_seconds", "distserve_e2e_seconds"):
        assert delta("router", f"{name}_count") == n, name
        assert delta("router", f"{name}_sum") > 0, name
    assert delta("router", "distserve_ttft_seconds_sum") < delta("router", "distserve_e2e_seconds_sum")
    stages = ["prefill_queue", "prefill"] + (["transfer", "decode_queue", "decode"] if stack.config.mode == "disagg" else [])
    # the router may send a short prompt down the local path (the decode prefills it): no K/V moves for that one
    local = delta("router", "distserve_disagg_decision_total", path="local")
    for stage in stages:
        moved = stage in ("transfer", "decode_queue")
        assert delta("router", "distserve_stage_seconds_count", stage=stage) == n - local * moved, stage
    assert delta("router", "distserve_stage_seconds_sum", stage="prefill") > 0
    for proc in instances:  # idle now: the gauges read the pool's true state
        labels = {"instance": proc.name}
        assert after[proc.name][("distserve_kv_blocks_total", tuple(labels.items()))] == stack.config.num_blocks
        for gauge in gauges:
            assert after[proc.name][(gauge, tuple(labels.items()))] == 0, (proc.name, gauge)
    if stack.config.mode == "disagg":  # one pull per request the decode did not prefill itself, on the one host
        assert delta("kvxfer", "distserve_kvxfer_pull_seconds_count", path="same-host") == n - local
        assert (delta("kvxfer", "distserve_kvxfer_pulled_bytes_total", path="same-host") > 0) == (local < n)
