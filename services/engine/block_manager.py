"""Hands out KV blocks of a fixed-size pool: plain integers, no tensors.

A block may be shared (the n samples of one prompt hold its K/V once): it counts its holders and goes back to
the pool when the last one frees it.

Thread-safe: the engine thread grows and frees sequences' blocks while a decode instance's event loop reserves
blocks for pulls without waiting for the step to end.
"""

from __future__ import annotations

import threading
from collections import deque


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: deque[int] = deque(range(num_blocks))
        self._refs: dict[int, int] = {}  # allocated block → its holders
        self._lock = threading.Lock()

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self._refs)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def try_allocate(self, num_blocks: int) -> list[int] | None:
        """Takes `num_blocks` free blocks, or none when fewer are free."""
        with self._lock:
            if num_blocks > len(self._free):
                return None
            blocks = [self._free.popleft() for _ in range(num_blocks)]
            self._refs.update(dict.fromkeys(blocks, 1))
            return blocks

    def allocate(self, num_blocks: int) -> list[int]:
        """Takes `num_blocks` free blocks, or raises MemoryError taking none."""
        blocks = self.try_allocate(num_blocks)
        if blocks is None:
            raise MemoryError(f"need {num_blocks} KV blocks, {len(self._free)} free")
        return blocks

    def share(self, blocks: list[int]) -> None:
        """One more holder of each of these allocated blocks (a fork of a sequence)."""
        with self._lock:
            self._check(blocks)
            for b in blocks:
                self._refs[b] += 1

    def free(self, blocks: list[int]) -> None:
        """Drops one holder of each block; a block without holders goes back. Frees none if any is not allocated."""
        with self._lock:
            self._check(blocks)
            for b in blocks:
                self._refs[b] -= 1
                if not self._refs[b]:
                    del self._refs[b]
                    self._free.append(b)

    def _check(self, blocks: list[int]) -> None:
        stray = [b for b in blocks if b not in self._refs]
        if stray:
            raise ValueError(f"block {stray[0]} is not allocated")
