"""Goodput by measurement: step the rate by a factor from a start until attainment crosses the target, then bisect.

Each probe is a real run, so the search is frugal: it never probes a rate twice, and it stops after
`max_steps` factor steps in one direction (the goodput is then reported as the last rate that passed, or 0).
Where one run leaves a rate undecided (its attainment within a few standard errors of the target), the same
requests can run again and the decision is taken on all of them pooled (`pooled_runs`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

R = TypeVar("R")


class Judged(Protocol):
    attainment: float
    attainment_se: float


J = TypeVar("J", bound=Judged)


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


def fixed_rates_goodput(measure: Callable[[float], float], rates: list[float], target: float) -> float:
    """Highest of `rates` (each measured once, lowest first) whose attainment meets the target; 0 when none does.
    For rates chosen around a predicted knee (`--at-knee`): the time goes to points near the claim."""
    passed = [rate for rate in sorted(rates) if measure(rate) >= target]
    return max(passed, default=0.0)


def undecided(attainment: float, se: float, target: float, within: float) -> bool:
    """Whether a point's attainment lies within `within` standard errors of the target (so one more run of the same
    requests is worth its time before the search acts on it). A point with no spread (all met, or none) is decided."""
    return se > 0 and abs(attainment - target) <= within * se


def pooled_runs(run: Callable[[int], list[R]], judge: Callable[[list[R]], J], target: float, repeats: int,
                within: float) -> tuple[J, int]:
    """Runs `run(i)` (i = 0, 1, …) until the judgement of all their results pooled (its `attainment` and
    `attainment_se`) is decided or `repeats` runs are done. Returns that judgement and the number of runs."""
    results: list[R] = []
    for i in range(max(repeats, 1)):
        results += run(i)
        judged = judge(results)
        if not undecided(judged.attainment, judged.attainment_se, target, within):
            break
    return judged, i + 1
