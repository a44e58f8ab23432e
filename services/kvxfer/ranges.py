"""Block lists to byte ranges: a pull copies one range per run of blocks consecutive on both sides."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Ranges:
    """A pull's byte ranges in order: length[i] bytes at offset src[i] of the source pool go to
    offset dst[i] of the destination pool."""

    src: list[int]
    dst: list[int]
    length: list[int]

    def __len__(self) -> int:
        return len(self.length)

    @property
    def nbytes(self) -> int:
        return sum(self.length)


def check_blocks(block_ids: Sequence[int], num_blocks: int, what: str) -> None:
    """Raise ValueError unless the ids are distinct, non-empty and inside the pool."""
    if not block_ids:
        raise ValueError(f"{what}: no blocks")
    if len(set(block_ids)) != len(block_ids):
        raise ValueError(f"{what}: repeated block ids")
    if min(block_ids) < 0 or max(block_ids) >= num_blocks:
        bad = [b for b in block_ids if not 0 <= b < num_blocks]
        raise ValueError(f"{what}: block ids {bad[:4]} outside the pool of {num_blocks} blocks")


def block_ranges(src_blocks: Sequence[int], dst_blocks: Sequence[int], block_bytes: int) -> Ranges:
    """Pair src_blocks[i] with dst_blocks[i]; merge runs that are consecutive in both pools.

    No object per block: an object per block costs a noticeable share of a block's memcpy (and numpy's fixed
    cost loses below a few hundred blocks)."""
    if len(src_blocks) != len(dst_blocks):
        raise ValueError(f"{len(src_blocks)} source blocks but {len(dst_blocks)} destination blocks")
    src: list[int] = []
    dst: list[int] = []
    length: list[int] = []
    next_src = next_dst = -1
    for s, d in zip(src_blocks, dst_blocks):
        if s == next_src and d == next_dst:
            length[-1] += block_bytes
        else:
            src.append(s * block_bytes)
            dst.append(d * block_bytes)
            length.append(block_bytes)
        next_src, next_dst = s + 1, d + 1
    return Ranges(src, dst, length)
