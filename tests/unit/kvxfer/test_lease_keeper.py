"""The worker frees a lease's blocks once: on kvxfer's event, or by its own clock when kvxfer is silent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from distserve.v1 import kv_pb2
from services.kvxfer.lease_keeper import LeaseKeeper
from services.kvxfer.leases import LeaseEnd, LeaseState


class FakeKVXfer:
    """Hands out leases and lets the test push lease ends into the watch stream."""

    def __init__(self) -> None:
        self.ends: asyncio.Queue[LeaseEnd] = asyncio.Queue()
        self.count = 0

    async def create_lease(self, instance_id, block_ids, num_tokens, ttl_s, pulls=1) -> kv_pb2.KVHandle:
        self.count += 1
        return kv_pb2.KVHandle(instance_id=instance_id, lease_id=f"l{self.count}", block_ids=block_ids,
                               lease_expiry=100.0 + ttl_s)

    async def watch_leases(self, instance_id: str) -> AsyncIterator[LeaseEnd]:
        while True:
            yield await self.ends.get()


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_frees_on_events_and_by_clock_once() -> None:
    now = [100.0]
    kvxfer, freed = FakeKVXfer(), []
    keeper = LeaseKeeper(kvxfer, "p0", freed.append, grace_s=5.0, retry_s=0.001, clock=lambda: now[0])
    running = asyncio.create_task(keeper.run())
    try:
        pulled = await keeper.create_lease([1, 2], num_tokens=20, ttl_s=10)
        await keeper.create_lease([3], num_tokens=5, ttl_s=10)
        kvxfer.ends.put_nowait(LeaseEnd(pulled.lease_id, "p0", [1, 2], LeaseState.RELEASED))
        await _settle()
        assert freed == [[1, 2]] and keeper.held() == 1

        now[0] = 100.0 + 10 + 5.1  # past expiry + grace, and kvxfer said nothing
        await asyncio.sleep(0.01)
        assert freed == [[1, 2], [3]] and keeper.held() == 0

        kvxfer.ends.put_nowait(LeaseEnd("l2", "p0", [3], LeaseState.EXPIRED))  # late word: no double free
        await _settle()
        assert freed == [[1, 2], [3]]
    finally:
        running.cancel()


async def test_end_seen_before_create_returns_still_frees() -> None:
    kvxfer, freed = FakeKVXfer(), []
    keeper = LeaseKeeper(kvxfer, "p0", freed.append, retry_s=0.001, clock=lambda: 100.0)
    running = asyncio.create_task(keeper.run())
    try:
        kvxfer.ends.put_nowait(LeaseEnd("l1", "p0", [7], LeaseState.EXPIRED))
        await _settle()
        await keeper.create_lease([7], num_tokens=1, ttl_s=0.001)
        assert freed == [[7]] and keeper.held() == 0
    finally:
        running.cancel()
