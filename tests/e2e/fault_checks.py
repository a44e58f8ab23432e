"""What the fault tests read from a running stack: what is still allocated, and whether every process lives."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import redis

from services.common.redis_auth import resolve_url
from services.kvxfer.api import KVXferClient
from services.launcher.stack import Stack
from tests.e2e.helpers import instance_stats


@dataclass(frozen=True, slots=True)
class Allocated:
    blocks: int  # KV blocks in use over every instance
    leases: int  # live leases at kvxfer
    booked: float  # load booked in Redis over every role

    @property
    def nothing(self) -> bool:
        return self.blocks == 0 and self.leases == 0 and abs(self.booked) < 1e-6


async def allocated(stack: Stack) -> Allocated:
    stats = await asyncio.to_thread(instance_stats, stack)
    leases = 0
    if stack.kvxfer_address:
        kv = KVXferClient(stack.kvxfer_address)
        try:
            leases = (await kv.stats()).live_leases
        finally:
            await kv.close()
    book = redis.Redis.from_url(resolve_url(stack.redis_url))  # the stack's own Redis has a password
    booked = sum(score for key in book.keys("ds:load:*") for _, score in book.zrange(key, 0, -1, withscores=True))
    return Allocated(sum(s.blocks_used for s in stats), leases, booked)


async def seconds_until_nothing_allocated(stack: Stack, bound_s: float = 30.0) -> tuple[float, Allocated]:
    """Seconds from now until nothing is allocated (or the bound), and the last reading."""
    start = time.monotonic()
    while True:
        now = await allocated(stack)
        if now.nothing or time.monotonic() - start > bound_s:
            return time.monotonic() - start, now
        await asyncio.sleep(0.05)


def all_alive(stack: Stack) -> bool:
    return all(p.process.poll() is None for p in stack.procs)
