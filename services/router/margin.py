"""The admission's margin: a quantile of the model's recent errors (measured − predicted), added to each
prediction before it is set against the SLO.

The model leaves out what grows under overload (docs/admission.md, Limits), and by how much shows in its errors
on the requests that just finished. With the q-quantile of the last errors added (a split-conformal bound), about
a share q of requests like the recent ones come in within their prediction plus the margin; the errors are taken
against the bare prediction, so the margin does not feed on itself.
"""

from __future__ import annotations

import math
from collections import deque

from services.router.admission import Margin


class ErrorWindow:
    """The last `size` errors per phase; the margin is their `quantile` (none below `least` errors, or with
    quantile 0)."""

    def __init__(self, quantile: float, size: int = 200, least: int = 20) -> None:
        self.quantile = quantile
        self.least = least
        self._ttft: deque[float] = deque(maxlen=size)
        self._tpot: deque[float] = deque(maxlen=size)
        self.margin = Margin()

    def add(self, ttft_error_s: float | None, tpot_error_s: float | None) -> None:
        """One finished request's errors; the margin is recomputed here, not per decision."""
        if ttft_error_s is not None:
            self._ttft.append(ttft_error_s)
        if tpot_error_s is not None:
            self._tpot.append(tpot_error_s)
        self.margin = Margin(self._of(self._ttft), self._of(self._tpot))

    def _of(self, errors: deque[float]) -> float:
        if not self.quantile or len(errors) < self.least:
            return 0.0
        ordered = sorted(errors)  # the split-conformal rank: ceil((n + 1) q) of n
        return ordered[min(len(ordered), math.ceil((len(ordered) + 1) * self.quantile)) - 1]
