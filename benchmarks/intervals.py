"""Paired on/off comparisons with a 95% interval, so a benchmark can say whether a few percent is resolved.

Each round measures both sides, so each round gives one comparison (on over off, or on minus off): the load a
round saw hits both. The figure is the median of those; its interval is a bootstrap over rounds (rounds drawn
with replacement, the median of each draw), percentile bounds. Too few rounds give a wide interval, not a
wrong narrow one.
"""

from __future__ import annotations

import operator
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

DRAWS = 2000


@dataclass(frozen=True, slots=True)
class Interval:
    median: float
    low: float
    high: float

    def text(self, scale: float = 1.0, digits: int = 3) -> str:
        return f"{scale * self.median:.{digits}f} [{scale * self.low:.{digits}f}, {scale * self.high:.{digits}f}]"


def paired(off: Sequence[float], on: Sequence[float], compare: Callable[[float, float], float],
           seed: int = 0) -> Interval:
    """The median of compare(on[i], off[i]) over rounds i, and its 95% bootstrap interval."""
    if len(off) != len(on) or not off:
        raise ValueError(f"paired rounds needed: {len(off)} off, {len(on)} on")
    values = [compare(b, a) for a, b in zip(off, on)]
    rng = random.Random(seed)
    draws = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(DRAWS))
    return Interval(statistics.median(values), draws[int(0.025 * DRAWS)], draws[int(0.975 * DRAWS) - 1])


def paired_ratio(off: Sequence[float], on: Sequence[float]) -> Interval:
    """on / off per round: its median and 95% interval."""
    return paired(off, on, operator.truediv)


def paired_difference(off: Sequence[float], on: Sequence[float]) -> Interval:
    """on - off per round: its median and 95% interval."""
    return paired(off, on, operator.sub)
