"""What prefill and decode instances need from the host's KV transfer service (kvxfer), as a Protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from distserve.v1 import kv_pb2
from services.engine.kv_pool import KVLayout


class TransferError(RuntimeError):
    """A pull failed (source gone, lease expired or released, timeout); the destination blocks hold nothing usable."""


@dataclass(frozen=True, slots=True)
class LeaseEnded:
    lease_id: str
    reason: str  # "released" | "expired"


class KVTransfer(Protocol):
    async def register_pool(self, instance_id: str, pool_path: str, layout: KVLayout) -> None:
        """Lets the host's kvxfer map this worker's pool."""

    async def unregister_pool(self, instance_id: str) -> None:
        """Forgets the pool (on shutdown)."""

    async def create_lease(self, instance_id: str, block_ids: list[int], num_tokens: int, ttl_s: float) -> kv_pb2.KVHandle:
        """Puts prefilled blocks under a lease and returns the handle a decode instance pulls with."""

    def lease_events(self, instance_id: str) -> AsyncIterator[LeaseEnded]:
        """Leases of this worker that ended: only then may it free their blocks."""

    async def pull(self, handle: kv_pb2.KVHandle, dst_instance_id: str, dst_block_ids: list[int], timeout_s: float) -> None:
        """Copies the handle's blocks into this worker's `dst_block_ids`; raises TransferError."""

    async def release(self, handle: kv_pb2.KVHandle) -> None:
        """Ends a lease without a pull (request cancelled)."""
