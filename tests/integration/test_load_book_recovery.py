"""The load book after faults: Redis restarted empty, a router restarted or killed, an instance restarted."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

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
    await registry.add_load("decode", "decode-0", 30, "router-a")  # router-a's request in flight
    await Dispatcher(registry, router_id="router-b").keep_book()  # router-a is alive: keep its booking
    assert await registry.loads("decode") == {"decode-0": 30.0}
    await registry.register(_info(0))  # the instance restarted: router-a takes its load off when its request ends
    assert await registry.loads("decode") == {"decode-0": 30.0}
    await registry.close()


_ROUTER_THAT_BOOKS = """
import asyncio, sys
from services.common.registry import Registry
from services.router.dispatch import Dispatcher

async def main():
    dispatcher = Dispatcher(Registry.from_url(sys.argv[1], ttl_s=1.0), refresh_s=0.2, router_id="router-doomed")
    await dispatcher.keep_book()
    await dispatcher.refresh()
    for load in (40, 25, 10):
        await dispatcher.acquire("decode", load)
    print("booked", flush=True)
    await dispatcher.run()  # beats until killed, its requests never ending

asyncio.run(main())
"""


async def test_the_bookings_of_a_killed_router_are_taken_off_by_another(redis_url: str) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    registry = Registry.from_url(redis_url, ttl_s=5)
    for i in range(2):
        await registry.register(_info(i))
    survivor = Dispatcher(Registry.from_url(redis_url, ttl_s=1.0), refresh_s=0.2, router_id="router-alive")
    await survivor.keep_book()
    await survivor.refresh()
    mine = await survivor.acquire("decode", 7)  # in flight at the survivor: it must stay booked
    beating = asyncio.create_task(survivor.run())
    doomed = subprocess.Popen([sys.executable, "-c", _ROUTER_THAT_BOOKS, redis_url], stdout=subprocess.PIPE, text=True)
    try:
        assert doomed.stdout.readline().strip() == "booked"
        await asyncio.sleep(1.5)  # the doomed router is alive and beating: its bookings stay
        assert sum((await registry.loads("decode")).values()) == 82.0
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
        killed = time.monotonic()
        while sum((await registry.loads("decode")).values()) != 7.0:
            assert time.monotonic() - killed < 3.0, await registry.loads("decode")  # its presence TTL (1 s) + beats
            await asyncio.sleep(0.05)
        print({"fault": "SIGKILL a router holding bookings", "book_back_s": round(time.monotonic() - killed, 2)})
    finally:
        beating.cancel()
        if doomed.poll() is None:
            doomed.kill()
    await survivor.release(mine)
    assert set((await registry.loads("decode")).values()) == {0.0}
    await survivor.registry.close()
    await registry.close()


async def test_a_router_whose_presence_lapsed_books_its_requests_again(redis_url: str) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    registry = Registry.from_url(redis_url, ttl_s=5)
    await registry.register(_info(0))
    slow = Dispatcher(Registry.from_url(redis_url, ttl_s=0.3), router_id="router-slow")
    other = Dispatcher(Registry.from_url(redis_url, ttl_s=5), router_id="router-other")
    await slow.keep_book()
    await slow.refresh()
    held = await slow.acquire("decode", 50)
    await asyncio.sleep(0.5)  # the slow router missed its beats: the other takes its bookings off
    await other.keep_book()
    assert await registry.loads("decode") == {"decode-0": 0.0}
    await slow.keep_book()  # it beats again, its request still in flight
    assert await registry.loads("decode") == {"decode-0": 50.0}
    await slow.release(held)
    assert await registry.loads("decode") == {"decode-0": 0.0}
    for d in (slow, other):
        await d.registry.close()
    await registry.close()
