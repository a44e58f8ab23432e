"""The leases of one process's mocks, in the real lease semantics: a prefilled request's blocks stay held by their
instance until a pull ends the lease, the router releases it, or it expires. A pull costs the bytes it moves over
the link's bandwidth (a lease held while it runs); pulling from an ended lease fails as a real pull does."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from services.common.errors import ServingError


class LeaseGone(ServingError):
    """FAILED_PRECONDITION, as a real kvxfer's pull of an ended lease: the router prefills again."""

    grpc_code = grpc.StatusCode.FAILED_PRECONDITION


@dataclass(slots=True)
class Lease:
    owner: str  # instance id
    blocks: list[int]
    expiry: float  # unix seconds
    free: Callable[[list[int]], None]  # gives the blocks back to their pool


class LeaseTable:
    def __init__(self, bytes_per_s: float, time_scale: float = 1.0) -> None:
        self.bytes_per_s = bytes_per_s
        self.time_scale = time_scale
        self._leases: dict[str, Lease] = {}

    def create(self, owner: str, blocks: list[int], ttl_s: float, free: Callable[[list[int]], None]) -> tuple[str, float]:
        lease_id = uuid.uuid4().hex
        expiry = time.time() + ttl_s
        self._leases[lease_id] = Lease(owner, blocks, expiry, free)
        return lease_id, expiry

    def end(self, lease_id: str) -> bool:
        """Ends a lease (its blocks go back); False when it had ended already."""
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            return False
        lease.free(lease.blocks)
        return True

    async def pull(self, lease_id: str, num_bytes: int) -> None:
        """Moves `num_bytes` of a lease's blocks (the time the link takes), then ends it."""
        if lease_id not in self._leases:
            raise LeaseGone(f"lease {lease_id} ended before its pull")
        await asyncio.sleep(num_bytes / self.bytes_per_s * self.time_scale)
        if not self.end(lease_id):
            raise LeaseGone(f"lease {lease_id} ended during its pull")

    async def expire(self, every_s: float = 1.0) -> None:
        """Ends the leases past their expiry, every `every_s` seconds."""
        while True:
            now = time.time()
            for lease_id in [i for i, lease in self._leases.items() if lease.expiry < now]:
                self.end(lease_id)
            await asyncio.sleep(every_s)

    def held(self, owner: str) -> int:
        """Leases an instance's blocks are held under."""
        return sum(1 for lease in self._leases.values() if lease.owner == owner)
