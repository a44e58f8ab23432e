"""Past its admission bound the router answers RESOURCE_EXHAUSTED / 429 at once, and frees everything."""

from __future__ import annotations

import asyncio

import grpc
import httpx
import pytest

from tests.e2e.helpers import generate, running_stack, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def stack(tiny_llama_dir: str, redis_url: str):
    env = {"DISTSERVE_ROUTER_MAX_INFLIGHT": "2", "DISTSERVE_ROUTER_MAX_QUEUED": "2"}
    with running_stack(tiny_llama_dir, redis_url, mode="disagg", extra_env=env) as stack:
        yield stack


async def test_overload_is_refused_not_queued_without_bound(stack) -> None:
    async def one() -> str:
        try:
            await generate(stack.router_address, "busy " * 10, max_tokens=300, ignore_eos=True, temperature=0.0)
            return "ok"
        except grpc.aio.AioRpcError as err:
            return err.code().name

    outcomes = await asyncio.gather(*(one() for _ in range(12)))
    assert outcomes.count("ok") >= 4  # two served at once, two waiting, FCFS
    assert set(outcomes) == {"ok", "RESOURCE_EXHAUSTED"}
    stats = await wait_idle(stack)
    assert all(s.blocks_used == 0 for s in stats)


async def test_http_overload_is_429(stack) -> None:
    url = f"http://{stack.config.host}:{stack.config.http_port}/v1/completions"
    body = {"prompt": "busy " * 10, "max_tokens": 300, "ignore_eos": True, "temperature": 0}
    async with httpx.AsyncClient(timeout=120) as http:
        responses = await asyncio.gather(*(http.post(url, json=body) for _ in range(12)))
    codes = sorted({r.status_code for r in responses})
    assert codes == [200, 429]
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.json()["error"]["type"] == "rate_limit_error"
