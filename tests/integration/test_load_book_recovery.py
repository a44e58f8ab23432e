"""The load book after faults: Redis restarted empty, a router restarted, an instance restarted."""

from __future__ import annotations

import redis

from services.common.registry import InstanceInfo, Registry
from services.router.dispatch import Dispatcher


def _info(i: int, role: str = "decode") -> InstanceInfo:
    return InstanceInfo(f"{role}-{i}", role, f"127.0.0.1:{5000 + i}", "host", f"cpu:{i}")


async def test_redis_restarted_empty_gets_back_instances_and_the_routers_bookings(redis_url: str) -> None:
    book = redis.Redis.from_url(redis_url)
    book.flushdb()
    registry = Registry.from_url(redis_url, ttl_s=5)
    dispatcher = Dispatcher(registry, router_id="router-a")
    for i in range(2):
        await registry.register(_info(i))
    await dispatcher.keep_book()
    await dispatcher.refresh()
    held = await dispatcher.acquire("decode", 40)
    book.flushdb()  # Redis came back empty
    for i in range(2):
        await registry.heartbeat(_info(i))  # the instances' next beat
    await dispatcher.keep_book()
    assert await registry.loads("decode") == {held.info.id: 40.0, ({"decode-0", "decode-1"} - {held.info.id}).pop(): 0.0}
    await dispatcher.release(held)
    assert set((await registry.loads("decode")).values()) == {0.0}
    await registry.close()


async def test_a_sole_router_starting_drops_stale_bookings_and_a_second_one_does_not(redis_url: str) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    registry = Registry.from_url(redis_url, ttl_s=5)
    await registry.register(_info(0))
    await registry.add_load("decode", "decode-0", 70)  # booked by a router that died
    await Dispatcher(registry, router_id="router-a").keep_book()  # it comes back, alone
    assert await registry.loads("decode") == {"decode-0": 0.0}
    await registry.add_load("decode", "decode-0", 30)  # router-a's request in flight
    await Dispatcher(registry, router_id="router-b").keep_book()  # router-a is alive: keep its booking
    assert await registry.loads("decode") == {"decode-0": 30.0}
    await registry.register(_info(0))  # the instance restarted: router-a takes its load off when its request ends
    assert await registry.loads("decode") == {"decode-0": 30.0}
    await registry.close()
