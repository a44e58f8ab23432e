"""Mock instances behind the real router pieces (dispatcher, load book, SLO gate, prefix routing, RouterCore) on a
real Redis: requests stream their tokens, a follow-up turn finds its prefix on the decode instance that served the
first, bad input is refused naming the field with nothing allocated, leases end with their pulls, and two routers
over one Redis book atomically and record each request once."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import grpc
import pytest
import redis

from distserve.v1 import worker_pb2, worker_pb2_grpc
from services.common.auth import ROUTER
from services.common.links import internal_channel
from services.common.registry import Registry
from services.common.sampling import SamplingParams
from services.common.slo import SLO
from services.common.tokenizer import load_tokenizer
from services.mocker.config import MockSettings
from services.mocker.fleet import MockFleet
from services.router.core import RouterCore
from services.router.dispatch import Dispatcher
from services.router.gate import SloGate
from services.router.paths import PathLimits
from services.router.prefix_routing import PrefixRouter
from services.router.request import RouterRequest

PROMPT = list(range(3, 67))  # 64 tokens: 4 blocks of 16


@pytest.fixture
async def fleet(redis_url: str, tiny_llama_dir: str) -> AsyncIterator[MockFleet]:
    redis.Redis.from_url(redis_url).flushdb()
    registry = Registry.from_url(redis_url, ttl_s=30)
    fleet = MockFleet(MockSettings(model=tiny_llama_dir, redis_url=redis_url, prefill=2, decode=2, num_blocks=64,
                                   time_scale=0.05, heartbeat_s=0.1), registry)
    await fleet.start()
    yield fleet
    await fleet.stop()
    await registry.close()


async def _router(redis_url: str, model: str, name: str) -> tuple[RouterCore, list[asyncio.Task]]:
    registry = Registry.from_url(redis_url, ttl_s=30)
    dispatcher = Dispatcher(registry, refresh_s=0.1, router_id=name)
    await dispatcher.keep_book()
    await dispatcher.refresh()
    gate = SloGate(registry, dispatcher, "off", SLO(), 512)
    prefix = PrefixRouter(registry, dispatcher, 512, PathLimits(64, 32), lambda: gate.model, gate.mix.mix,
                          gate.candidates)
    await prefix.refresh_index()
    core = RouterCore("disagg", load_tokenizer(model), dispatcher, registry, 64, 256, 2, gate=gate, prefix_router=prefix)
    return core, [asyncio.create_task(t) for t in (dispatcher.run(), gate.run(1.0), prefix.follow(0.1))]


async def _generate(core: RouterCore, vocab: int, request_id: str, prompt: list[int],
                    max_tokens: int = 8) -> RouterRequest:
    req = RouterRequest(request_id, prompt, SamplingParams(max_tokens=max_tokens))
    tokens = [t async for chunk in core.generate(req) for t in chunk.token_ids]
    assert tokens == [(prompt[0] * 31 + len(prompt) + i) % vocab for i in range(max_tokens)]  # the mocks' tokens
    return req


def _vocab(fleet: MockFleet) -> int:
    return fleet.mocks[0].worker.engine.model.vocab_size


async def _stats(fleet: MockFleet) -> list[worker_pb2.InstanceStatsResponse]:
    out = []
    for mock in fleet.mocks:
        channel = internal_channel(mock.info.address, ROUTER)
        stub = (worker_pb2_grpc.PrefillStub if mock.info.role == "prefill" else worker_pb2_grpc.DecodeStub)(channel)
        out.append(await stub.Stats(worker_pb2.InstanceStatsRequest()))
        await channel.close()
    return out


async def test_a_follow_up_turn_finds_its_prefix_and_every_block_comes_back(fleet: MockFleet, redis_url: str,
                                                                            tiny_llama_dir: str) -> None:
    core, tasks = await _router(redis_url, tiny_llama_dir, "router-a")
    try:
        first = await _generate(core, _vocab(fleet), "turn-1", PROMPT)
        assert first.path == "pull" and first.cached_tokens == 0
        await fleet.beat()  # the decode instance's blocks reach the index
        follow_up = PROMPT + [5] * 8 + list(range(100, 108))  # the first turn, its answer's length, a new question
        second = await _generate(core, _vocab(fleet), "turn-2", follow_up)
        assert second.decode_instance == first.decode_instance
        assert second.path in ("local", "delta") and second.cached_tokens + second.decode_cached_tokens >= 64
        stats = await _stats(fleet)
        assert [s.blocks_used for s in stats] == [0, 0, 0, 0]  # leases ended with their pulls
        assert sum(s.steps for s in stats) >= 8
    finally:
        for task in tasks:
            task.cancel()


async def test_bad_input_is_refused_naming_the_field_and_allocates_nothing(fleet: MockFleet) -> None:
    prefill = next(m for m in fleet.mocks if m.info.role == "prefill")
    channel = internal_channel(prefill.info.address, ROUTER)
    stub = worker_pb2_grpc.PrefillStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.Prefill(worker_pb2.PrefillRequest(request_id="bad", prompt_token_ids=[1, 10**6],
                                                     sampling=worker_pb2.SamplingParams(max_tokens=4, top_p=1.0)))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "prompt_token_ids" in refused.value.details()
    assert (await stub.Stats(worker_pb2.InstanceStatsRequest())).blocks_used == 0
    await channel.close()


async def test_two_routers_book_atomically_and_record_each_request_once(fleet: MockFleet, redis_url: str,
                                                                        tiny_llama_dir: str) -> None:
    routers = [await _router(redis_url, tiny_llama_dir, f"router-{i}") for i in range(2)]
    try:
        requests = await asyncio.gather(*(_generate(routers[i % 2][0], _vocab(fleet), f"r{i}", [7 + i] + PROMPT[1:], 4)
                                          for i in range(24)))
        client = redis.Redis.from_url(redis_url)
        records = Counter(fields[b"request_id"] for _, fields in client.xrange("ds:requests"))
        assert sorted(records) == sorted(f"r{i}".encode() for i in range(24)) and set(records.values()) == {1}
        assert {r.prefill_instance for r in requests} == {"mock-prefill-0", "mock-prefill-1"}  # no herd
        assert {r.decode_instance for r in requests} == {"mock-decode-0", "mock-decode-1"}
        await asyncio.sleep(0.2)
        assert set(client.zrange("ds:load:prefill", 0, -1, withscores=True)) == {(b"mock-prefill-0", 0.0),
                                                                                 (b"mock-prefill-1", 0.0)}
    finally:
        for _, tasks in routers:
            for task in tasks:
                task.cancel()
