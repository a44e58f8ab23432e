"""Past the knee (`distserve bench --overload 1.5,2`): the same load at multiples of the measured goodput, with
the router's SLO-aware admission off and on.

Both runs use one stack, started with admission set to refuse and the planner fitting the model online; a
request is judged against an SLO only when it carries one, so the run without the `x-slo-*` metadata is
admission off (plain FCFS) and the run with it is admission on. Goodput counts the requests that met both
objectives per second of offered load; a refused request counts as a miss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.bench.loadgen import RequestResult
from services.bench.slo import SLO, met

# The started stack's router refuses what it predicts to miss the SLO it is sent; its planner refits every 2 s.
ADMISSION_ENV = {"DISTSERVE_ROUTER_ADMISSION": "refuse", "DISTSERVE_ROUTER_MODEL_REFRESH_S": "1",
                 "DISTSERVE_PLANNER_FIT_INTERVAL": "2"}


def slo_metadata(slo: SLO) -> tuple[tuple[str, str], ...]:
    """The SLO as the router's gRPC metadata (milliseconds)."""
    return (("x-slo-ttft-ms", f"{slo.ttft_limit * 1e3:.3f}"), ("x-slo-tpot-ms", f"{slo.tpot_limit * 1e3:.3f}"))


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


def overload_point(multiple: float, rate: float, admission: bool, results: list[RequestResult], slo: SLO,
                   devices: int) -> OverloadPoint:
    ok = np.array([r.ok for r in results], bool)
    within = met(np.array([r.ttft for r in results]), np.array([r.tpot for r in results]), ok, slo)
    out = np.array([refused(r) for r in results], bool)
    n, admitted = len(results), int((~out).sum())
    attainment = float(within.mean()) if n else 0.0
    return OverloadPoint(multiple, rate, admission, n, int(out.sum()), float(out.mean()) if n else 0.0, attainment,
                         float(within[~out].mean()) if admitted else None, rate * attainment,
                         rate * attainment / devices)
