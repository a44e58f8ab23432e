"""What a destination kvxfer asks of a source kvxfer, and what the source side must provide."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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
    views: list  # source pool slices, in range order
    crc: int | None


class PullSource(Protocol):
    async def open_pull(self, order: PullOrder) -> SourceGrant:
        """Pin the order's lease and return the source views; raise XferError if it cannot be served."""

    def close_pull(self, order: PullOrder, ok: bool) -> None:
        """Unpin the lease; release it when the destination acknowledged the data."""
