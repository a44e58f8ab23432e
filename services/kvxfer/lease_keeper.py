"""The worker side of leases: frees a lease's blocks when kvxfer ends it, or by the worker's own clock.

kvxfer sends RELEASED (pulled or released) or EXPIRED; the keeper frees the blocks then. If the
stream is gone (kvxfer died, or restarted without the lease), the keeper frees a lease itself once
`expiry + grace_s` has passed; grace_s must exceed kvxfer's pull timeout, since a pull in flight
holds its lease past expiry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

import grpc

from distserve.v1 import kv_pb2
from services.kvxfer.client import KVXferClient

log = logging.getLogger(__name__)
EARLY_ENDS = 10_000


class LeaseKeeper:
    def __init__(self, client: KVXferClient, instance_id: str, free: Callable[[list[int]], object],
                 grace_s: float = 60.0, retry_s: float = 1.0, clock: Callable[[], float] = time.time) -> None:
        self._client = client
        self._instance_id = instance_id
        self._free = free
        self._grace_s = grace_s
        self._retry_s = retry_s
        self._clock = clock
        self._held: dict[str, tuple[list[int], float]] = {}  # lease id -> (blocks, expiry)
        self._ended_early: OrderedDict[str, None] = OrderedDict()  # ends seen before create returned
        self._unsure: set[str] = set()  # leases held when the stream broke: a new kvxfer would not know them

    async def create_lease(self, block_ids: Sequence[int], num_tokens: int, ttl_s: float = 0.0) -> kv_pb2.KVHandle:
        """Lease blocks of this instance's pool and keep track of them until the lease ends."""
        handle = await self._client.create_lease(self._instance_id, block_ids, num_tokens, ttl_s)
        if handle.lease_id in self._ended_early:
            del self._ended_early[handle.lease_id]
            self._free(list(handle.block_ids))
        else:
            self._held[handle.lease_id] = (list(handle.block_ids), handle.lease_expiry)
        return handle

    def held(self) -> int:
        return len(self._held)

    async def run(self) -> None:
        """Follow lease ends until cancelled, reconnecting; free overdue leases meanwhile."""
        sweeper = asyncio.create_task(self._sweep())
        try:
            while True:
                try:
                    async for end in self._client.watch_leases(self._instance_id):
                        self._end(end.lease_id, end.block_ids)
                except grpc.aio.AioRpcError as e:
                    log.warning("lease stream of %s broken (%s); retrying", self._instance_id, e.code().name)
                    self._unsure |= set(self._held)
                await asyncio.sleep(self._retry_s)
        finally:
            sweeper.cancel()

    async def _settle_unsure(self) -> None:
        """Asks kvxfer to release each lease held across a broken stream: one it does not know (it restarted, or
        the lease ended unheard) is freed now rather than at expiry; one it releases ends by its event, after any
        pull in flight."""
        for lease_id in list(self._unsure):
            try:
                known = await self._client.release(lease_id)
            except grpc.aio.AioRpcError:
                return  # kvxfer still away: next sweep
            self._unsure.discard(lease_id)
            held = self._held.pop(lease_id, None) if not known else None
            if held is not None:
                log.warning("lease %s unknown to kvxfer after its stream broke; freeing its blocks", lease_id)
                self._free(held[0])

    def _end(self, lease_id: str, block_ids: list[int]) -> None:
        if self._held.pop(lease_id, None) is not None:
            self._free(block_ids)
            return
        self._ended_early[lease_id] = None
        while len(self._ended_early) > EARLY_ENDS:
            self._ended_early.popitem(last=False)

    async def _sweep(self) -> None:
        while True:
            self._unsure &= set(self._held)
            if self._unsure:
                await self._settle_unsure()
            now = self._clock()
            for lease_id, (blocks, expiry) in list(self._held.items()):
                if now > expiry + self._grace_s:
                    log.warning("lease %s ended without word from kvxfer; freeing its blocks", lease_id)
                    del self._held[lease_id]
                    self._free(blocks)
            await asyncio.sleep(self._retry_s)
