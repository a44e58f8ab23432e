"""Pulls by explicit byte ranges (re-sharding between TP/PP layouts): the puller computes the ranges, kvxfer
checks they read only leased blocks of pools the lease's instance owns, and copies them (host pools by one C loop,
device pools by one kernel launch per pool pair; across hosts the source kvxfer checks its side and sends the
ranges over UCX, packed into frames, core.py).

Ranges travel and are checked as int64 arrays: no Python object per range.
"""

from __future__ import annotations

import asyncio
import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from services.common.cbuild import Kernel, kernel_function
from services.kvxfer.checksum import crc32
from services.kvxfer.errors import Failure, XferError
from services.kvxfer.pools import HERE, MappedPool, PoolRanges
from services.kvxfer.ranges import block_ranges

OFFSET = np.dtype("<i8")
STREAM_FROM_BYTES = 2 << 20  # larger pulls bypass the caches on their way in (as memcpy does for large copies)


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
        arrays = [np.frombuffer(b, OFFSET) for b in (src, dst, length)]  # views of the message: no copy
        if not len(arrays[0]) == len(arrays[1]) == len(arrays[2]):
            raise XferError(Failure.BAD_REQUEST, f"{src_pool} → {dst_pool}: offset and length arrays differ in size")
        return cls(src_pool, dst_pool, *arrays)

    @classmethod
    def of_blocks(cls, src_pool: str, dst_pool: str, src_blocks: Sequence[int], dst_blocks: Sequence[int],
                  block_bytes: int) -> RangeCopy:
        """Whole blocks, src_blocks[i] → dst_blocks[i], between pools of one layout."""
        ranges = block_ranges(src_blocks, dst_blocks, block_bytes)
        return cls(src_pool, dst_pool, *(np.asarray(a, OFFSET) for a in (ranges.src, ranges.dst, ranges.length)))

    def to_bytes(self) -> tuple[bytes, bytes, bytes]:
        return tuple(a.astype(OFFSET).tobytes() for a in (self.src, self.dst, self.length))


def checked_pools(pools: dict[str, MappedPool], c: RangeCopy, owner: str,
                  leased: list[int]) -> tuple[MappedPool, MappedPool]:
    """The copy's pools, once every source range lies inside leased blocks of a pool `owner` owns and every
    destination range inside its pool; raises XferError(BAD_REQUEST) otherwise."""
    return (checked_source(pools, c.src_pool, c.src, c.length, owner, leased),
            checked_destination(pools, c.dst_pool, c.dst, c.length))


def checked_source(pools: dict[str, MappedPool], pool_id: str, offsets: np.ndarray, lengths: np.ndarray, owner: str,
                   leased: list[int]) -> MappedPool:
    """The source pool, once `owner` owns it and every block each range touches is leased (a range
    may run over several blocks: a run of them on both sides); the source kvxfer checks this itself on a
    cross-host pull."""
    src = _registered_pool(pools, pool_id, offsets, lengths)
    if src.leased_by != owner:
        raise XferError(Failure.BAD_REQUEST, f"pool {pool_id} is not covered by the leases of {owner}")
    if len(lengths) == 0:
        return src
    block = src.layout.block_bytes
    first, last = offsets // block, (offsets + lengths - 1) // block
    ids = np.unique(np.asarray(leased, np.int64))  # all inside the pool (checked when the lease was made)
    held = np.searchsorted(ids, last, side="right") - np.searchsorted(ids, first)  # leased blocks of each range
    if (held != last - first + 1).any():
        raise XferError(Failure.BAD_REQUEST, f"{pool_id}: ranges outside the leased blocks")
    return src


def checked_destination(pools: dict[str, MappedPool], pool_id: str, offsets: np.ndarray,
                        lengths: np.ndarray) -> MappedPool:
    """The destination pool, once it holds every range."""
    dst = _registered_pool(pools, pool_id, offsets, lengths)
    if len(lengths) and (offsets + lengths).max() > dst.layout.pool_bytes:
        raise XferError(Failure.BAD_REQUEST, f"{pool_id}: ranges past the end of the pool")
    return dst


