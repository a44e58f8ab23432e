"""Step costs that grow with the offered load: on a host where the instances share cores with the router, the
load generator, kvxfer and Redis (2 cores here), every served step slows as the rate rises, whatever its shape.

A run of 200 requests a point measured decode steps 1.0, 1.14, 1.24, 1.20 and 1.30 × their cost at 1.4 req/s as
the rate went 1.4, 2.1, 2.4, 2.6, 3.2 req/s (prefill: 1.0 to 1.13 ×). The latency model, fitted to shapes only,
predicted the higher rates from the steps of lower ones and so overestimated attainment by 5-24 points there.
`fit_load` fits, per phase, served ÷ modelled step time as a line in the offered rate over the windows served so
far (the calibration load and the earlier points); the predictor scales the model by it at the rate it predicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from services.engine.step_log import StepRecord
from services.planner.latency import TPCoefficients


@dataclass(frozen=True, slots=True)
class Window:
    rate: float  # req/s offered while it was served
    began: float  # unix seconds
    end: float


@dataclass(frozen=True, slots=True)
class LoadScaling:
    """Per phase, served ÷ modelled step time = intercept + slope × rate (slope ≥ 0)."""

    prefill: tuple[float, float] = (1.0, 0.0)  # (intercept, slope per req/s)
    decode: tuple[float, float] = (1.0, 0.0)

    def factors(self, rate: float) -> tuple[float, float]:
        """(prefill, decode) factors at `rate` req/s."""
        return tuple(max(a + b * rate, 0.1) for a, b in (self.prefill, self.decode))

    def as_dict(self) -> dict[str, float]:
        return {"prefill_intercept": self.prefill[0], "prefill_slope": self.prefill[1],
                "decode_intercept": self.decode[0], "decode_slope": self.decode[1]}


def fit_load(windows: Sequence[Window], prefill: Sequence[StepRecord], decode: Sequence[StepRecord],
             coeffs: TPCoefficients) -> LoadScaling:
    """The line through each window's served ÷ modelled time (weighted by its steps), per phase; flat where the
    windows span fewer than two rates."""
    pre = _line(windows, [r for r in prefill if r.kind == "prefill"],
                lambda r: coeffs.prefill_time(r.tokens, r.sum_sq))
    dec = _line(windows, [r for r in decode if r.kind == "decode"], lambda r: coeffs.decode_time(r.context, r.seqs))
    return LoadScaling(pre, dec)


def _line(windows: Sequence[Window], steps: list[StepRecord], modelled) -> tuple[float, float]:
    rates, ratios, weights = [], [], []
    for w in windows:
        inside = [r for r in steps if w.began <= r.start < w.end]
        if inside:
            rates.append(w.rate)
            ratios.append(sum(r.seconds for r in inside) / sum(modelled(r) for r in inside))
            weights.append(len(inside))
    if not rates:
        return (1.0, 0.0)
    x, y, w = np.array(rates), np.array(ratios), np.array(weights, float)
    mean_x, mean_y = np.average(x, weights=w), np.average(y, weights=w)
    spread = np.average((x - mean_x) ** 2, weights=w)
    slope = max(0.0, float(np.average((x - mean_x) * (y - mean_y), weights=w) / spread)) if spread > 0 else 0.0
    return (float(mean_y - slope * mean_x), slope)
