"""Block lists to byte ranges: a pull copies one range per run of blocks consecutive on both sides."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ByteRange:
    src: int  # byte offset in the source pool
    dst: int  # byte offset in the destination pool
    length: int


def check_blocks(block_ids: Sequence[int], num_blocks: int, what: str) -> None:
    """Raise ValueError unless the ids are distinct, non-empty and inside the pool."""
    if not block_ids:
        raise ValueError(f"{what}: no blocks")
    if len(set(block_ids)) != len(block_ids):
        raise ValueError(f"{what}: repeated block ids")
    bad = [b for b in block_ids if not 0 <= b < num_blocks]
    if bad:
        raise ValueError(f"{what}: block ids {bad[:4]} outside the pool of {num_blocks} blocks")


def block_ranges(src_blocks: Sequence[int], dst_blocks: Sequence[int], block_bytes: int) -> list[ByteRange]:
    """Pair src_blocks[i] with dst_blocks[i]; merge runs that are consecutive in both pools."""
    if len(src_blocks) != len(dst_blocks):
        raise ValueError(f"{len(src_blocks)} source blocks but {len(dst_blocks)} destination blocks")
    ranges: list[ByteRange] = []
    run_src = run_dst = run_len = 0
    for src, dst in zip(src_blocks, dst_blocks):
        if run_len and src == run_src + run_len and dst == run_dst + run_len:
            run_len += 1
            continue
        if run_len:
            ranges.append(ByteRange(run_src * block_bytes, run_dst * block_bytes, run_len * block_bytes))
        run_src, run_dst, run_len = src, dst, 1
    if run_len:
        ranges.append(ByteRange(run_src * block_bytes, run_dst * block_bytes, run_len * block_bytes))
    return ranges
