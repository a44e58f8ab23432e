"""The prefix-cache index in a real Redis: numbered batches, resyncs after a lost batch or a Redis restart, and
entries that lapse with their instance."""

from __future__ import annotations

import asyncio
import time

import redis

from services.common.prefix_hash import block_hashes
from services.common.registry import Registry
from services.engine.block_manager import BlockManager
from services.instance.cache_publisher import CachePublisher

PROMPT = list(range(1, 41))  # 10 blocks of 4


def _filled(blocks: BlockManager, tokens: list[int]) -> list[int]:
    """Blocks holding `tokens`' full blocks, registered as the engine does once they are computed."""
    hashes = block_hashes(tokens, blocks.block_size)
    held = blocks.allocate(len(hashes))
    for b, h in zip(held, hashes):
        blocks.register(b, h)
    return held


async def test_batches_keep_the_index_equal_to_the_pool(redis_url: str) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    registry = Registry.from_url(redis_url, ttl_s=5)
    blocks = BlockManager(12, block_size=4)
    publisher = CachePublisher(blocks, registry.cache, "prefill-a", "inc1")
    hashes = block_hashes(PROMPT, 4)
    held = _filled(blocks, PROMPT)
    await publisher.beat()
    assert await registry.cache.held_prefix(["prefill-a", "prefill-b"], hashes) == {"prefill-a": 10, "prefill-b": 0}
    blocks.free(held)  # cached, still listed
    blocks.allocate(4)  # 2 never used, then the last 2 of the prompt: a sequence's tail goes first
    await publisher.beat()
    assert await registry.cache.hashes("prefill-a") == set(blocks.cached_hashes())
    assert await registry.cache.held_prefix(["prefill-a"], hashes) == {"prefill-a": 8}
    await registry.close()


async def test_a_lost_batch_or_a_redis_restart_is_resynced(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    registry = Registry.from_url(redis_url, ttl_s=5)
    blocks = BlockManager(24, block_size=4)
    publisher = CachePublisher(blocks, registry.cache, "prefill-a", "inc1")
    _filled(blocks, PROMPT)
    await publisher.beat()
    assert not await registry.cache.apply("prefill-a", "inc1", 7, [1], [])  # out of order: refused
    assert not await registry.cache.apply("prefill-a", "inc0", 2, [1], [])  # an earlier process's: refused
    client.flushall()  # Redis restarted empty
    _filled(blocks, [9, *PROMPT[1:]])
    await publisher.beat()
    assert await registry.cache.hashes("prefill-a") == set(blocks.cached_hashes())
    assert len(blocks.cached_hashes()) == 20
    await registry.close()


async def test_an_instance_that_stops_beating_leaves_the_index(redis_url: str) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    registry = Registry.from_url(redis_url, ttl_s=1)
    blocks = BlockManager(12, block_size=4)
    _filled(blocks, PROMPT)
    await CachePublisher(blocks, registry.cache, "prefill-a", "inc1").beat()
    assert await registry.cache.hashes("prefill-a")
    start = time.monotonic()
    while await registry.cache.hashes("prefill-a"):
        await asyncio.sleep(0.1)
    assert time.monotonic() - start < 1.5
    await registry.close()
