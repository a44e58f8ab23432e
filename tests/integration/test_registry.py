"""The Redis load book: least-loaded live instance, dead ones skipped, no herding under concurrency."""

from __future__ import annotations

import asyncio
from collections import Counter

import redis

from services.common.registry import InstanceInfo, Registry


def _info(i: int, role: str = "prefill") -> InstanceInfo:
    return InstanceInfo(f"{role}-{i}", role, f"127.0.0.1:{5000 + i}", "host", f"cpu:{i}")


async def test_pick_takes_least_loaded_live_instance(redis_url: str) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    registry = Registry.from_url(redis_url, ttl_s=5)
    for i in range(3):
        await registry.register(_info(i))
    await registry.add_load("prefill", "prefill-0", 100)
    await registry.add_load("prefill", "prefill-1", 10)
    await registry.redis.delete("ds:inst:prefill-2", "ds:known:prefill-2")  # silent past FORGET_S: gone
    assert await registry.pick("prefill", 50) == "prefill-1"
    assert await registry.loads("prefill") == {"prefill-1": 60.0, "prefill-0": 100.0}
    await registry.close()


async def test_a_pick_past_many_lapsed_instances_reads_the_book_window_by_window(redis_url: str) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    registry = Registry.from_url(redis_url, ttl_s=5)
    for i in range(40):
        await registry.register(_info(i))
        await registry.add_load("prefill", f"prefill-{i}", i)
    for i in range(35):  # the 35 least loaded: 30 gone past FORGET_S, 5 lapsed a moment (still known)
        await registry.redis.delete(f"ds:inst:prefill-{i}", *([f"ds:known:prefill-{i}"] if i % 7 else []))
    assert await registry.pick("prefill", 1) == "prefill-35"
    assert sorted(await registry.loads("prefill")) == sorted(f"prefill-{i}" for i in (0, 7, 14, 21, 28, *range(35, 40)))
    await registry.close()


async def test_a_short_lapse_keeps_the_booked_load(redis_url: str) -> None:
    """An instance whose descriptor lapsed for a moment (a stalled loop) is skipped, not dropped: when its
    heartbeat comes back, the load routers booked on it is still there (back at zero, the picks would herd onto
    its long queue)."""
    redis.Redis.from_url(redis_url).flushdb()
    registry = Registry.from_url(redis_url, ttl_s=5)
    stalled, other = _info(0), _info(1)
    for info in (stalled, other):
        await registry.register(info)
    await registry.add_load("prefill", stalled.id, 4400)
    await registry.add_load("prefill", other.id, 5000)
    await registry.redis.delete("ds:inst:prefill-0")  # descriptor lapsed
    assert await registry.pick("prefill", 50) == other.id
    await registry.heartbeat(stalled)
    assert await registry.loads("prefill") == {stalled.id: 4400.0, other.id: 5050.0}
    assert await registry.pick("prefill", 50) == stalled.id
    await registry.deregister(stalled)
    assert await registry.redis.exists("ds:known:prefill-0") == 0
    await registry.close()


async def test_concurrent_picks_spread_evenly(redis_url: str) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    registry = Registry.from_url(redis_url, ttl_s=5)
    for i in range(4):
        await registry.register(_info(i, "decode"))
    chosen = await asyncio.gather(*(registry.pick("decode", 8) for _ in range(40)))
    assert Counter(chosen) == {f"decode-{i}": 10 for i in range(4)}
    await registry.close()
