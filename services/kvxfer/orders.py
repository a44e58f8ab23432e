"""What a destination kvxfer asks of a source kvxfer, and the interfaces of the two sides of a
cross-host pull (implemented over gRPC and UCX; the core depends only on these)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from services.kvxfer.pools import PoolRanges

BLOCK_ID = np.dtype("<i4")


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


def encode_order(order: PullOrder) -> np.ndarray:
    """The order as sent: a 4-byte header length, a JSON header, then the source and destination block ids as
    int32: block ids as JSON cost several times more, on the critical path of every cross-host pull (once on each
    side)."""
    header = json.dumps([order.lease_id, order.instance_id, order.block_bytes, order.checksum, order.pack,
                         len(order.src_blocks), len(order.dst_blocks)]).encode()
    ids = np.array([*order.src_blocks, *order.dst_blocks], BLOCK_ID)
    return np.frombuffer(len(header).to_bytes(4, "little") + header + ids.tobytes(), np.uint8)


def decode_order(buf: np.ndarray) -> PullOrder:
    """The order encode_order wrote at the start of buf."""
    size = int.from_bytes(buf[:4].tobytes(), "little")
    lease_id, instance_id, block_bytes, checksum, pack, n_src, n_dst = json.loads(buf[4:4 + size].tobytes())
    ids = np.frombuffer(buf, BLOCK_ID, n_src + n_dst, 4 + size).tolist()
    return PullOrder(lease_id, instance_id, ids[:n_src], ids[n_src:], block_bytes, checksum, pack)


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
