"""Past the knee (`distserve bench --overload 1.5,2`): the same load at multiples of the measured goodput, with
the router's SLO-aware admission off and on.

Both runs use one stack, its planner fitting the model online and its router predicting every request (so its
live error metrics cover the sweep too); every request carries the SLO as `x-slo-*` metadata. The router starts
with admission off (predict only: plain FCFS) and is restarted to refuse before the runs with admission on.
Goodput counts the requests that met both objectives per second of offered load; a refused request counts as a
miss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from services.bench.loadgen import RequestResult
from services.bench.slo import ScaledSLO, met

REFUSE_ENV = {"DISTSERVE_ROUTER_ADMISSION": "refuse"}  # the router restarted for admission on


def admission_env(prefill_batch_tokens: int) -> dict[str, str]:
    """The started stack's: the router predicts (admission off) from the planner's fit, refitted every 2 s."""
    return {"DISTSERVE_ROUTER_ADMISSION": "off", "DISTSERVE_ROUTER_MODEL_REFRESH_S": "1",
            "DISTSERVE_ROUTER_PREFILL_BATCH_TOKENS": str(prefill_batch_tokens), "DISTSERVE_PLANNER_FIT_INTERVAL": "2"}


def slo_metadata(slo: ScaledSLO) -> tuple[tuple[str, str], ...]:
    """The SLO as the router's gRPC metadata (milliseconds)."""
    limits = slo.limits
    return (("x-slo-ttft-ms", f"{limits.ttft * 1e3:.3f}"), ("x-slo-tpot-ms", f"{limits.tpot * 1e3:.3f}"))


def refused(result: RequestResult) -> bool:
    """Refused by the router's admission (not by a full queue)."""
    return result.error.startswith("RESOURCE_EXHAUSTED") and "slo:" in result.error


@dataclass(frozen=True, slots=True)
class OverloadPoint:
    multiple: float  # of the measured goodput (the knee)
    rate: float  # req/s offered
    admission: bool
    requests: int
    refused: int
    share_refused: float
    attainment: float  # over every request sent (refused ones miss)
    admitted_attainment: float | None  # over the admitted ones
    goodput: float  # req/s that met both objectives
    goodput_per_device: float
    live: dict = field(default_factory=dict)  # the router's live model errors over the run (`live.py`)


def overload_point(multiple: float, rate: float, admission: bool, results: list[RequestResult], slo: ScaledSLO,
                   devices: int) -> OverloadPoint:
    ok = np.array([r.ok for r in results], bool)
    within = met(np.array([r.ttft for r in results]), np.array([r.tpot for r in results]), ok, slo)
    out = np.array([refused(r) for r in results], bool)
    n, admitted = len(results), int((~out).sum())
    attainment = float(within.mean()) if n else 0.0
    return OverloadPoint(multiple, rate, admission, n, int(out.sum()), float(out.mean()) if n else 0.0, attainment,
                         float(within[~out].mean()) if admitted else None, rate * attainment,
                         rate * attainment / devices)
