"""The admission's margin: a quantile of the model's recent errors (measured − predicted), added to each
prediction before it is set against the SLO.

The model leaves out what grows under overload (docs/admission.md, Limits), and by how much shows in its errors
on the requests that just finished. With the q-quantile of the last errors added (a split-conformal bound), about
a share q of requests like the recent ones come in within their prediction plus the margin; the errors are taken
against the bare prediction, so the margin does not feed on itself. Errors older than `horizon_s` drop out: a
margin that refuses nearly everything gets no new errors, and would otherwise keep refusing.
"""

from __future__ import annotations

import math
from collections import deque

from services.router.admission import Margin


class ErrorWindow:
    """The last `size` errors per phase within `horizon_s`; the margin is their quantile per phase (none below
    `least` errors, or with quantile 0)."""

    def __init__(self, ttft_quantile: float, tpot_quantile: float = 0.0, size: int = 200, least: int = 20,
                 horizon_s: float = 60.0) -> None:
        self.quantiles = (ttft_quantile, tpot_quantile)
        self.least = least
        self.horizon_s = horizon_s
        self._errors: tuple[deque[tuple[float, float]], ...] = (deque(maxlen=size), deque(maxlen=size))
        self.margin = Margin()

    def add(self, now: float, ttft_error_s: float | None, tpot_error_s: float | None) -> None:
        """One finished request's errors at monotonic time `now`; the margin is recomputed here."""
        for errors, error in zip(self._errors, (ttft_error_s, tpot_error_s)):
            if error is not None:
                errors.append((now, error))
        self._drop_old(now)
        self._recompute()

    def expire(self, now: float) -> None:
        """Drops the errors older than the horizon (cheap when none is: called per decision)."""
        if self._drop_old(now):
            self._recompute()

    def _drop_old(self, now: float) -> bool:
        dropped = False
        for errors in self._errors:
            while errors and errors[0][0] < now - self.horizon_s:
                errors.popleft()
                dropped = True
        return dropped

    def _recompute(self) -> None:
        self.margin = Margin(*(self._of(e, q) for e, q in zip(self._errors, self.quantiles)))

    def _of(self, errors: deque[tuple[float, float]], quantile: float) -> float:
        if not quantile or len(errors) < self.least:
            return 0.0
        ordered = sorted(error for _, error in errors)  # the split-conformal rank: ceil((n + 1) q) of n
        return ordered[min(len(ordered), math.ceil((len(ordered) + 1) * quantile)) - 1]
