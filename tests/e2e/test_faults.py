"""One request cannot take the service down; a client gone at any point leaves nothing allocated."""

from __future__ import annotations

import asyncio
import json
import random
import time

import grpc
import httpx
import pytest

from distserve.v1 import router_pb2, router_pb2_grpc
from services.common.sampling import SamplingParams
from services.common.tokenizer import load_tokenizer
from services.engine.engine import EngineConfig, LLMEngine
from tests.e2e.fault_checks import all_alive, seconds_until_nothing_allocated
from tests.e2e.helpers import generate, running_stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
PROMPT = "the quick brown fox"
EXTREME = [  # valid-looking values at the edges of every sampling field
    {"temperature": 1e-39}, {"temperature": 1e-30}, {"temperature": 9.99e-6}, {"temperature": 1e-5},
    {"temperature": 1e6}, {"temperature": 3.4e38}, {"temperature": 1.0, "top_p": 1e-9}, {"top_p": 1e-45},
    {"temperature": 1e-39, "top_k": 1}, {"temperature": 2.0, "top_k": 2**31 - 1}, {"seed": -(2**63)},
    {"seed": 2**63 - 1, "temperature": 1e-20}, {"stop_token_ids": [0, 258]}, {"max_tokens": 1},
]


@pytest.fixture(scope="module")
def stack(tiny_llama_dir: str, redis_url: str):
    with running_stack(tiny_llama_dir, redis_url, mode="disagg", prefill=2, decode=1,
                       devices=("cpu:0", "cpu:0", "cpu:1")) as stack:
        yield stack


@pytest.fixture(scope="module")
def greedy(tiny_llama_dir: str) -> list[int]:
    engine = LLMEngine(EngineConfig(tiny_llama_dir, num_blocks=64))
    (ids,) = engine.generate([load_tokenizer(tiny_llama_dir).encode(PROMPT)], SamplingParams(max_tokens=16))
    engine.close()
    return ids


def _http(stack) -> str:
    return f"http://{stack.config.host}:{stack.config.http_port}"


async def test_extreme_sampling_values_get_answers_and_every_instance_lives(stack, greedy) -> None:
    for fields in EXTREME:
        fields = {"max_tokens": 8, **fields}
        responses = await generate(stack.router_address, PROMPT, **fields)
        assert responses[-1].finish_reason in ("stop", "length"), fields
    async with httpx.AsyncClient(base_url=_http(stack), timeout=60) as client:
        for fields in EXTREME:
            reply = await client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 8, **fields})
            assert reply.status_code == 200, (fields, reply.text)
    assert all_alive(stack)
    responses = await generate(stack.router_address, PROMPT, max_tokens=16, temperature=0.0)
    assert [t for r in responses for t in r.token_ids] == greedy


@pytest.mark.parametrize("body", [
    {"prompt": "a\ud800b"}, {"prompt": [1, 2**40]}, {"prompt": "x", "top_k": 2**40}, {"prompt": "x", "seed": 2**70},
    {"prompt": "x", "stop_token_ids": [2**33]}, {"prompt": "x", "max_tokens": 10**30},
    {"prompt": "x", "temperature": -1e-39},
])
async def test_bad_http_input_is_400(stack, body) -> None:
    async with httpx.AsyncClient(base_url=_http(stack), timeout=60) as client:
        reply = await client.post("/v1/completions", content=json.dumps(body), headers={"content-type": "application/json"})
        assert reply.status_code == 400, reply.text
        chat = await client.post("/v1/chat/completions", content=json.dumps({"messages": [{"role": "user", "content": "a\ud800"}]}),
                                 headers={"content-type": "application/json"})
        assert chat.status_code == 400, chat.text


async def test_a_long_or_repeated_client_request_id(stack, greedy) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await generate(stack.router_address, PROMPT, request_id="x" * 1_000_000, max_tokens=2)
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # Two requests with one client id run side by side: the id is a label, not the engine's key.
    both = await asyncio.gather(*(generate(stack.router_address, PROMPT, request_id="same", max_tokens=16,
                                           temperature=0.0) for _ in range(2)))
    for responses in both:
        assert [t for r in responses for t in r.token_ids] == greedy
        assert responses[-1].request_id == "same"


async def _http_stream_closed_after(client: httpx.AsyncClient, events: int, max_tokens: int) -> None:
    async with client.stream("POST", "/v1/completions", json={
            "prompt": PROMPT, "max_tokens": max_tokens, "ignore_eos": True, "stream": True}) as reply:
        assert reply.status_code == 200
        seen = 0
        async for line in reply.aiter_lines():
            if seen >= events:
                return  # leaving the block closes the connection: the client is gone
            seen += line.startswith("data:")


async def _grpc_cancelled_after(stub, responses: int, max_tokens: int) -> None:
    call = stub.Generate(router_pb2.GenerateRequest(prompt=PROMPT, max_tokens=max_tokens, ignore_eos=True), timeout=120)
    seen = 0
    async for _ in call:
        seen += 1
        if seen >= responses:
            break
    call.cancel()


async def test_clients_gone_at_any_point_leave_nothing_allocated(stack) -> None:
    """200 HTTP streams closed and 200 gRPC calls cancelled at random points, 16 at a time."""
    rng = random.Random(22)
    gate = asyncio.Semaphore(16)
    points = [0, 1, 1, 2] + list(range(3, 40))  # 0: before any event; 1: right after the first token

    async def bounded(coro) -> None:
        async with gate:
            await coro

    async with httpx.AsyncClient(base_url=_http(stack), timeout=120,
                                 limits=httpx.Limits(max_connections=32)) as client, \
            grpc.aio.insecure_channel(stack.router_address) as channel:
        stub = router_pb2_grpc.RouterStub(channel)
        work = [bounded(_http_stream_closed_after(client, rng.choice(points), 48)) for _ in range(200)]
        work += [bounded(_grpc_cancelled_after(stub, rng.choice(points), 48)) for _ in range(200)]
        rng.shuffle(work)
        started = time.monotonic()
        await asyncio.gather(*work)
    seconds, left = await seconds_until_nothing_allocated(stack)
    print(f"400 clients gone in {time.monotonic() - started:.1f} s; nothing allocated {seconds:.2f} s later ({left})")
    assert left.nothing, left
    assert seconds < 1.0
    assert all_alive(stack)
