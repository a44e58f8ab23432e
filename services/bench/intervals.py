"""Paired on/off ratios with a 95% interval, so a benchmark can say whether a few percent is resolved.

Each round measures both sides, so each round gives one ratio (on over off): the load a round saw hits both.
The figure is the median of those ratios; its interval is a bootstrap over rounds (rounds drawn with
replacement, the median of each draw), percentile bounds. Too few rounds give a wide interval, not a wrong
narrow one.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

DRAWS = 2000


@dataclass(frozen=True, slots=True)
class Interval:
    median: float
    low: float
    high: float

    def text(self) -> str:
        return f"{self.median:.3f} [{self.low:.3f}, {self.high:.3f}]"


def paired_ratio(off: Sequence[float], on: Sequence[float], seed: int = 0) -> Interval:
    """The median of on[i] / off[i] over rounds i, and its 95% bootstrap interval."""
    if len(off) != len(on) or not off:
        raise ValueError(f"paired rounds needed: {len(off)} off, {len(on)} on")
    ratios = [b / a for a, b in zip(off, on)]
    rng = random.Random(seed)
    draws = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(DRAWS))
    return Interval(statistics.median(ratios), draws[int(0.025 * DRAWS)], draws[int(0.975 * DRAWS) - 1])
