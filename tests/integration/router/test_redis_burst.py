"""A burst of requests at one router: every booking and record goes through Redis (none falls back to the
router's local counts for want of a connection), and the book is back to zero afterwards."""

from __future__ import annotations

import asyncio
import time

import redis

from services.common.registry import InstanceInfo, Registry
from services.router.dispatch import Dispatcher

BURST = 1000


async def test_a_burst_of_1000_requests_gets_redis_connections(redis_url: str) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    registry = Registry.from_url(redis_url, ttl_s=120)
    for i in range(2):
        await registry.register(InstanceInfo(f"decode-{i}", "decode", f"127.0.0.1:{5000 + i}", "h", f"cpu:{i}"))
    dispatcher = Dispatcher(registry, router_id="router-burst")
    await dispatcher.keep_book()
    await dispatcher.refresh()

    async def request(i: int) -> bool:
        assignment = await dispatcher.acquire("decode", 10)
        await registry.record_request({"request_id": f"burst-{i}"})
        await dispatcher.release(assignment)
        return assignment.in_redis

    start = time.monotonic()
    booked_in_redis = await asyncio.gather(*(request(i) for i in range(BURST)))
    print({"burst": BURST, "seconds": round(time.monotonic() - start, 2)})
    assert all(booked_in_redis)
    assert redis.Redis.from_url(redis_url).xlen("ds:requests") == BURST
    assert set((await registry.loads("decode")).values()) == {0.0}
    await registry.close()
