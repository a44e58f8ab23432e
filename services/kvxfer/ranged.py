"""Pulls by explicit byte ranges (re-sharding between TP/PP layouts): the puller computes the ranges, kvxfer
checks they read only leased blocks of pools the lease's instance owns, and copies them (host pools).

Ranges travel and are checked as int64 arrays: no Python object per range.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from services.kvxfer.checksum import crc32
from services.kvxfer.errors import Failure, XferError
from services.kvxfer.pools import KERNEL_FROM_RANGES, MappedPool, PoolRanges, copy_all

OFFSET = np.dtype("<i8")


@dataclass(frozen=True, slots=True)
class RangeCopy:
    """length[i] bytes at src[i] of pool src_pool go to dst[i] of pool dst_pool."""

    src_pool: str
    dst_pool: str
    src: np.ndarray     # [R] int64
    dst: np.ndarray     # [R] int64
    length: np.ndarray  # [R] int64

    @classmethod
    def from_bytes(cls, src_pool: str, dst_pool: str, src: bytes, dst: bytes, length: bytes) -> RangeCopy:
        arrays = [np.frombuffer(b, OFFSET).astype(np.int64) for b in (src, dst, length)]
        if not len(arrays[0]) == len(arrays[1]) == len(arrays[2]):
            raise XferError(Failure.BAD_REQUEST, f"{src_pool} → {dst_pool}: offset and length arrays differ in size")
        return cls(src_pool, dst_pool, *arrays)

    def to_bytes(self) -> tuple[bytes, bytes, bytes]:
        return tuple(a.astype(OFFSET).tobytes() for a in (self.src, self.dst, self.length))


def checked_pools(pools: dict[str, MappedPool], c: RangeCopy, owner: str,
                  leased: list[int]) -> tuple[MappedPool, MappedPool]:
    """The copy's pools, once every source range lies inside one leased block of a pool `owner` owns and every
    destination range inside its pool; raises XferError(BAD_REQUEST) otherwise."""
    src, dst = pools.get(c.src_pool), pools.get(c.dst_pool)
    if src is None or dst is None:
        raise XferError(Failure.BAD_REQUEST, f"pool {c.src_pool if src is None else c.dst_pool} is not registered here")
    if src.leased_by != owner:
        raise XferError(Failure.BAD_REQUEST, f"pool {c.src_pool} is not covered by the leases of {owner}")
    if src.on_gpu or dst.on_gpu:
        raise XferError(Failure.BAD_REQUEST, "re-sharding pulls between device pools are not supported yet")
    if len(c.length) == 0:
        return src, dst
    if c.length.min() <= 0 or c.src.min() < 0 or c.dst.min() < 0:
        raise XferError(Failure.BAD_REQUEST, f"{c.src_pool} → {c.dst_pool}: negative offsets or empty ranges")
    block = src.layout.block_bytes
    first, last = c.src // block, (c.src + c.length - 1) // block
    if (first != last).any() or not np.isin(first, np.asarray(leased, np.int64)).all():
        raise XferError(Failure.BAD_REQUEST, f"{c.src_pool}: ranges outside the leased blocks")
    if (c.dst + c.length).max() > dst.layout.pool_bytes:
        raise XferError(Failure.BAD_REQUEST, f"{c.dst_pool}: ranges past the end of the pool")
    return src, dst


async def copy_in_pieces(src: MappedPool, dst: MappedPool, c: RangeCopy, piece_bytes: int) -> None:
    """Copies the ranges (the C loop, GIL released) in pieces of about `piece_bytes`, yielding in between; a
    cancelled pull stops between pieces."""
    ends = np.cumsum(c.length)
    cuts = np.searchsorted(ends, np.arange(piece_bytes, int(ends[-1]) if len(ends) else 0, piece_bytes), side="right")
    bounds = [0, *cuts.tolist(), len(c.length)]
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        if hi <= lo:
            continue
        if i:
            await asyncio.sleep(0)
        copy_all(dst.data.ctypes.data, c.dst[lo:hi].tolist() if hi - lo < KERNEL_FROM_RANGES else c.dst[lo:hi],
                 src.data.ctypes.data, c.src[lo:hi].tolist() if hi - lo < KERNEL_FROM_RANGES else c.src[lo:hi],
                 c.length[lo:hi].tolist() if hi - lo < KERNEL_FROM_RANGES else c.length[lo:hi])


def ranges_crc(pairs: list[tuple[MappedPool, MappedPool]], copies: list[RangeCopy], side: str) -> int:
    """CRC32 of all copies' ranges on one side ("src" or "dst"), in order."""
    views = []
    for (src, dst), c in zip(pairs, copies):
        pool, offsets = (src, c.src) if side == "src" else (dst, c.dst)
        views.extend(PoolRanges(pool, offsets.tolist(), c.length.tolist()).views())
    return crc32(views)
