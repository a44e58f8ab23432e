"""Latency objectives (SLOs): a TTFT and a TPOT limit, and the share of requests that must meet both (DistServe's
attainment target). One type for the planner (it places for them), the bench (it measures attainment against
them) and the router (a request's own, from its `x-slo-*` headers, else the router's defaults)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SLO:
    ttft: float | None = None  # s; None: no objective for the phase (a request may name one alone)
    tpot: float | None = None  # s
    attainment: float = 0.9  # share of requests that must meet both

    def or_defaults(self, default: SLO) -> SLO:
        """Each phase's objective, else `default`'s."""
        return SLO(default.ttft if self.ttft is None else self.ttft, default.tpot if self.tpot is None else self.tpot,
                   self.attainment)

    def scaled(self, scale: float) -> SLO:
        """Both limits times `scale` (DistServe's SLO scale)."""
        return SLO(None if self.ttft is None else self.ttft * scale, None if self.tpot is None else self.tpot * scale,
                   self.attainment)
