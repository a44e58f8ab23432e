"""The prefix-cache index in a real Redis: numbered batches on a stream that a router's in-memory index follows,
resyncs after a lost batch or a Redis restart (never on a timer), a router that starts late reading the sets, and
entries that lapse with their instance."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis

from services.common.prefix_hash import block_hashes
from services.common.registry import Registry
from services.common.registry_cache import EVENTS_KEY
from services.engine.block_manager import BlockManager
from services.instance.cache_publisher import CachePublisher
from services.router.index_feed import IndexFeed

PROMPT = list(range(1, 41))  # 10 blocks of 4


def _filled(blocks: BlockManager, tokens: list[int]) -> list[int]:
    """Blocks holding `tokens`' full blocks, registered as the engine does once they are computed."""
    hashes = block_hashes(tokens, blocks.block_size)
    held = blocks.allocate(len(hashes))
    for b, h in zip(held, hashes):
        blocks.register(b, h)
    return held


@asynccontextmanager
async def _publishing(redis_url: str, num_blocks: int = 12, ttl_s: float = 5) -> AsyncIterator[
        tuple[redis.Redis, Registry, BlockManager, CachePublisher]]:
    """An empty Redis, and instance prefill-a's pool of blocks of 4 publishing its index there."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    registry = Registry.from_url(redis_url, ttl_s=ttl_s)
    blocks = BlockManager(num_blocks, block_size=4)
    try:
        yield client, registry, blocks, CachePublisher(blocks, registry.cache, "prefill-a", "inc1")
    finally:
        await registry.close()


async def test_a_routers_index_follows_the_batches_to_equal_the_pool(redis_url: str) -> None:
    async with _publishing(redis_url) as (_, registry, blocks, publisher):
        feed = IndexFeed()
        hashes = block_hashes(PROMPT, 4)
        held = _filled(blocks, PROMPT)
        await publisher.beat()
        await feed.catch_up(registry.cache)
        assert feed.index.held_prefix(["prefill-a", "prefill-b"], hashes) == {"prefill-a": 10, "prefill-b": 0}
        blocks.free(held)  # cached, still listed
        blocks.allocate(4)  # 2 never used, then the last 2 of the prompt: a sequence's tail goes first
        await publisher.beat()
        assert await registry.cache.hashes("prefill-a") == set(blocks.cached_hashes())
        await feed.catch_up(registry.cache)
        assert feed.index.held_prefix(["prefill-a"], hashes) == {"prefill-a": 8}


async def test_beats_with_nothing_new_publish_nothing_and_rewrite_nothing(redis_url: str) -> None:
    async with _publishing(redis_url) as (client, registry, blocks, publisher):
        _filled(blocks, PROMPT)
        await publisher.beat()
        published = client.xlen(EVENTS_KEY)
        for _ in range(5):
            await publisher.beat()
        assert client.xlen(EVENTS_KEY) == published == 1
        assert client.get("ds:cache:prefill-a:seq") == b"inc1:1"


async def test_a_lost_batch_or_a_redis_restart_is_resynced(redis_url: str) -> None:
    async with _publishing(redis_url, 24) as (client, registry, blocks, publisher):
        _filled(blocks, PROMPT)
        await publisher.beat()
        assert not await registry.cache.apply("prefill-a", "inc1", 7, [1], [])  # out of order: refused
        assert not await registry.cache.apply("prefill-a", "inc0", 2, [1], [])  # an earlier process's: refused
        client.flushall()  # Redis restarted empty
        _filled(blocks, [9, *PROMPT[1:]])
        await publisher.beat()
        assert await registry.cache.hashes("prefill-a") == set(blocks.cached_hashes())
        assert len(blocks.cached_hashes()) == 20


async def test_a_router_that_missed_batches_reads_the_set_and_goes_on_from_the_stream(redis_url: str) -> None:
    async with _publishing(redis_url, 24) as (client, registry, blocks, publisher):
        _filled(blocks, PROMPT)
        await publisher.beat()
        _filled(blocks, [7, *PROMPT[1:]])
        await publisher.beat()
        client.xtrim(EVENTS_KEY, maxlen=1, approximate=False)  # the stream kept only the second batch: its first (whole) one is gone
        feed = IndexFeed()
        await feed.catch_up(registry.cache)
        assert feed.index.stale(["prefill-a"]) == ["prefill-a"]  # a batch with no set under it
        await feed.refresh(registry.cache, ["prefill-a"])  # the background pass reads the set
        assert feed.index.held_prefix(["prefill-a"], block_hashes([7, *PROMPT[1:]], 4)) == {"prefill-a": 10}
        _filled(blocks, [8, *PROMPT[1:12]])
        await publisher.beat()
        await feed.catch_up(registry.cache)  # batches apply on top of the set read
        assert feed.index.held_prefix(["prefill-a"], block_hashes([8, *PROMPT[1:]], 4)) == {"prefill-a": 3}
        await feed.refresh(registry.cache, [])  # its registration lapsed: forgotten
        assert feed.index.entries == 0


async def test_an_instance_that_stops_beating_leaves_the_index(redis_url: str) -> None:
    async with _publishing(redis_url, ttl_s=1) as (_, registry, blocks, publisher):
        _filled(blocks, PROMPT)
        await publisher.beat()
        assert await registry.cache.hashes("prefill-a")
        start = time.monotonic()
        while await registry.cache.hashes("prefill-a"):
            await asyncio.sleep(0.1)
        assert time.monotonic() - start < 1.5
