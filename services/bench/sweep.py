"""Goodput by measurement: step the rate by a factor from a start until attainment crosses the target, then bisect.

Each probe is a real run, so the search is frugal: it never measures a rate twice, and it stops after
`max_steps` factor steps in one direction (the goodput is then reported as the last rate that passed, or 0).
"""

from __future__ import annotations

from collections.abc import Callable


def goodput_search(measure: Callable[[float], float], start: float, target: float, factor: float = 1.5,
                   bisect_steps: int = 2, max_steps: int = 6) -> float:
    """Highest rate found with measure(rate) ≥ target; `measure` returns the attainment at a rate."""
    seen: dict[float, float] = {}

    def passes(rate: float) -> bool:
        if rate not in seen:
            seen[rate] = measure(rate)
        return seen[rate] >= target

    if passes(start):
        lo, hi = start, start * factor
        for _ in range(max_steps):
            if not passes(hi):
                break
            lo, hi = hi, hi * factor
        else:
            return lo
    else:
        lo, hi = 0.0, start
        for _ in range(max_steps):
            if passes(hi / factor):
                lo = hi / factor
                break
            hi /= factor
        else:
            return 0.0
    for _ in range(bisect_steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    return lo
