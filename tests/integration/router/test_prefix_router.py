"""PrefixRouter.route() on a real Redis: the prefill holding the prompt's prefix is picked where the load book would
pick another by name, a follow-up's decode instance and path come from the index, and with Redis unreachable the
request is routed by the load book without waiting on it."""

from __future__ import annotations

import asyncio
import time

import redis

from services.common.prefix_hash import block_hashes
from services.common.registry import InstanceInfo, Registry
from services.engine.block_manager import BlockManager
from services.instance.cache_publisher import CachePublisher
from services.router.dispatch import Dispatcher
from services.router.paths import PathLimits
from services.router.prefix_routing import PrefixRouter

PROMPT = list(range(1, 41))  # 40 tokens: 10 full blocks of 4, the last token in the tenth
LIMITS = PathLimits(local_prefill_tokens=8, reverse_pull_tokens=8)


def _info(instance_id: str, role: str) -> InstanceInfo:
    return InstanceInfo(instance_id, role, "127.0.0.1:1", "h", "cpu:0", block_size=4, block_bytes=4096)


async def _publish(registry: Registry, instance_id: str, tokens: list[int]) -> None:
    blocks = BlockManager(64, block_size=4)
    for b, h in zip(blocks.allocate(len(tokens) // 4), block_hashes(tokens, 4)):
        blocks.register(b, h)
    await CachePublisher(blocks, registry.cache, instance_id, "one").beat()


async def _router(redis_url: str) -> tuple[Registry, Dispatcher, PrefixRouter]:
    registry = Registry.from_url(redis_url, ttl_s=60)
    for instance_id, role in (("prefill-a", "prefill"), ("prefill-b", "prefill"), ("decode-a", "decode")):
        await registry.register(_info(instance_id, role))
    dispatcher = Dispatcher(registry, refresh_s=60, router_id="router-test")
    await dispatcher.refresh()
    return registry, dispatcher, PrefixRouter(registry, dispatcher, 512, LIMITS)


async def test_the_prefill_holding_the_prefix_is_picked_over_the_one_the_book_picks_by_name(redis_url: str) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    registry, dispatcher, router = await _router(redis_url)
    try:
        await _publish(registry, "prefill-b", PROMPT[:32])
        pick, route = await router.route(PROMPT, "", 8)
        assert (pick.instance_id, pick.cached_tokens) == ("prefill-b", 32)
        assert route.path == "pull"  # the decode instance holds nothing of it

        await _publish(registry, "decode-a", PROMPT)  # the decode holds all 10 blocks: a short suffix
        pick, route = await router.route(PROMPT, "", 8)
        # local: it computes the last token's block (tokens 37-40) only; a delta would keep all 10 blocks
        assert (route.path, route.decode_id, route.decode_cached) == ("local", "decode-a", 36)
        assert (await router.route(PROMPT, "another-tenant", 8))[1].path == "pull"  # another namespace: nothing
    finally:
        await dispatcher.close()
        await registry.close()


async def test_with_redis_unreachable_routing_falls_back_to_the_book_at_once(redis_url: str) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    registry, dispatcher, router = await _router(redis_url)
    try:
        await _publish(registry, "prefill-b", PROMPT[:32])
        away = Registry.from_url("redis://127.0.0.1:1/0", ttl_s=60)  # nothing listens there
        router.registry = away
        began = time.monotonic()
        pick, route = await asyncio.wait_for(router.route(PROMPT, "", 8), 10)
        assert (pick.instance_id, route.path) == ("", "pull")  # no index: the load book picks, a plain pull
        assert time.monotonic() - began < 5
        await away.close()
    finally:
        await dispatcher.close()
        await registry.close()


async def test_a_colocated_instance_holding_the_prefix_is_picked(redis_url: str) -> None:
    """Colocated and chunked instances publish their index too; the router picks among them by it."""
    redis.Redis.from_url(redis_url).flushdb()
    registry = Registry.from_url(redis_url, ttl_s=60)
    for instance_id in ("colocated-a", "colocated-b"):
        await registry.register(_info(instance_id, "colocated"))
    dispatcher = Dispatcher(registry, refresh_s=60, router_id="router-test")
    await dispatcher.refresh()
    router = PrefixRouter(registry, dispatcher, 512, LIMITS)
    try:
        assert (await router.route(PROMPT, "", 8, paths=False, prefills_role="colocated"))[0].instance_id == ""
        await _publish(registry, "colocated-b", PROMPT[:32])
        pick, route = await router.route(PROMPT, "", 8, paths=False, prefills_role="colocated")
        assert (pick.instance_id, pick.cached_tokens, route.path) == ("colocated-b", 32, "pull")
    finally:
        await dispatcher.close()
        await registry.close()
