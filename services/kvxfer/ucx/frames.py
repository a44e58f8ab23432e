"""How a cross-host pull's ranges travel: one UCX message per frame.

A frame of one range goes from the source pool into the destination pool with no copy. Runs of
smaller ranges go as frames of up to FRAME_BYTES: a message's UCX and Python work costs far more
than a memcpy of a 64 KB block, so 4096 random 64 KB blocks go as 64 messages instead of
4096. A side moves such a frame of host memory as one scatter-gather message (iov.py), or else packs
it through reused staging buffers on the event loop (a thread hop per frame cost more than it saved).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DIRECT_BYTES = 1 << 20  # ranges this large always travel alone, zero-copy
FRAME_BYTES = 4 << 20
STAGING_KEPT = 32


@dataclass(frozen=True, slots=True)
class Frame:
    first: int  # index of its first range
    count: int
    nbytes: int

    @property
    def packed(self) -> bool:
        return self.count > 1


def plan_frames(lengths: Sequence[int] | np.ndarray, pack: bool) -> list[Frame]:
    """Group consecutive ranges (by their lengths) into frames; both sides plan the same frames.

    Greedy: a frame takes ranges under DIRECT_BYTES while they fit in FRAME_BYTES. A loop per frame, not per
    range (a re-sharding pull has a range per token slot, layer and K/V)."""
    size = np.asarray(lengths, np.int64)
    n = len(size)
    if not pack:
        return [Frame(i, 1, int(b)) for i, b in enumerate(size.tolist())]
    ends = np.cumsum(size)
    big = np.flatnonzero(size >= DIRECT_BYTES).tolist() + [n]  # indices of ranges that travel alone
    frames: list[Frame] = []
    i = k = 0
    while i < n:
        while big[k] < i:
            k += 1
        start = int(ends[i - 1]) if i else 0
        if big[k] == i:
            j = i + 1
        else:  # up to the next big range, as many as fit (the first always does: it is under FRAME_BYTES)
            j = min(big[k], max(i + 1, int(np.searchsorted(ends, start + FRAME_BYTES, side="right"))))
        frames.append(Frame(i, j - i, int(ends[j - 1]) - start))
        i = j
    return frames


class Staging:
    """Host buffers of `size` bytes, reused so packing does not fault fresh pages in for each frame."""

    def __init__(self, size: int = FRAME_BYTES) -> None:
        self._size = size
        self._free: list[np.ndarray] = []

    def get(self, nbytes: int = 0) -> np.ndarray:
        """A buffer of at least nbytes: a kept one, or a fresh one (not kept) where nbytes exceeds the size."""
        if nbytes > self._size:
            return np.empty(nbytes, dtype=np.uint8)
        return self._free.pop() if self._free else np.ones(self._size, dtype=np.uint8)

    def put(self, buf: np.ndarray) -> None:
        if len(self._free) < STAGING_KEPT and len(buf) == self._size:
            self._free.append(buf)
