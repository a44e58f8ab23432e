"""Redis stopped or stalled under a router: after the first refused call (or a reply awaited too long), requests are
routed and booked from what the router holds without calling Redis (no timeouts), the outage is one metric and log
line, and once Redis is back the router's background reads close the breaker by themselves."""

from __future__ import annotations

import asyncio
import signal
import time

from prometheus_client import REGISTRY

from services.common.prefix_hash import block_hashes
from services.common.redis_breaker import Breaker, background
from services.common.redis_server import EmbeddedRedis
from services.common.registry import InstanceInfo, Registry
from services.engine.block_manager import BlockManager
from services.instance.cache_publisher import CachePublisher
from services.router.dispatch import Dispatcher
from services.router.paths import PathLimits
from services.router.prefix_routing import PrefixRouter

PROMPT = list(range(1, 41))


def _metric(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


async def test_with_redis_stopped_requests_route_at_once_and_the_router_recovers_by_itself() -> None:
    server = EmbeddedRedis().start()
    breaker = Breaker()
    registry = Registry.from_url(server.url, ttl_s=60, breaker=breaker)
    try:
        infos = [InstanceInfo(f"prefill-{i}", "prefill", "127.0.0.1:1", "h", "cpu:0", block_size=4) for i in range(4)]
        for info in infos:
            await registry.register(info)
        blocks = BlockManager(16, block_size=4)
        for b, h in zip(blocks.allocate(10), block_hashes(PROMPT, 4)):
            blocks.register(b, h)
        await CachePublisher(blocks, registry.cache, "prefill-2", "one").beat()
        dispatcher = Dispatcher(registry, router_id="router-breaker")
        await dispatcher.refresh()
        router = PrefixRouter(registry, dispatcher, 512, PathLimits(0, 0))
        assert (await router.route(PROMPT, "", 8, paths=False))[0].instance_id == "prefill-2"
        trips = _metric("distserve_redis_breaker_trips_total")

        server.stop()
        began = time.monotonic()
        picked = []
        for _ in range(200):
            pick, _route = await router.route(PROMPT, "", 8, paths=False)
            assignment = await dispatcher.acquire("prefill", 40)
            picked.append(assignment.info.id)
            assert not assignment.in_redis and pick.instance_id == ""  # by load, from what the router holds
        took = time.monotonic() - began
        assert took < 1.0, took  # 200 requests: no per-request wait on Redis
        assert sorted(set(picked)) == [f"prefill-{i}" for i in range(4)]  # spread by this router's own counts
        assert _metric("distserve_redis_breaker_trips_total") == trips + 1
        assert _metric("distserve_redis_breaker_open") == 1

        server = EmbeddedRedis(port=server.port).start()  # back (empty) on the same port
        await background(dispatcher.refresh())
        for info in infos:  # their next heartbeats
            await background(registry.register(info))
        assert not breaker.open and _metric("distserve_redis_breaker_open") == 0
        assert (await dispatcher.acquire("prefill", 40)).in_redis
    finally:
        await registry.close()
        server.stop()


async def test_with_redis_stalled_only_the_calls_already_waiting_wait() -> None:
    server = EmbeddedRedis().start()
    breaker = Breaker(slow_s=0.2)
    registry = Registry.from_url(server.url, ttl_s=60, breaker=breaker)
    try:
        for i in range(2):
            await registry.register(InstanceInfo(f"prefill-{i}", "prefill", "127.0.0.1:1", "h", "cpu:0"))
        dispatcher = Dispatcher(registry, router_id="router-stall")
        await dispatcher.refresh()
        assert (await dispatcher.acquire("prefill", 40)).in_redis  # the booking's script is loaded in Redis
        server.process.send_signal(signal.SIGSTOP)  # stalled: connections stay open, nothing answers
        first = asyncio.create_task(dispatcher.acquire("prefill", 40))  # waits for a reply that does not come
        await asyncio.sleep(0.3)
        began = time.monotonic()
        later = [await dispatcher.acquire("prefill", 40) for _ in range(50)]
        assert time.monotonic() - began < 0.5 and not any(a.in_redis for a in later)  # none waited on Redis
        assert breaker.open
        server.process.send_signal(signal.SIGCONT)
        assert (await asyncio.wait_for(first, 5)).in_redis  # the reply it awaited came
        await background(dispatcher.refresh())
        assert not breaker.open
    finally:
        server.process.send_signal(signal.SIGCONT)
        await registry.close()
        server.stop()
