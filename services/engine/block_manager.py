"""Hands out KV blocks of a fixed-size pool: plain integers, no tensors.

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
        self._used: set[int] = set()
        self._lock = threading.Lock()

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self._used)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def try_allocate(self, num_blocks: int) -> list[int] | None:
        """Takes `num_blocks` free blocks, or none when fewer are free."""
        with self._lock:
            if num_blocks > len(self._free):
                return None
            blocks = [self._free.popleft() for _ in range(num_blocks)]
            self._used.update(blocks)
            return blocks

    def allocate(self, num_blocks: int) -> list[int]:
        """Takes `num_blocks` free blocks, or raises MemoryError taking none."""
        blocks = self.try_allocate(num_blocks)
        if blocks is None:
            raise MemoryError(f"need {num_blocks} KV blocks, {len(self._free)} free")
        return blocks

    def free(self, blocks: list[int]) -> None:
        """Returns blocks to the pool; frees none if any of them is not allocated."""
        with self._lock:
            stray = [b for b in blocks if b not in self._used]
            if stray:
                raise ValueError(f"block {stray[0]} is not allocated")
            self._used.difference_update(blocks)
            self._free.extend(blocks)
