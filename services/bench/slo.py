"""Service-level objectives: TTFT and TPOT limits given in seconds or as a scale of lone-request latencies.

DistServe states SLOs as multiples of what one request alone takes on the device: the TTFT of a lone prompt of
the workload's mean length and the TPOT of a lone decode step (here at the mean prompt plus half the mean output
of context). Those base latencies come from the latency model fitted to a `distserve profile` of the device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from services.common.slo import SLO
from services.common.step_model.latency import TPCoefficients


@dataclass(frozen=True, slots=True)
class ScaledSLO:
    """An SLO at a scale: `base` holds the limits at scale 1 (both set) and the attainment target."""

    base: SLO
    scale: float = 1.0

    @property
    def limits(self) -> SLO:
        """The objectives requests are held to: the base limits times the scale."""
        return self.base.scaled(self.scale)

    def as_dict(self) -> dict[str, float | None]:
        limits = self.limits
        return {"ttft_s": limits.ttft, "tpot_s": limits.tpot, "scale": self.scale, "target": limits.attainment}


def lone_latencies(coeffs: TPCoefficients, mean_prompt: float, mean_output: float) -> tuple[float, float]:
    """(TTFT of a lone prompt of the mean length, one lone decode step at mid-output context), seconds."""
    p = round(mean_prompt)
    return coeffs.prefill_time(p, p * p), coeffs.decode_time(round(mean_prompt + mean_output / 2), 1)


def scaled_slo(base_ttft: float, base_tpot: float, ttft_scale: float, tpot_scale: float, scale: float,
               target: float) -> ScaledSLO:
    """TTFT = scale · ttft_scale · base TTFT, TPOT = scale · tpot_scale · base TPOT."""
    return ScaledSLO(SLO(ttft_scale * base_ttft, tpot_scale * base_tpot, target), scale)


def met(ttft: np.ndarray, tpot: np.ndarray, ok: np.ndarray, slo: ScaledSLO) -> np.ndarray:
    """Per request: completed, and both TTFT and TPOT within the limits."""
    limits = slo.limits
    return ok & (ttft <= limits.ttft) & (tpot <= limits.tpot)


def attainment(ttft: np.ndarray, tpot: np.ndarray, ok: np.ndarray, slo: ScaledSLO) -> float:
    """Share of requests meeting both objectives; failed requests count as misses."""
    return float(np.mean(met(ttft, tpot, ok, slo))) if len(ttft) else 0.0


def tightest_scale(ttft: np.ndarray, tpot: np.ndarray, ok: np.ndarray, slo: ScaledSLO) -> float:
    """The smallest scale at which attainment still reaches the target (inf when too many requests failed)."""
    base = slo.base
    need = np.where(ok, np.maximum(ttft / base.ttft, tpot / base.tpot), np.inf)
    k = math.ceil(base.attainment * len(need) - 1e-9)
    return float(np.sort(need)[k - 1]) if k >= 1 else 0.0


def wilson_interval(share: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial share over n trials (95% at z = 1.96); unlike share ± z·SE it
    stays within [0, 1] and keeps its coverage near 0 and 1, where attainment below the knee lies."""
    if n <= 0:
        return 0.0, 1.0
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)
