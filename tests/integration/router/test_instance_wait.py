"""A request that finds no usable instance of a role waits a bounded time for one (a lone instance being
restarted) instead of failing at once; a restarted instance (new incarnation) is not avoided for its
predecessor's failure."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from services.common.errors import NoInstance
from services.common.registry import InstanceInfo, Registry
from services.router.dispatch import Dispatcher


def _decode(incarnation: str) -> InstanceInfo:
    return InstanceInfo("decode-0", "decode", "127.0.0.1:1", "h", "cpu:0", incarnation=incarnation)


async def _dispatcher(redis_url: str, wait_s: float) -> tuple[Registry, Dispatcher, asyncio.Task]:
    redis.Redis.from_url(redis_url).flushdb()
    registry = Registry.from_url(redis_url, ttl_s=60)
    dispatcher = Dispatcher(registry, refresh_s=0.1, router_id="router-wait", wait_instance_s=wait_s)
    return registry, dispatcher, asyncio.create_task(dispatcher.run())


async def test_a_request_waits_for_the_restart_of_a_lone_instance(redis_url: str) -> None:
    registry, dispatcher, running = await _dispatcher(redis_url, wait_s=5.0)
    try:
        await registry.register(_decode("first"))
        await asyncio.sleep(0.3)
        dispatcher.mark_failed(_decode("first"))  # its process died under a request
        start = time.monotonic()
        asyncio.get_running_loop().call_later(0.5, lambda: asyncio.ensure_future(registry.register(_decode("second"))))
        assignment = await dispatcher.acquire("decode", 10, frozenset({_decode("first").key}))
        assert assignment.info.incarnation == "second" and 0.4 < time.monotonic() - start < 3.0
        await dispatcher.release(assignment)
    finally:
        running.cancel()
        await registry.close()


async def test_without_a_wait_no_instance_fails_at_once(redis_url: str) -> None:
    registry, dispatcher, running = await _dispatcher(redis_url, wait_s=0.0)
    try:
        start = time.monotonic()
        with pytest.raises(NoInstance):
            await dispatcher.acquire("decode", 10)
        assert time.monotonic() - start < 0.5
    finally:
        running.cancel()
        await registry.close()
