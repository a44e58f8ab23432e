"""Service-level objectives: TTFT and TPOT limits given in seconds or as a scale of lone-request latencies.

DistServe states SLOs as multiples of what one request alone takes on the device: the TTFT of a lone prompt of
the workload's mean length and the TPOT of a lone decode step (here at the mean prompt plus half the mean output
of context). Those base latencies come from the latency model fitted to a `distserve profile` of the device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from services.planner.latency import TPCoefficients


@dataclass(frozen=True, slots=True)
class SLO:
    """Limits at scale 1 (seconds), the scale applied to both, and the share of requests that must meet them."""

    ttft: float
    tpot: float
    scale: float = 1.0
    target: float = 0.9

    @property
    def ttft_limit(self) -> float:
        return self.ttft * self.scale

    @property
    def tpot_limit(self) -> float:
        return self.tpot * self.scale

    def as_dict(self) -> dict[str, float]:
        return {"ttft_s": self.ttft_limit, "tpot_s": self.tpot_limit, "scale": self.scale, "target": self.target}


def lone_latencies(coeffs: TPCoefficients, mean_prompt: float, mean_output: float) -> tuple[float, float]:
    """(TTFT of a lone prompt of the mean length, one lone decode step at mid-output context), seconds."""
    p = round(mean_prompt)
    return coeffs.prefill_time(p, p * p), coeffs.decode_time(round(mean_prompt + mean_output / 2), 1)


def scaled_slo(base_ttft: float, base_tpot: float, ttft_scale: float, tpot_scale: float, scale: float,
               target: float) -> SLO:
    """TTFT = scale · ttft_scale · base TTFT, TPOT = scale · tpot_scale · base TPOT."""
    return SLO(ttft_scale * base_ttft, tpot_scale * base_tpot, scale, target)


def met(ttft: np.ndarray, tpot: np.ndarray, ok: np.ndarray, slo: SLO) -> np.ndarray:
    """Per request: completed, and both TTFT and TPOT within the limits."""
    return ok & (ttft <= slo.ttft_limit) & (tpot <= slo.tpot_limit)


def attainment(ttft: np.ndarray, tpot: np.ndarray, ok: np.ndarray, slo: SLO) -> float:
    """Share of requests meeting both objectives; failed requests count as misses."""
    return float(np.mean(met(ttft, tpot, ok, slo))) if len(ttft) else 0.0


def tightest_scale(ttft: np.ndarray, tpot: np.ndarray, ok: np.ndarray, slo: SLO) -> float:
    """The smallest scale at which attainment still reaches the target (inf when too many requests failed)."""
    need = np.where(ok, np.maximum(ttft / slo.ttft, tpot / slo.tpot), np.inf)
    k = math.ceil(slo.target * len(need) - 1e-9)
    return float(np.sort(need)[k - 1]) if k >= 1 else 0.0


def wilson_interval(share: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial share over n trials (95% at z = 1.96); unlike share ± z·SE it
    stays within [0, 1] and keeps its coverage near 0 and 1, where attainment below the knee lies."""
    if n <= 0:
        return 0.0, 1.0
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)
