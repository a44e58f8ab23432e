"""The router's follow-up paths against real instances, a real kvxfer and a real Redis: a reverse-pull lease ends
whenever no prefill takes it, and a local prefill is bounded (the decode's cap and step share), falling back to a
pull that gives the same tokens."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from functools import partial

import grpc
import pytest
import redis

from services.common.errors import NoInstance
from services.common.registry import InstanceInfo, Registry
from services.common.sampling import SamplingParams
from services.common.tokenizer import load_tokenizer
from services.kvxfer.api import release_handle
from services.router.core import RouterCore
from services.router.dispatch import Dispatcher
from services.router.paths import Route
from services.router.prefix_routing import PrefillPick
from services.router.request import RouterRequest
from tests.integration.kvxfer.multi_turn import Pair, start_pair, turn

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
SYSTEM = [1, *range(100, 137)]  # 38 tokens: 9 full blocks of 4
PARAMS = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)


class Served:
    """A pair of instances registered in Redis behind a RouterCore (no prefix router: each test sets the route)."""

    def __init__(self, pair: Pair, core: RouterCore, registry: Registry, dispatcher: Dispatcher) -> None:
        self.pair, self.core, self.registry, self.dispatcher = pair, core, registry, dispatcher

    async def ask(self, prompt: list[int], route: Route, request_id: str) -> tuple[list[int], RouterRequest]:
        req = RouterRequest(request_id, prompt, PARAMS, prefill_pick=PrefillPick("", 0), route=route)
        tokens = [t async for chunk in self.core.generate(req) for t in chunk.token_ids]
        return tokens, req

    async def decode_blocks_free_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while (await self.pair.decode_engine.stats()).blocks_used:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True


@pytest.fixture
async def served(tiny_llama_dir: str, start_kvxfer, redis_url: str) -> AsyncIterator:
    host = await start_kvxfer()
    made: list[tuple[Pair, Registry, Dispatcher, asyncio.Task]] = []

    async def make(tag: str, prefill_pending: int = 8, local_share: float = 1.0, register_prefill: bool = True,
                   cap: int = 16) -> Served:
        redis.Redis.from_url(redis_url).flushdb()
        pair = await start_pair(tiny_llama_dir, host.address, tag, "on", prefill_pending, local_share)
        registry = Registry.from_url(redis_url, ttl_s=60)
        for role in ("prefill", "decode") if register_prefill else ("decode",):
            await registry.register(InstanceInfo(f"{tag}-{role[0]}", role, pair.address, "h", "cpu:0", host.address,
                                                 "one", block_size=4))
        dispatcher = Dispatcher(registry, refresh_s=0.1, router_id=f"router-{tag}", wait_instance_s=0.0)
        await dispatcher.refresh()
        running = asyncio.create_task(dispatcher.run())
        made.append((pair, registry, dispatcher, running))
        core = RouterCore("disagg", load_tokenizer(tiny_llama_dir), dispatcher, registry, max_inflight=8,
                          max_queued=8, retries=1, release_lease=partial(release_handle, channel=dispatcher.channel), local_prefill_cap=cap)
        return Served(pair, core, registry, dispatcher)

    yield make
    for pair, registry, dispatcher, running in made:
        running.cancel()
        await dispatcher.close()
        await registry.close()
        for close in pair.closers:
            await close()


async def _history(served: Served, path: str = "local") -> list[int]:
    """Turn 1 (local: prefilled on the decode instance itself, the prefill holding nothing of it)."""
    first = await turn(served.pair, "t1", SYSTEM, path)
    return SYSTEM + first.tokens


async def test_a_reverse_pull_lease_ends_at_once_when_the_prefill_refuses(served) -> None:
    s = await served("rv", prefill_pending=0)  # the prefill's queue is full: every Prefill is RESOURCE_EXHAUSTED
    history = await _history(s)
    assert await s.decode_blocks_free_within(1.0)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await s.ask(history + [5] * 20, Route("reverse", "rv-d", 40), "t2")
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await s.decode_blocks_free_within(1.0)  # not at the lease's expiry, 30 s on
    assert (await s.pair.kv.stats()).live_leases == 0


async def test_a_reverse_pull_lease_ends_at_once_when_no_prefill_is_live(served) -> None:
    s = await served("nl", register_prefill=False)
    history = await _history(s)
    with pytest.raises(NoInstance):
        await s.ask(history + [5] * 20, Route("reverse", "nl-d", 40), "t2")
    assert await s.decode_blocks_free_within(1.0)


async def test_a_local_prefill_over_the_cap_goes_by_the_prefill_and_gives_the_same_tokens(served) -> None:
    s = await served("cap")
    history = await _history(s)
    prompt = history + [5 + i for i in range(30)]  # 30 new tokens: over the cap of 16 uncached
    before = await s.pair.computed()
    tokens, req = await s.ask(prompt, Route("local", "cap-d", 40), "t2")
    after = await s.pair.computed()
    assert req.prefill_instance == "cap-p" and req.path == "pull"
    assert after[1] - before[1] == len(tokens) - 1  # the decode computed its decode steps, no prompt token
    cold, _ = await s.ask(prompt, Route("pull"), "t3")
    assert tokens == cold
    assert await s.decode_blocks_free_within(1.0)


async def test_a_local_prefill_booked_elsewhere_or_past_the_step_share_goes_by_the_prefill(served) -> None:
    s = await served("share", local_share=0.0)
    history = await _history(s, "disagg")
    prompt = history + [5, 6, 7]
    _, req = await s.ask(prompt, Route("local", "share-d", 40), "t2")  # the step share is 0: never local
    assert req.prefill_instance == "share-p" and req.path == "pull"
    _, req = await s.ask(prompt, Route("local", "gone-d", 40), "t3")  # routed to an instance it could not book
    assert req.prefill_instance == "share-p" and req.path == "pull"
