"""A contiguous range of heads, columns or layers: what part of the model a rank, or a KV pool, holds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """[start, start + count)."""

    start: int
    count: int

    @property
    def stop(self) -> int:
        return self.start + self.count
