"""The admission model's error as live metrics: per finished request, measured minus predicted TTFT and TPOT,
and the SLO attainment the model predicted against the measured one over the last requests."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from prometheus_client import Counter, Gauge, Histogram

from services.common.slo import SLO
from services.router.admission import Prediction

ERROR_BUCKETS = (-5, -2, -1, -0.5, -0.2, -0.1, -0.05, -0.02, -0.01, -0.005, -0.002, 0,
                 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5)
TTFT_ERROR = Histogram("distserve_slo_ttft_error_seconds", "measured minus predicted (at admission) TTFT",
                       buckets=ERROR_BUCKETS)
TPOT_ERROR = Histogram("distserve_slo_tpot_error_seconds", "measured minus predicted (at admission) TPOT",
                       buckets=ERROR_BUCKETS)
ATTAINMENT = Gauge("distserve_slo_attainment", "share of the last window's requests within their SLO",
                   ["phase", "source"])
DECISIONS = Counter("distserve_admission_total", "admission decisions", ["decision"])
DECISION_SECONDS = Histogram("distserve_admission_decision_seconds", "time to predict and decide one request",
                             buckets=(1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3))
PHASES = ("ttft", "tpot", "both")


@dataclass(frozen=True, slots=True)
class Outcome:
    """Whether one request met its SLO per phase, as predicted and as measured (None: no objective or figure)."""

    predicted: dict[str, bool | None]
    measured: dict[str, bool | None]


def _within(value: float | None, bound: float | None) -> bool | None:
    return None if value is None or bound is None else value <= bound


def _both(a: bool | None, b: bool | None) -> bool | None:
    known = [x for x in (a, b) if x is not None]
    return all(known) if known else None


def outcome(prediction: Prediction, slo: SLO, ttft_s: float, tpot_s: float | None) -> Outcome:
    pt, pp = _within(prediction.ttft_s, slo.ttft), _within(prediction.tpot_s, slo.tpot)
    mt, mp = _within(ttft_s, slo.ttft), _within(tpot_s, slo.tpot)
    return Outcome({"ttft": pt, "tpot": pp, "both": _both(pt, pp)}, {"ttft": mt, "tpot": mp, "both": _both(mt, mp)})


class AttainmentWindow:
    """The last `size` requests' outcomes; the gauges show the predicted and measured attainment per phase."""

    def __init__(self, size: int = 200) -> None:
        self.outcomes: deque[Outcome] = deque(maxlen=size)

    def add(self, item: Outcome) -> None:
        self.outcomes.append(item)
        for phase in PHASES:
            for source in ("predicted", "measured"):
                share = self.share(phase, source)
                if share is not None:
                    ATTAINMENT.labels(phase, source).set(share)

    def share(self, phase: str, source: str) -> float | None:
        """Attainment over the requests where both the prediction and the measurement of `phase` exist."""
        pairs = [(o.predicted[phase], o.measured[phase]) for o in self.outcomes]
        known = [pair[source == "measured"] for pair in pairs if None not in pair]
        return sum(known) / len(known) if known else None


def observe(prediction: Prediction, ttft_s: float, tpot_s: float | None) -> None:
    """The errors of one finished request's prediction."""
    if prediction.ttft_s is not None:
        TTFT_ERROR.observe(ttft_s - prediction.ttft_s)
    if prediction.tpot_s is not None and tpot_s is not None:
        TPOT_ERROR.observe(tpot_s - prediction.tpot_s)