def _registered_pool(pools: dict[str, MappedPool], pool_id: str, offsets: np.ndarray,
                     lengths: np.ndarray) -> MappedPool:
    pool = pools.get(pool_id)
    if pool is None:
        raise XferError(Failure.BAD_REQUEST, f"pool {pool_id} is not registered here")
    if len(offsets) != len(lengths):
        raise XferError(Failure.BAD_REQUEST, f"{pool_id}: offset and length arrays differ in size")
    if len(lengths) and (lengths.min() <= 0 or offsets.min() < 0):
        raise XferError(Failure.BAD_REQUEST, f"{pool_id}: negative offsets or empty ranges")
    return pool


def spans_kernel() -> Kernel | None:
    """copy_ranges.c's loop over absolute addresses, or None (no compiler, or C helpers off)."""
    return kernel_function("copy_ranges", "copy_spans", (ctypes.c_int64,) + (ctypes.c_void_p,) * 3 + (ctypes.c_int64,),
                           None, HERE)


def absolute_spans(pairs: list[tuple[MappedPool, MappedPool]], copies: list[RangeCopy]) -> tuple[np.ndarray, ...]:
    """All copies' ranges, in order, as absolute (dst, src, length) address arrays (one C loop for them all)."""
    dst = np.concatenate([d.data.ctypes.data + c.dst for (_, d), c in zip(pairs, copies)])
    src = np.concatenate([s.data.ctypes.data + c.src for (s, _), c in zip(pairs, copies)])
    return dst, src, np.concatenate([c.length for c in copies])


async def copy_in_pieces(pairs: list[tuple[MappedPool, MappedPool]], copies: list[RangeCopy], piece_bytes: int) -> None:
    """Copies every range (the C loop, GIL released) in pieces of about `piece_bytes`, yielding in between; a
    cancelled pull stops between pieces. Without a C compiler: a memmove per range. Device pools: `copy_device`."""
    if not copies:
        return
    if any(s.on_gpu or d.on_gpu for s, d in pairs):
        copy_device(pairs, copies)
        return
    dst, src, length = absolute_spans(pairs, copies)
    kernel = spans_kernel()
    ends = np.cumsum(length)
    stream = int(len(ends) > 0 and ends[-1] >= STREAM_FROM_BYTES)
    cuts = np.searchsorted(ends, np.arange(piece_bytes, int(ends[-1]) if len(ends) else 0, piece_bytes), side="right")
    bounds = [0, *cuts.tolist(), len(length)]
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        if hi <= lo:
            continue
        if i:
            await asyncio.sleep(0)
        if kernel is not None:
            kernel(hi - lo, dst[lo:].ctypes.data, src[lo:].ctypes.data, length[lo:].ctypes.data, stream)
        else:
            for d, s, n in zip(dst[lo:hi].tolist(), src[lo:hi].tolist(), length[lo:hi].tolist()):
                ctypes.memmove(d, s, n)


def copy_device(pairs: list[tuple[MappedPool, MappedPool]], copies: list[RangeCopy]) -> None:
    """Copies where a pool is in device memory: one kernel launch per copy between pools on one GPU
    (gpu.copy_spans); between a GPU and the host, or two GPUs, a device copy per range."""
    from services.kvxfer import gpu

    for (src, dst), c in zip(pairs, copies):
        if src.on_gpu and dst.on_gpu and gpu.copy_spans(dst.data, c.dst, src.data, c.src, c.length):
            continue
        gpu.copy_views(PoolRanges(dst, c.dst.tolist(), c.length.tolist()).views(),
                       PoolRanges(src, c.src.tolist(), c.length.tolist()).views())


def ranges_crc(pairs: list[tuple[MappedPool, MappedPool]], copies: list[RangeCopy], side: str) -> int:
    """CRC32 of all copies' ranges on one side ("src" or "dst"), in order."""
    views = []
    for (src, dst), c in zip(pairs, copies):
        pool, offsets = (src, c.src) if side == "src" else (dst, c.dst)
        views.extend(PoolRanges(pool, offsets.tolist(), c.length.tolist()).views())
    return crc32(views)
