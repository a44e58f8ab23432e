"""What a destination kvxfer asks of a source kvxfer (blocks, or byte ranges of several pools for a re-sharding
pull), and the interfaces of the two sides of a cross-host pull (implemented over gRPC and UCX; the core depends
only on these)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from services.kvxfer.pools import PoolRanges

BLOCK_ID = np.dtype("<i4")
OFFSET = np.dtype("<i8")


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
    pull_id: str = ""  # the destination's random id of this pull, bound into encrypted chunks (sealing.py)


@dataclass(frozen=True, slots=True)
class SourceSpans:
    """Byte ranges of one source pool: lengths[i] bytes at offsets[i] (int64 arrays)."""

    pool_id: str
    offsets: np.ndarray
    lengths: np.ndarray

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SourceSpans) and self.pool_id == other.pool_id and \
            np.array_equal(self.offsets, other.offsets) and np.array_equal(self.lengths, other.lengths)


@dataclass(frozen=True, slots=True)
class RangeOrder:
    """A re-sharding pull across hosts: the source sends every part's ranges, part after part, in order; the
    destination alone knows where they go."""

    lease_id: str
    instance_id: str  # the lease's instance, which must own every part's pool
    parts: list[SourceSpans]
    checksum: bool
    pack: bool
    pull_id: str = ""


MAX_RANGES = 1 << 24  # per range order: a peer cannot make the source allocate more for one


@dataclass(frozen=True, slots=True)
class RangeHeader:
    """A range order's first message; its numbers follow as a second message of `items` int64."""

    lease_id: str
    instance_id: str
    pools: list[str]
    counts: list[int]
    checksum: bool
    pack: bool
    pull_id: str

    @property
    def items(self) -> int:
        return 2 * sum(self.counts)

    def with_body(self, body: np.ndarray) -> RangeOrder:
        """The order, given its numbers (every part's offsets, then every part's lengths)."""
        n = sum(self.counts)
        cuts = np.cumsum([0, *self.counts]).tolist()
        parts = [SourceSpans(pool, body[a:b], body[n + a:n + b]) for pool, a, b in zip(self.pools, cuts, cuts[1:])]
        return RangeOrder(self.lease_id, self.instance_id, parts, self.checksum, self.pack, self.pull_id)


def encode_order(order: PullOrder | RangeOrder) -> np.ndarray:
    """The order's first message: a 4-byte header length, a JSON header, then (a block order) the source and
    destination block ids as int32: block ids as JSON cost several times more, on the critical path of every
    cross-host pull (once on each side). A block order's header is a list, a range order's a dict; a range
    order's numbers, which may run to MBs, go as a second message (range_body)."""
    if isinstance(order, RangeOrder):
        header = json.dumps({"lease": order.lease_id, "instance": order.instance_id, "checksum": order.checksum,
                             "pack": order.pack, "pull": order.pull_id, "pools": [p.pool_id for p in order.parts],
                             "counts": [len(p.offsets) for p in order.parts]}).encode()
        body = b""
    else:
        header = json.dumps([order.lease_id, order.instance_id, order.block_bytes, order.checksum, order.pack,
                             order.pull_id, len(order.src_blocks), len(order.dst_blocks)]).encode()
        body = np.array([*order.src_blocks, *order.dst_blocks], BLOCK_ID).tobytes()
    return np.frombuffer(len(header).to_bytes(4, "little") + header + body, np.uint8)


def range_body(order: RangeOrder) -> np.ndarray:
    """A range order's second message: every part's offsets, then every part's lengths, as int64."""
    return np.concatenate([np.empty(0, OFFSET)] + [p.offsets for p in order.parts] + [p.lengths for p in order.parts]).astype(OFFSET)


def decode_order(buf: np.ndarray) -> PullOrder | RangeHeader:
    """The order (or a range order's header) encode_order wrote at the start of buf; ValueError if malformed."""
    size = int.from_bytes(buf[:4].tobytes(), "little")
    header = json.loads(buf[4:4 + size].tobytes())
    if isinstance(header, dict):
        counts = [int(c) for c in header["counts"]]
        if len(counts) != len(header["pools"]) or min(counts, default=0) < 0 or sum(counts) > MAX_RANGES:
            raise ValueError(f"range order of {sum(counts)} ranges in {len(counts)} parts")
        return RangeHeader(header["lease"], header["instance"], list(header["pools"]), counts,
                           bool(header["checksum"]), bool(header["pack"]), str(header["pull"]))
    lease_id, instance_id, block_bytes, checksum, pack, pull_id, n_src, n_dst = header
    ids = np.frombuffer(buf, BLOCK_ID, n_src + n_dst, 4 + size).tolist()
    return PullOrder(lease_id, instance_id, ids[:n_src], ids[n_src:], block_bytes, checksum, pack, str(pull_id))


@dataclass(slots=True)
class SourceGrant:
    parts: list[PoolRanges]  # what the source pools send, part after part (a block pull: one part)
    crc: int | None


class PullSource(Protocol):
    async def open_pull(self, order: PullOrder | RangeOrder) -> SourceGrant:
        """Pin the order's lease and return the source views; raise XferError if it cannot be served."""

    def close_pull(self, order: PullOrder | RangeOrder, ok: bool) -> None:
        """Unpin the lease; release it when the destination acknowledged the data."""


class PeerDirectory(Protocol):
    async def ucx_address(self, kvxfer_address: str) -> tuple[str, int]:
        """The UCX listener (host, port) of the kvxfer at this gRPC address; raise XferError."""

    def forget(self, kvxfer_address: str) -> None:
        """Drop a cached address (its kvxfer may have restarted)."""


class Puller(Protocol):
    async def pull(self, peer: tuple[str, int], order: PullOrder | RangeOrder, dst: list[PoolRanges],
                   verify: Callable[[int | None], Awaitable[None]]) -> None:
        """Receive the order's ranges from the peer into dst (its parts in the order's part order)."""
