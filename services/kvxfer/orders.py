"""What a destination kvxfer asks of a source kvxfer, and the interfaces of the two sides of a
cross-host pull (implemented over gRPC and UCX; the core depends only on these)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from services.kvxfer.pools import PoolRanges


@dataclass(frozen=True, slots=True)
class PullOrder:
    """What the destination kvxfer asks of the source kvxfer."""

    lease_id: str
    instance_id: str
    src_blocks: list[int]
    dst_blocks: list[int]
    block_bytes: int
    checksum: bool
    pack: bool  # small ranges may travel packed (frames.py); False into device memory


@dataclass(slots=True)
class SourceGrant:
    ranges: PoolRanges  # what the source pool sends
    crc: int | None


class PullSource(Protocol):
    async def open_pull(self, order: PullOrder) -> SourceGrant:
        """Pin the order's lease and return the source views; raise XferError if it cannot be served."""

    def close_pull(self, order: PullOrder, ok: bool) -> None:
        """Unpin the lease; release it when the destination acknowledged the data."""


class PeerDirectory(Protocol):
    async def ucx_address(self, kvxfer_address: str) -> tuple[str, int]:
        """The UCX listener (host, port) of the kvxfer at this gRPC address; raise XferError."""

    def forget(self, kvxfer_address: str) -> None:
        """Drop a cached address (its kvxfer may have restarted)."""


class Puller(Protocol):
    async def pull(self, peer: tuple[str, int], order: PullOrder, dst: PoolRanges,
                   verify: Callable[[int | None], Awaitable[None]]) -> None:
        """Receive the order's ranges from the peer into dst."""
